package policysync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/policies"
)

const agent = "worker-1"

// render returns a valid operator policy for a given hub host, so tests
// have distinct assignments.
func render(t testing.TB, hubHost string) string {
	t.Helper()
	out, err := policy.Render(policies.MacHermesTemplate, map[string]string{
		"AGENT_USER": "hermes", "MAC_HUB_HOST": hubHost,
		"MAC_HUB_PORT": "8080", "MODEL_GATEWAY_HOST": "models.example.com",
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func assignment(t testing.TB, text string, version int64) hub.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return hub.Policy{PolicyText: text, Version: version, Checksum: "sha256:" + p.Checksum(), PolicyName: "fleet-default"}
}

type fixture struct {
	srv       *hubtest.Server
	client    *hub.Client
	home      string
	env       map[string]string
	syncer    *Syncer
	tokenFile string
}

func (f *fixture) path() string { return filepath.Join(f.home, ".mac", "openshell-policy.yaml") }

func setup(t *testing.T) *fixture {
	t.Helper()
	srv := hubtest.Start(t)
	dir := t.TempDir()
	tok, err := srv.TokenFile(dir, agent)
	if err != nil {
		t.Fatal(err)
	}
	c, err := hub.New(hub.Config{URL: srv.URL, AgentID: agent, TokenFile: tok, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, client: c, home: t.TempDir(), env: map[string]string{}, tokenFile: tok}
	f.syncer = &Syncer{Hub: c, Home: f.home, Getenv: func(k string) string { return f.env[k] }}
	return f
}

// install puts text at the home policy path as an operator would.
func (f *fixture) install(t *testing.T, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.path()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.path(), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

type snapshot struct {
	data  []byte
	ino   uint64
	mtime time.Time
	mode  fs.FileMode
}

func snap(t *testing.T, p string) snapshot {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{data: data, ino: st.Sys().(*syscall.Stat_t).Ino, mtime: st.ModTime(), mode: st.Mode()}
}

func (s snapshot) same(o snapshot) bool {
	return bytes.Equal(s.data, o.data) && s.ino == o.ino && s.mtime.Equal(o.mtime) && s.mode == o.mode
}

func TestConverge(t *testing.T) {
	f := setup(t)
	a := assignment(t, render(t, "hub-a.example.internal"), 3)
	f.srv.Assign(agent, a)

	res := f.syncer.Once(context.Background())
	if res.Outcome != OutcomeInstalled || !res.Converged || !res.Wrote || !res.OK() || !res.Reported {
		t.Fatalf("result = %+v", res)
	}
	got := snap(t, f.path())
	if string(got.data) != a.PolicyText {
		t.Error("installed text differs from the assignment")
	}
	if got.mode.Perm() != 0o600 {
		t.Errorf("installed mode %v, want 0600", got.mode.Perm())
	}
	if st, _ := os.Stat(filepath.Dir(f.path())); st.Mode().Perm() != 0o700 {
		t.Errorf("~/.mac mode %v, want 0700", st.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(f.home, ".mac", ".*tmp*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	sum := strings.TrimPrefix(a.Checksum, "sha256:")
	cv := f.srv.Convergence(agent)
	if len(cv) != 1 || !cv[0].Converged || cv[0].InstalledChecksum != sum || cv[0].InstalledVersion != 3 ||
		cv[0].DesiredChecksum != sum || cv[0].Source != hub.SourceHub || cv[0].PolicyName != "fleet-default" {
		t.Errorf("convergence = %+v", cv)
	}
	// What a sandbox would now resolve is the assignment.
	r, err := policy.Resolve(policy.ResolveOptions{Home: f.home, Getenv: func(string) string { return "" }})
	if err != nil || r.Source != policy.SourceHome || r.Policy.Checksum() != sum {
		t.Errorf("resolve after install: %+v %v", r, err)
	}

	// A reassignment replaces it.
	b := assignment(t, render(t, "hub-b.example.internal"), 4)
	f.srv.Assign(agent, b)
	res = f.syncer.Once(context.Background())
	if res.Outcome != OutcomeInstalled || !strings.Contains(res.Reason, "replacing checksum "+sum) {
		t.Fatalf("reassignment: %+v", res)
	}
	if data, _ := os.ReadFile(f.path()); string(data) != b.PolicyText {
		t.Error("reassignment not installed")
	}
}

func TestAlreadyConvergedWritesNothing(t *testing.T) {
	f := setup(t)
	text := render(t, "hub-a.example.internal")
	a := assignment(t, text, 7)
	f.srv.Assign(agent, a)
	// Installed copy is the same policy, formatted differently: the
	// canonical checksum matches, so nothing is rewritten.
	p, _ := policy.Parse([]byte(text))
	f.install(t, string(p.YAML()))
	before := snap(t, f.path())
	time.Sleep(20 * time.Millisecond) // a rewrite would move mtime
	wrote := false
	f.syncer.AfterWrite = func(string) { wrote = true }

	for range 2 {
		res := f.syncer.Once(context.Background())
		if res.Outcome != OutcomeAlreadyConverged || !res.Converged || res.Wrote || wrote || !res.Reported {
			t.Fatalf("result = %+v", res)
		}
	}
	if after := snap(t, f.path()); !after.same(before) {
		t.Errorf("file touched: before %+v after %+v", before, after)
	}
	cv := f.srv.Convergence(agent)
	if len(cv) != 2 || !cv[1].Converged || cv[1].InstalledVersion != 7 || cv[1].Source != hub.SourceHub {
		t.Errorf("convergence = %+v", cv)
	}
}

func TestOverrideNeverOverwritten(t *testing.T) {
	f := setup(t)
	a := assignment(t, render(t, "hub-a.example.internal"), 2)
	f.srv.Assign(agent, a)
	overridePath := filepath.Join(t.TempDir(), "operator.yaml")
	os.WriteFile(overridePath, policies.DefaultPolicy, 0o644)
	f.install(t, render(t, "old.example.internal"))
	f.env[policy.EnvPolicy] = overridePath
	homeBefore := snap(t, f.path())
	overBefore := snap(t, overridePath)

	res := f.syncer.Once(context.Background())
	if res.Outcome != OutcomeOverride || res.Converged || res.Wrote || !res.Override || !res.OK() || res.Path != overridePath {
		t.Fatalf("result = %+v", res)
	}
	if !strings.Contains(res.Reason, "never overwritten") {
		t.Errorf("reason %q", res.Reason)
	}
	if !snap(t, f.path()).same(homeBefore) || !snap(t, overridePath).same(overBefore) {
		t.Error("a file changed under an override")
	}
	cv := f.srv.Convergence(agent)
	if len(cv) != 1 || cv[0].Source != hub.SourceOverride || cv[0].Converged || cv[0].InstalledChecksum != policy.Default().Checksum() {
		t.Errorf("convergence = %+v", cv)
	}

	// The override pointing at the home file itself is still never written.
	f.env[policy.EnvPolicy] = f.path()
	res = f.syncer.Once(context.Background())
	if res.Outcome != OutcomeOverride || !snap(t, f.path()).same(homeBefore) {
		t.Errorf("override of the home path: %+v", res)
	}

	// An override that says the same as the assignment is converged.
	os.WriteFile(overridePath, []byte(a.PolicyText), 0o600)
	f.env[policy.EnvPolicy] = overridePath
	res = f.syncer.Once(context.Background())
	if res.Outcome != OutcomeOverride || !res.Converged || res.Wrote {
		t.Errorf("matching override: %+v", res)
	}
}

func TestFailSafeKeepsInstalledFileByteIdentical(t *testing.T) {
	valid := render(t, "hub-a.example.internal")
	other := render(t, "hub-new.example.internal")
	invalidText := "version: 1\nprocess:\n  run_as_user: root\n"
	cases := []struct {
		name    string
		failure string
		arrange func(t *testing.T, f *fixture)
	}{
		{"hub down", FailHubUnreachable, func(t *testing.T, f *fixture) {
			f.srv.Assign(agent, assignment(t, other, 9))
			if err := f.srv.SetDown(true); err != nil {
				t.Fatal(err)
			}
		}},
		{"hang up", FailHubUnreachable, func(t *testing.T, f *fixture) {
			f.srv.Assign(agent, assignment(t, other, 9))
			f.srv.SetHangUp(true)
		}},
		{"404 no assignment", FailNotAssigned, func(t *testing.T, f *fixture) {}},
		{"403 another agent", FailForbidden, func(t *testing.T, f *fixture) {
			f.srv.Assign("worker-2", assignment(t, other, 9))
			c, err := hub.New(hub.Config{URL: f.srv.URL, AgentID: "worker-2", TokenFile: f.tokenFile})
			if err != nil {
				t.Fatal(err)
			}
			f.syncer.Hub = c // worker-1's token asking for worker-2's policy
		}},
		{"401 bad token", FailUnauthorized, func(t *testing.T, f *fixture) {
			bad := filepath.Join(t.TempDir(), "bad.token")
			os.WriteFile(bad, []byte("not-a-known-token\n"), 0o600)
			c, err := hub.New(hub.Config{URL: f.srv.URL, AgentID: agent, TokenFile: bad})
			if err != nil {
				t.Fatal(err)
			}
			f.syncer.Hub = c
		}},
		{"500", FailHubError, func(t *testing.T, f *fixture) {
			f.srv.Assign(agent, assignment(t, other, 9))
			f.srv.Fail(hubtest.Failure{Route: hubtest.RoutePolicy, Code: 500})
		}},
		{"429", FailHubError, func(t *testing.T, f *fixture) {
			f.srv.Assign(agent, assignment(t, other, 9))
			f.srv.Fail(hubtest.Failure{Route: hubtest.RoutePolicy, Code: 429, RetryAfter: "7"})
		}},
		{"malformed JSON", FailMalformed, func(t *testing.T, f *fixture) {
			f.srv.Assign(agent, assignment(t, other, 9))
			f.srv.SetMalformed(`{"policy_text": "version: 1`)
		}},
		{"checksum mismatch", FailChecksum, func(t *testing.T, f *fixture) {
			a := assignment(t, other, 9)
			a.Checksum = assignment(t, valid, 1).Checksum // claims another policy's checksum
			f.srv.Assign(agent, a)
		}},
		{"invalid policy text", FailInvalidPolicy, func(t *testing.T, f *fixture) {
			sum := sha256.Sum256([]byte(invalidText))
			f.srv.Assign(agent, hub.Policy{PolicyText: invalidText, Version: 9, Checksum: hex.EncodeToString(sum[:])})
		}},
		{"not YAML", FailInvalidPolicy, func(t *testing.T, f *fixture) {
			txt := "{{{{"
			sum := sha256.Sum256([]byte(txt))
			f.srv.Assign(agent, hub.Policy{PolicyText: txt, Version: 9, Checksum: hex.EncodeToString(sum[:])})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			f.install(t, valid)
			before := snap(t, f.path())
			c.arrange(t, f)
			res := f.syncer.Once(context.Background())
			if res.Outcome != OutcomeFailedSafe || res.OK() || res.Failure != c.failure || res.Wrote || res.Converged {
				t.Fatalf("result = %+v", res)
			}
			if !strings.Contains(res.Reason, "kept the installed policy") {
				t.Errorf("reason does not say what was kept: %q", res.Reason)
			}
			if after := snap(t, f.path()); !after.same(before) {
				t.Error("installed file changed")
			}
			entries, _ := os.ReadDir(filepath.Dir(f.path()))
			if len(entries) != 1 {
				t.Errorf("~/.mac holds %d entries, want only the policy", len(entries))
			}
			tok, _ := os.ReadFile(f.tokenFile)
			js, _ := json.Marshal(res)
			if bytes.Contains(js, bytes.TrimSpace(tok)) {
				t.Error("token in the result")
			}
			if c.failure == FailHubError && strings.Contains(c.name, "429") && res.RetryAfter != 7*time.Second {
				t.Errorf("retry after = %v", res.RetryAfter)
			}
			// The hub hears about it when it answered: invalid, mismatched
			// and missing assignments are reported as not converged.
			f.srv.SetMalformed("")
			f.srv.SetHangUp(false)
			cv := f.srv.Convergence(agent)
			if reportable(c.failure) != (len(cv) == 1) {
				t.Errorf("reports = %+v", cv)
			}
			if len(cv) == 1 && (cv[0].Converged || cv[0].Source != hub.SourceLocal || cv[0].InstalledChecksum == "") {
				t.Errorf("report = %+v", cv[0])
			}
		})
	}
}

func TestFailSafeWithNothingInstalledCreatesNothing(t *testing.T) {
	f := setup(t)
	res := f.syncer.Once(context.Background()) // 404
	if res.OK() || res.Failure != FailNotAssigned || res.Source != hub.SourceBundledDefault {
		t.Fatalf("result = %+v", res)
	}
	if _, err := os.Lstat(filepath.Join(f.home, ".mac")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("~/.mac created on failure: %v", err)
	}
	if !strings.Contains(res.Reason, "bundled fail-closed default") {
		t.Errorf("reason %q", res.Reason)
	}
}

func TestInstallFailureIsFailSafe(t *testing.T) {
	f := setup(t)
	f.srv.Assign(agent, assignment(t, render(t, "hub-a.example.internal"), 1))
	// ~/.mac is a file: nothing can be installed.
	os.WriteFile(filepath.Join(f.home, ".mac"), []byte("x"), 0o600)
	res := f.syncer.Once(context.Background())
	if res.OK() || res.Failure != FailInstall {
		t.Fatalf("result = %+v", res)
	}
	if data, _ := os.ReadFile(filepath.Join(f.home, ".mac")); string(data) != "x" {
		t.Error("~/.mac changed")
	}
	f.syncer.Home = ""
	res = f.syncer.Once(context.Background())
	if res.OK() || res.Failure != FailNoHome {
		t.Errorf("no HOME: %+v", res)
	}
}

func TestDisabled(t *testing.T) {
	f := setup(t)
	f.srv.Assign(agent, assignment(t, render(t, "hub-a.example.internal"), 1))
	f.env[EnvSync] = "0"
	res := f.syncer.Once(context.Background())
	if res.Outcome != OutcomeDisabled || !res.OK() || !strings.Contains(res.Reason, EnvSync+"=0") {
		t.Fatalf("result = %+v", res)
	}
	if n := len(f.srv.Requests()); n != 0 {
		t.Errorf("%d requests to the hub while disabled", n)
	}
	if _, err := os.Lstat(f.path()); err == nil {
		t.Error("installed while disabled")
	}
	for v, want := range map[string]bool{"": true, "1": true, "0": false, "false": false, "OFF": false, "no": false, "yes": true} {
		if got := Enabled(func(string) string { return v }); got != want {
			t.Errorf("%s=%q: enabled %v", EnvSync, v, got)
		}
	}
}

func TestVerifyAssignmentAcceptsRawTextChecksum(t *testing.T) {
	text := render(t, "hub-a.example.internal")
	raw := sha256.Sum256([]byte(text))
	p, _ := policy.Parse([]byte(text))
	for _, claim := range []string{p.Checksum(), "sha256:" + p.Checksum(), hex.EncodeToString(raw[:])} {
		_, sum, _, err := VerifyAssignment(&hub.Policy{PolicyText: text, Version: 1, Checksum: claim})
		if err != nil || sum != p.Checksum() {
			t.Errorf("claim %s: %v", claim, err)
		}
	}
	other := sha256.Sum256([]byte(text + " "))
	if _, _, fail, err := VerifyAssignment(&hub.Policy{PolicyText: text, Version: 1, Checksum: hex.EncodeToString(other[:])}); err == nil || fail != FailChecksum {
		t.Errorf("mismatch accepted: %v", err)
	}
}

// Readers hammer the installed file while assignments alternate; every
// read must be one complete assignment (or no file yet), always mode 0600.
func TestInstalledFileNeverObservedHalfWritten(t *testing.T) {
	f := setup(t)
	texts := []string{render(t, "hub-a.example.internal"), render(t, "hub-b.example.internal") + strings.Repeat("# padding\n", 20000)}
	valid := map[string]bool{texts[0]: true, texts[1]: true}
	var stop atomic.Bool
	var reads, bad atomic.Int64
	var firstBad atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				data, err := os.ReadFile(f.path())
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				reads.Add(1)
				st, serr := os.Stat(f.path())
				if err != nil || !valid[string(data)] || (serr == nil && st.Mode().Perm() != 0o600) {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, len(data))
				}
			}
		}()
	}
	installs := 0
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 30 && time.Now().Before(deadline); i++ {
		f.srv.Assign(agent, assignment(t, texts[i%2], int64(i+1)))
		res := f.syncer.Once(context.Background())
		if res.Outcome != OutcomeInstalled {
			t.Fatalf("install %d: %+v", i, res)
		}
		installs++
	}
	// Let the readers observe the final state too.
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d reads saw a partial or foreign file (first: %v bytes)", bad.Load(), reads.Load(), firstBad.Load())
	}
	if reads.Load() < 100 || installs < 10 {
		t.Fatalf("test too weak: %d reads over %d installs", reads.Load(), installs)
	}
	t.Logf("%d reads over %d installs, none partial", reads.Load(), installs)
}

func TestWatchPicksUpReassignmentAndSurvivesOutage(t *testing.T) {
	f := setup(t)
	a := assignment(t, render(t, "hub-a.example.internal"), 1)
	b := assignment(t, render(t, "hub-b.example.internal"), 2)
	f.srv.Assign(agent, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan Result, 1000)
	done := make(chan error, 1)
	go func() {
		done <- f.syncer.Watch(ctx, WatchOptions{Interval: 20 * time.Millisecond, OnResult: func(r Result) {
			select {
			case results <- r:
			default:
			}
		}})
	}()
	waitFor := func(what string, cond func(Result) bool) {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case r := <-results:
				if cond(r) {
					return
				}
			case err := <-done:
				t.Fatalf("watch returned %v while waiting for %s", err, what)
			case <-timeout:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("first install", func(r Result) bool { return r.Outcome == OutcomeInstalled && r.DesiredVersion == 1 })

	if err := f.srv.SetDown(true); err != nil {
		t.Fatal(err)
	}
	failures := 0
	waitFor("three failed syncs", func(r Result) bool {
		if r.Outcome == OutcomeFailedSafe && r.Failure == FailHubUnreachable {
			failures++
		}
		return failures >= 3
	})
	if data, _ := os.ReadFile(f.path()); string(data) != a.PolicyText {
		t.Fatal("outage changed the installed policy")
	}
	f.srv.Assign(agent, b)
	if err := f.srv.SetDown(false); err != nil {
		t.Fatal(err)
	}
	waitFor("reassignment", func(r Result) bool { return r.Outcome == OutcomeInstalled && r.DesiredVersion == 2 })
	if data, _ := os.ReadFile(f.path()); string(data) != b.PolicyText {
		t.Fatal("reassignment not installed")
	}
	waitFor("steady state", func(r Result) bool { return r.Outcome == OutcomeAlreadyConverged })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("watch returned %v on cancellation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not stop on cancellation")
	}
}

func TestWatchHonoursRetryAfter(t *testing.T) {
	f := setup(t)
	f.srv.Fail(hubtest.Failure{Route: hubtest.RoutePolicy, Code: 429, RetryAfter: "1"})
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	n := 0
	if err := f.syncer.Watch(ctx, WatchOptions{Interval: 10 * time.Millisecond, Jitter: -1, OnResult: func(Result) { n++ }}); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d syncs within 700ms after Retry-After: 1s, want 1", n)
	}
	if err := f.syncer.Watch(ctx, WatchOptions{}); err == nil {
		t.Error("zero interval accepted")
	}
}

// An assignment beyond the host's ceiling fails safe: nothing is written,
// the installed file stays byte-identical, and the hub hears why.
func TestCeilingRefusesAssignment(t *testing.T) {
	f := setup(t)
	installed := render(t, "hub-a.example.internal")
	f.install(t, installed)
	before := snap(t, f.path())
	ceil, err := policy.Parse([]byte(installed))
	if err != nil {
		t.Fatal(err)
	}
	f.syncer.Ceiling = func(p *policy.Policy) error {
		if xs := ceiling.Contains(ceil, p, ceiling.Options{}); len(xs) > 0 {
			return &ceiling.Error{Ceiling: "/etc/palisade/ceiling.yaml", Excesses: xs}
		}
		return nil
	}
	f.srv.Assign(agent, assignment(t, render(t, "hub-b.example.internal"), 5))
	res := f.syncer.Once(context.Background())
	if res.Outcome != OutcomeFailedSafe || res.Failure != FailCeiling || res.Wrote ||
		!strings.Contains(res.Reason, "assigned policy (version 5): policy exceeds the ceiling /etc/palisade/ceiling.yaml: network_policies.mac_hub.endpoints[0]: host hub-b.example.internal not within the ceiling") {
		t.Fatalf("result = %+v", res)
	}
	if after := snap(t, f.path()); !after.same(before) {
		t.Error("the installed file changed")
	}
	if cv := f.srv.Convergence(agent); len(cv) != 1 || cv[0].Converged || !strings.Contains(cv[0].Reason, FailCeiling) {
		t.Errorf("convergence = %+v", cv)
	}
	// Within the ceiling: installed.
	f.srv.Assign(agent, assignment(t, installed+"\n# same policy, new text\n", 6))
	if res := f.syncer.Once(context.Background()); !res.OK() {
		t.Fatalf("an assignment within the ceiling: %+v", res)
	}
}
