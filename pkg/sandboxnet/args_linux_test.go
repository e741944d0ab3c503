//go:build linux

package sandboxnet

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fence"
)

// flagValue returns the value following name in argv, and whether name
// is there at all.
func flagValue(argv []string, name string) (string, bool) {
	i := slices.Index(argv, name)
	if i < 0 || i+1 >= len(argv) {
		return "", i >= 0
	}
	return argv[i+1], true
}

// The proxy's argv carries --procs whenever Config.Procs is set (0, all
// CPUs, included) and --dns-ttl whenever Config.DNSTTL is; unset,
// neither is there and the proxy keeps its own defaults. The policy DNS
// and the transparent listener are always there, with the epoch.
func TestProxyArgsProcsAndDNSTTL(t *testing.T) {
	zero, three := 0, 3
	for _, tc := range []struct {
		name      string
		procs     *int
		ttl       time.Duration
		wantProcs string // "" = absent
		wantTTL   string
	}{
		{name: "defaults"},
		{name: "procs 3", procs: &three, wantProcs: "3"},
		{name: "procs 0 (all CPUs)", procs: &zero, wantProcs: "0"},
		{name: "ttl", ttl: 7 * time.Second, wantTTL: "7s"},
		{name: "both", procs: &three, ttl: 1500 * time.Millisecond, wantProcs: "3", wantTTL: "1.5s"},
	} {
		p := &proxyProc{
			cfg: Config{PolicyPath: "/etc/p.yaml", ProxyPort: DefaultProxyPort, FencePort: DefaultFencePort,
				LogFormat: "text", LogLevel: "info", Procs: tc.procs, DNSTTL: tc.ttl},
			name: "sbx-args", initPID: 42, dir: "/run/x", epoch: 42,
			fence: &fence.Fence{HostAddr: netip.MustParseAddr("10.200.0.1")},
		}
		argv := p.args()
		if v, ok := flagValue(argv, "--procs"); v != tc.wantProcs || ok != (tc.wantProcs != "") {
			t.Errorf("%s: --procs %q (present %v), want %q; argv %s", tc.name, v, ok, tc.wantProcs, strings.Join(argv, " "))
		}
		if v, ok := flagValue(argv, "--dns-ttl"); v != tc.wantTTL || ok != (tc.wantTTL != "") {
			t.Errorf("%s: --dns-ttl %q (present %v), want %q; argv %s", tc.name, v, ok, tc.wantTTL, strings.Join(argv, " "))
		}
		if v, ok := flagValue(argv, "--dns-listen"); v != "10.200.0.1:3131" {
			t.Errorf("%s: --dns-listen %q (present %v), want 10.200.0.1:3131", tc.name, v, ok)
		}
		if v, ok := flagValue(argv, "--transparent-listen"); v != "10.200.0.1:3132-3139" {
			t.Errorf("%s: --transparent-listen %q (present %v), want 10.200.0.1:3132-3139", tc.name, v, ok)
		}
		if v, ok := flagValue(argv, "--dns-epoch"); !ok || v != "42" {
			t.Errorf("%s: --dns-epoch %q (present %v), want 42", tc.name, v, ok)
		}
	}
}

// Every proxy start takes the next policy DNS epoch, persisted in the
// sandbox's state directory so a new supervisor (a kept sandbox run
// again) carries on from it; a file that holds no epoch stops the start.
func TestNextEpochPersists(t *testing.T) {
	dir := t.TempDir()
	p := &proxyProc{dir: dir}
	for want := uint64(0); want < 3; want++ {
		if err := p.nextEpoch(); err != nil || p.epoch != want {
			t.Fatalf("start %d: epoch %d, %v", want, p.epoch, err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, DNSEpochName))
		if string(b) != strconv.FormatUint(want, 10)+"\n" {
			t.Fatalf("start %d: file holds %q", want, b)
		}
	}
	again := &proxyProc{dir: dir}
	if err := again.nextEpoch(); err != nil || again.epoch != 3 {
		t.Fatalf("a new supervisor's first start: epoch %d, %v; want 3", again.epoch, err)
	}
	os.WriteFile(filepath.Join(dir, DNSEpochName), []byte("three\n"), 0o600)
	err := again.nextEpoch()
	if err == nil || !strings.Contains(err.Error(), DNSEpochName) || !strings.Contains(err.Error(), "remove it") {
		t.Fatalf("unreadable epoch file: %v, want an error naming it", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, DNSEpochName)); string(b) != "three\n" {
		t.Errorf("the unreadable file was overwritten: %q", b)
	}
	// Without a state directory: a random first epoch, then one more
	// per restart.
	tmp := &proxyProc{dir: t.TempDir(), tmpDir: true}
	tmp.nextEpoch()
	first := tmp.epoch
	tmp.nextEpoch()
	if tmp.epoch != first+1 {
		t.Errorf("restart without a state directory: epoch %d after %d", tmp.epoch, first)
	}
	if _, err := os.Stat(filepath.Join(tmp.dir, DNSEpochName)); err == nil {
		t.Error("an epoch file was written to a temporary directory")
	}
}

// --ceiling reaches the proxy exactly when the supervisor names one.
func TestProxyArgsCeiling(t *testing.T) {
	for _, c := range []string{"", "/etc/palisade/ceiling.yaml"} {
		p := &proxyProc{
			cfg:  Config{PolicyPath: "/etc/p.yaml", LogFormat: "text", LogLevel: "info", Ceiling: c},
			name: "sbx-args", initPID: 42, dir: "/run/x",
			fence: &fence.Fence{HostAddr: netip.MustParseAddr("10.200.0.1")},
		}
		if v, ok := flagValue(p.args(), "--ceiling"); v != c || ok != (c != "") {
			t.Errorf("Ceiling %q: --ceiling %q (present %v)", c, v, ok)
		}
	}
}
