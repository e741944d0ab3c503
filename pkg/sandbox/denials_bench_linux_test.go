//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/landlockaudit"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// withoutDenials hides DenialEvents: the run reads no audit records and
// leaves audit off (the "audit off" side of the benchmark).
type withoutDenials struct{ Events }

// burstBench sets up a sandbox environment for the denial benchmarks and
// returns a runner: it runs args with denial events on (audit) or off and
// returns the command's own reported time and the 1001 events emitted.
func burstBench(b *testing.B) (run func(audit bool, args []string) (time.Duration, int), exe, secret string) {
	testutil.RequireRoot(b)
	testutil.RequireFeature(b, "landlock")
	testutil.HostLock(b, "audit")
	if st, err := landlockaudit.GetStatus(); err != nil || st.Enabled != 0 || st.PID != 0 {
		testutil.RequireData(b, "audit off with no audit daemon (the baseline)", err)
	}
	ro, err := os.MkdirTemp("/var/tmp", "palisade-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(ro) })
	os.Chmod(ro, 0o755)
	exe = filepath.Join(ro, "attacker")
	src, _ := os.ReadFile(os.Args[0])
	os.WriteFile(exe, src, 0o755)
	out, err := os.MkdirTemp("/var/tmp", "palisade-outside-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(out) })
	os.Chmod(out, 0o755)
	secret = filepath.Join(out, "secret")
	os.WriteFile(secret, []byte("x"), 0o644)
	workdir := b.TempDir()
	os.Chown(workdir, SandboxID, SandboxID)
	stateDir := filepath.Join(b.TempDir(), "state")
	env, _ := BuildEnv(EnvInput{Host: os.Environ(), Workdir: workdir, Name: "t"})
	policy := PolicyInfo{SHA256: strings.Repeat("ab", 32), Source: "flag", Path: "/bench/policy.yaml",
		ReadOnly: []string{"/usr", "/bin", "/lib", "/lib64", "/etc", ro}, ReadWrite: []string{"/tmp"},
		IncludeWorkdir: true, HardRequirement: true, RunAsUser: "sandbox", RunAsGroup: "sandbox"}
	run = func(audit bool, args []string) (time.Duration, int) {
		b.Helper()
		var evbuf, stdout bytes.Buffer
		var ev Events = NewOCSFEvents(ocsf.NewWriter(&evbuf), "bench", "bench", args)
		if !audit {
			ev = withoutDenials{ev}
		}
		res, err := Run(context.Background(), Options{Kind: state.KindAdhoc, Args: args, Env: env, Workdir: workdir,
			StateRoot: stateDir, Policy: policy, InitExe: exe, Events: ev,
			Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &bytes.Buffer{}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("run: %v exit %d", err, res.ExitCode)
		}
		ns, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(stdout.String()), "elapsed_ns="), 10, 64)
		if err != nil {
			b.Fatalf("burst output %q", stdout.String())
		}
		return time.Duration(ns), bytes.Count(evbuf.Bytes(), []byte(`"class_uid":1001`))
	}
	return run, exe, secret
}

// BenchmarkDenialBurst runs a command in a sandbox that makes 10,000
// denied opens as fast as it can, with denial events (audit on, the
// watcher reading) and without (audit off), and reports the command's
// own time per denied open. The two sides alternate per iteration so
// load changes hit both:
//
//	go test -run '^$' -bench DenialBurst -benchtime 10x ./pkg/sandbox
//
// BenchmarkDenialBurst runs a command in a sandbox that makes 10,000
// denied opens as fast as it can, with denial events (audit on, the
// watcher reading) and without (audit off), and reports the command's
// own time per denied open. The two sides alternate per iteration so
// load changes hit both:
//
//	go test -run '^$' -bench DenialBurst -benchtime 10x ./pkg/sandbox
func BenchmarkDenialBurst(b *testing.B) {
	run, exe, secret := burstBench(b)
	denied := []string{exe, "fsdeny", "burst:" + secret + ":10000"}
	allowed := []string{exe, "fsdeny", "burst:" + exe + ":10000"}
	var on, off, aon, aoff time.Duration
	events := 0
	for b.Loop() {
		d, _ := run(false, denied)
		off += d
		d, n := run(true, denied)
		on += d
		events += n
		d, _ = run(false, allowed)
		aoff += d
		d, _ = run(true, allowed)
		aon += d
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) / 10000 }
	b.ReportMetric(per(off), "ns/denied-open-audit-off")
	b.ReportMetric(per(on), "ns/denied-open-audit-on")
	b.ReportMetric(float64(on)/float64(off), "denied-on/off")
	b.ReportMetric(per(aoff), "ns/allowed-open-audit-off")
	b.ReportMetric(per(aon), "ns/allowed-open-audit-on")
	b.ReportMetric(float64(aon)/float64(aoff), "allowed-on/off")
	b.ReportMetric(float64(events)/float64(b.N), "events/run")
}

// BenchmarkStartWithDenialEvents measures a whole sandbox run of a
// command that does nothing, with denial events (audit lease, watcher,
// final drain) and without, alternating:
//
//	go test -run '^$' -bench StartWithDenialEvents -benchtime 50x ./pkg/sandbox
func BenchmarkStartWithDenialEvents(b *testing.B) {
	run, exe, _ := burstBench(b)
	args := []string{exe, "fsdeny", "burst:" + exe + ":0"}
	var on, off time.Duration
	for b.Loop() {
		t0 := time.Now()
		run(false, args)
		t1 := time.Now()
		run(true, args)
		off += t1.Sub(t0)
		on += time.Since(t1)
	}
	b.ReportMetric(float64(off.Microseconds())/float64(b.N), "us/run-off")
	b.ReportMetric(float64(on.Microseconds())/float64(b.N), "us/run-on")
	b.ReportMetric(float64(on)/float64(off), "on/off")
}
