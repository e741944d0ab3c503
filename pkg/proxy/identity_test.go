package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
)

// plainAttributor hides the fake's pid translation.
type plainAttributor struct{ Attributor }

// A denial names the caller by its pid in the sandbox's pid namespace,
// never by the host pid (which helped an agent aim pid reuse); the event
// keeps the host pid. An attributor that cannot translate gives 0.
func TestDenialNamesTheSandboxPID(t *testing.T) {
	echo := newEchoServer(t)
	for _, tc := range []struct {
		name string
		attr Attributor
		want int
	}{
		{"translated", fixedIdentity(identityOf(curlExe, curlSHA)), 242},
		{"untranslatable", plainAttributor{fixedIdentity(identityOf(curlExe, curlSHA))}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Attributor = tc.attr })
			c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port+1))
			defer c.Close()
			body, _ := io.ReadAll(br)
			var d DenialBody
			if resp.StatusCode != 403 || json.Unmarshal(body, &d) != nil || d.PID != tc.want {
				t.Fatalf("status %d body %s: want 403 naming pid %d", resp.StatusCode, body, tc.want)
			}
			c.Close()
			evs := env.waitEvents(4001, 1)
			if got := num(get(evs[0], "actor", "process", "pid")); got != 4242 {
				t.Errorf("event names pid %d, want the host pid 4242", got)
			}
		})
	}
}

// A socket whose connector the attribution backend has no record of is
// refused as attribution_incomplete, whatever its holder may be; the
// event names the holder.
func TestIncompleteAttributionDenies(t *testing.T) {
	echo := newEchoServer(t)
	attr := &fakeAttributor{fn: func(_, _ netip.AddrPort) (*Identity, error) {
		return nil, &IncompleteError{Holder: identityOf(curlExe, curlSHA), Err: errors.New("record evicted")}
	}}
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) { c.Attributor = attr })
	c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	defer c.Close()
	body, _ := io.ReadAll(br)
	var d DenialBody
	if resp.StatusCode != 403 || json.Unmarshal(body, &d) != nil || d.Reason != ReasonAttributionIncomplete {
		t.Fatalf("status %d body %s: want 403 %s", resp.StatusCode, body, ReasonAttributionIncomplete)
	}
	// The event names the holder the backend found, though the decision
	// never used it.
	c.Close()
	evs := env.waitEvents(4001, 1)
	if got := get(evs[0], "actor", "process", "file", "path"); got != curlExe {
		t.Errorf("event names %v, want the holder %s", got, curlExe)
	}
}

// A caller that lost its binary's identity (foreign code) is decided as
// an unknown binary: refused as foreign_code, with a Detection Finding
// naming the process and the file, where only its binary (or an
// ancestor's, or its connector's) would have allowed it; a clean
// ancestor's rights still hold.
func TestForeignCodeLosesTheBinarysRights(t *testing.T) {
	echo := newEchoServer(t)
	lib := &ForeignCode{Reasons: []string{"writable_path"}, File: "/work/evil.so"}
	open := fmt.Sprintf(`  git:
    endpoints:
      - host: open.test
        port: %d
    binaries:
      - path: /usr/bin/git
`, echo.port)
	for _, tc := range []struct {
		name    string
		id      func() *Identity
		host    string
		allowed bool
		named   int // the pid the finding names
	}{
		{"clean curl", func() *Identity { return identityOf(curlExe, curlSHA) }, "allowed.test", true, 0},
		{"curl with foreign code", func() *Identity {
			id := identityOf(curlExe, curlSHA)
			id.Code = lib
			return id
		}, "allowed.test", false, 4242},
		{"curl with foreign code, spawned by git", func() *Identity {
			id := identityOf(curlExe, curlSHA, "/usr/bin/git")
			id.Code = lib
			return id
		}, "open.test", true, 0},
		{"an ancestor with foreign code", func() *Identity {
			id := identityOf(pythonExe, curlSHA, curlExe)
			id.Ancestors[0].Code = lib
			return id
		}, "allowed.test", false, 4000},
		{"a connector with foreign code", func() *Identity {
			id := identityOf(curlExe, curlSHA)
			id.Connector = &Ancestor{PID: 17, Exe: curlExe, Code: lib}
			return id
		}, "allowed.test", false, 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, policyYAML(echo.port, open), func(c *Config) {
				c.Attributor = fixedIdentity(tc.id())
				c.Dialer.(*spyDialer).hosts["open.test"] = netip.MustParseAddr("127.0.0.1")
			})
			c, resp, br := env.connect(fmt.Sprintf("%s:%d", tc.host, echo.port))
			defer c.Close()
			if got := resp.StatusCode == 200; got != tc.allowed {
				t.Fatalf("status %d, want allowed=%v", resp.StatusCode, tc.allowed)
			}
			if tc.allowed {
				return
			}
			body, _ := io.ReadAll(br)
			var d DenialBody
			if json.Unmarshal(body, &d) != nil || d.Reason != ReasonForeignCode {
				t.Errorf("denial %s: want reason %s", body, ReasonForeignCode)
			}
			c.Close()
			fs := env.waitEvents(2004, 1)
			if len(fs) != 1 {
				t.Fatalf("%d findings, want 1", len(fs))
			}
			ev, _ := json.Marshal(fs[0])
			if !strings.Contains(string(ev), "/work/evil.so") || !strings.Contains(string(ev), fmt.Sprintf(`"pid":%d`, tc.named)) {
				t.Errorf("finding %s: want it to name pid %d and /work/evil.so", ev, tc.named)
			}
		})
	}
}
