package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// fakeGuard records the binding of each connection and lets the test
// report a violation on it.
type fakeGuard struct {
	mu       sync.Mutex
	bound    []*Identity
	report   func(SendViolation)
	released int
	err      error
	// atBind, when set, is reported as soon as a connection is bound: a
	// send that raced the decision.
	atBind *SendViolation
}

func (g *fakeGuard) Guard(id *Identity, onViolation func(SendViolation)) (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return nil, g.err
	}
	g.bound = append(g.bound, id)
	g.report = onViolation
	if g.atBind != nil {
		onViolation(*g.atBind)
	}
	return func() {
		g.mu.Lock()
		g.released++
		g.mu.Unlock()
	}, nil
}

// A decided connection is held to its process (SendGuard): when the
// kernel reports a send by another process, the proxy closes the
// connection, its record says undecided_sender and a Detection Finding
// names the real sender; the binding is released when the connection
// ends. A connection the guard cannot hold is refused.
func TestSendGuardClosesTheConnection(t *testing.T) {
	echo := newEchoServer(t)
	g := &fakeGuard{}
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) {
		c.Attributor = fixedIdentity(identityOf(curlExe, curlSHA))
		c.Guard = g
	})
	c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	defer c.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	c.Write([]byte("ping"))
	if b := make([]byte, 4); !readFull(br, b) || string(b) != "ping" {
		t.Fatalf("echo through the tunnel: %q", b)
	}
	g.mu.Lock()
	report := g.report
	n := len(g.bound)
	g.mu.Unlock()
	if n != 1 || report == nil {
		t.Fatalf("%d bindings, want 1", n)
	}
	report(SendViolation{PID: 99, Exe: "/work/agent", Comm: "agent"})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(br); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after the violation the connection was not closed: %v", err)
	}
	fs := env.waitEvents(2004, 1)
	ev, _ := json.Marshal(fs[0])
	if !strings.Contains(string(ev), "/work/agent") || !strings.Contains(string(ev), `"pid":99`) {
		t.Errorf("finding %s: want it to name the sender pid 99 /work/agent", ev)
	}
	net := env.waitEvents(4001, 1)
	if got := get(net[0], "unmapped", "egress_proxy", "reason"); got != ReasonUndecidedSender {
		t.Errorf("connection event reason %v, want %s", got, ReasonUndecidedSender)
	}
	waitFor(t, "the binding released", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.released == 1 })

	g.mu.Lock()
	g.err = errors.New("not under the guard")
	g.mu.Unlock()
	c2, resp2, br2 := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	defer c2.Close()
	body, _ := io.ReadAll(br2)
	var d DenialBody
	if resp2.StatusCode != 403 || json.Unmarshal(body, &d) != nil || d.Reason != ReasonAttributionIncomplete {
		t.Errorf("unguardable connection: %d %s, want 403 %s", resp2.StatusCode, body, ReasonAttributionIncomplete)
	}
}

func readFull(r io.Reader, b []byte) bool {
	_, err := io.ReadFull(r, b)
	return err == nil
}

// A send the guard refused because the decided process itself mapped
// foreign code after the decision ends the connection as foreign_code,
// with the Foreign Code finding naming the process and the file.
func TestSendGuardForeignCodeAfterTheDecision(t *testing.T) {
	echo := newEchoServer(t)
	g := &fakeGuard{}
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) {
		c.Attributor = fixedIdentity(identityOf(curlExe, curlSHA))
		c.Guard = g
	})
	c, resp, br := env.connect(fmt.Sprintf("allowed.test:%d", echo.port))
	defer c.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	g.mu.Lock()
	report := g.report
	g.mu.Unlock()
	report(SendViolation{PID: 4242, Exe: curlExe, Code: &ForeignCode{Reasons: []string{"writable_path"}, File: "/work/engine.so"}})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadAll(br)
	fs := env.waitEvents(2004, 1)
	ev, _ := json.Marshal(fs[0])
	if !strings.Contains(string(ev), "Foreign Code") || !strings.Contains(string(ev), "/work/engine.so") {
		t.Errorf("finding %s: want a Foreign Code finding naming /work/engine.so", ev)
	}
	net := env.waitEvents(4001, 1)
	if got := get(net[0], "unmapped", "egress_proxy", "reason"); got != ReasonForeignCode {
		t.Errorf("connection event reason %v, want %s", got, ReasonForeignCode)
	}
}

// A send refused on a connection whose own decision refused it (an
// unlisted program's socket handed to another process while the proxy
// decided it) keeps the decision's reason: the record says why the
// connection was refused, and the Undecided Sender finding still names
// the process that sent.
func TestSendViolationKeepsTheRefusalsReason(t *testing.T) {
	echo := newEchoServer(t)
	g := &fakeGuard{atBind: &SendViolation{PID: 99, Exe: "/usr/bin/curl", Comm: "curl"}}
	env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) {
		c.Attributor = fixedIdentity(identityOf("/work/agent", ""))
		c.Guard = g
	})
	c, err := net.Dial("tcp", env.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\n", echo.port)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadAll(c)
	evs := env.waitEvents(4001, 1)
	if got := get(evs[0], "unmapped", "egress_proxy", "reason"); got != "binary_not_allowed" {
		t.Errorf("connection event reason %v, want the decision's binary_not_allowed", got)
	}
	fs := env.waitEvents(2004, 1)
	ev, _ := json.Marshal(fs[0])
	if !strings.Contains(string(ev), "Undecided Sender") || !strings.Contains(string(ev), `"pid":99`) {
		t.Errorf("finding %s: want an Undecided Sender finding naming pid 99", ev)
	}
}
