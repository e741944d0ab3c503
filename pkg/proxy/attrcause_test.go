package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/attribution"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// TestAttributionRefusalCause: a connection refused because its caller
// could not be attributed (attribution_failed, attribution_incomplete)
// carries why in unmapped.egress_proxy.cause and in the proxy's log
// line, as printable ASCII of bounded length (the holder's executable
// path in an incomplete record is the sandbox's to choose), and the
// agent's 403 body stays the bare refusal: no host pid, no cause. Before,
// the event and the log said attribution_failed and nothing more.
func TestAttributionRefusalCause(t *testing.T) {
	echo := newEchoServer(t)
	evil := "/tmp/x\n\x1b[31mcurl"
	long := "attribution: no sandbox process holds the connection: " + strings.Repeat("x", 400)
	cases := []struct {
		name, reason string
		err          func(client netip.AddrPort) error
		want         func(client netip.AddrPort) string
	}{
		{
			name:   "no socket",
			reason: ReasonAttributionFailed,
			err: func(c netip.AddrPort) error {
				return fmt.Errorf("attribution: no sandbox process holds the connection: no socket %v -> 10.0.0.1:3128 in the sandbox network namespace (netns pid 4242)", c)
			},
			want: func(c netip.AddrPort) string {
				return fmt.Sprintf("attribution: no sandbox process holds the connection: no socket %v -> 10.0.0.1:3128 in the sandbox network namespace (netns pid 4242)", c)
			},
		},
		{
			name:   "process gone",
			reason: ReasonAttributionFailed,
			err: func(netip.AddrPort) error {
				return errors.New("attribution: no sandbox process holds the connection: pid 4242 exited during attribution")
			},
			want: func(netip.AddrPort) string {
				return "attribution: no sandbox process holds the connection: pid 4242 exited during attribution"
			},
		},
		{
			name:   "incomplete, hostile holder path",
			reason: ReasonAttributionIncomplete,
			err: func(netip.AddrPort) error {
				return &IncompleteError{Holder: identityOf(evil, curlSHA), Err: fmt.Errorf("%w: socket inode 9, held by pid 4242 (%s)", ErrAttributionIncomplete, evil)}
			},
			want: func(netip.AddrPort) string {
				return ErrAttributionIncomplete.Error() + ": socket inode 9, held by pid 4242 (/tmp/x??[31mcurl)"
			},
		},
		{
			name:   "long",
			reason: ReasonAttributionFailed,
			err:    func(netip.AddrPort) error { return errors.New(long) },
			want:   func(netip.AddrPort) string { return long[:maxRefusalCause] },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &debugLog{}
			attr := &fakeAttributor{fn: func(client, _ netip.AddrPort) (*Identity, error) { return nil, tc.err(client) }}
			env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) {
				c.Attributor = attr
				c.Logger = logs.logger()
			})
			client, body := refusedConnect(t, env, echo.port)
			want := tc.want(client)
			if tc.reason == ReasonAttributionFailed {
				wantBody := fmt.Sprintf(`{"error":"policy_denied","host":"allowed.test","port":%d,"binary":"","pid":0,"policy":"","reason":%q}`+"\n", echo.port, tc.reason)
				if string(body) != wantBody {
					t.Errorf("403 body\n got %s\nwant %s", body, wantBody)
				}
			}
			// An incomplete record's holder is named as before (its sandbox
			// pid, 242); the host pid and the cause never reach the agent.
			for _, s := range []string{"4242", "inode", "socket", "exited", "cause", "xxxx"} {
				if strings.Contains(string(body), s) {
					t.Errorf("403 body holds %q: %s", s, body)
				}
			}
			evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 {
				t.Fatalf("network events: %d, want 1", len(evs))
			}
			if got := get(evs[0], "unmapped", "egress_proxy", "reason"); got != tc.reason {
				t.Errorf("unmapped.egress_proxy.reason %v, want %s", got, tc.reason)
			}
			if got := get(evs[0], "status_detail"); got != tc.reason {
				t.Errorf("status_detail %v, want %s (the 403 body's reason, unchanged)", got, tc.reason)
			}
			if got := get(evs[0], "unmapped", "egress_proxy", "cause"); got != want {
				t.Errorf("unmapped.egress_proxy.cause\n got %q\nwant %q", got, want)
			}
			env.p.Close() // the log line is written before the event; Close waits anyway
			line := logs.String()
			if wantAttr := "cause=" + fmt.Sprintf("%q", want); !strings.Contains(line, wantAttr) {
				t.Errorf("log lacks %s:\n%s", wantAttr, line)
			}
		})
	}
}

// TestRefusalCauseOnlyForAttribution: the cause goes out with
// attribution and pin check refusals and fence captures, not with other
// records whose
// Cause is something else (a request's head error, an upstream error
// already in a Fail's status_detail).
func TestRefusalCauseOnlyForAttribution(t *testing.T) {
	for _, tc := range []struct {
		r    Record
		want string
	}{
		{Record{Reason: ReasonAttributionFailed, Cause: "pid 1 exited"}, "pid 1 exited"},
		{Record{Reason: ReasonAttributionIncomplete, Cause: "no connect record"}, "no connect record"},
		{Record{Listener: ListenerFence, Reason: ReasonDirectConnection, Cause: "attribution failed: x\x00"}, "attribution failed: x?"},
		{Record{Reason: ReasonIdentityCheck, Cause: "attribution: save pins: x\n"}, "attribution: save pins: x?"},
		{Record{Reason: ReasonAttributionFailed}, ""},
		{Record{Reason: "port_not_allowed", Cause: "secret-ish"}, ""},
		{Record{Outcome: OutcomeUpstreamFailed, Reason: ReasonConnectFailed, Cause: "dial: refused"}, ""},
		{Record{Reason: ReasonMalformed, Cause: "bad head"}, ""},
	} {
		if got := tc.r.refusalCause(); got != tc.want {
			t.Errorf("%s/%s cause %q: refusalCause %q, want %q", tc.r.Listener, tc.r.Reason, tc.r.Cause, got, tc.want)
		}
	}
}

type errPinner struct{ err error }

func (p errPinner) Pin(string, string) error { return p.err }

// TestIdentityCheckRefusalCause: a connection refused because its
// caller's pin could not be checked (identity_check_failed: the pin set
// is full, a new pin could not be saved) carries the pin check's error
// in unmapped.egress_proxy.cause and the log line, cut like an
// attribution refusal's (printable ASCII, at most 256 bytes; the
// executable path is the sandbox's to choose), and the agent's 403 body
// stays the bare refusal. Before, the error was kept in the record and
// dropped: the event said identity_check_failed and nothing more (fails
// so with ReasonIdentityCheck out of refusalCause).
func TestIdentityCheckRefusalCause(t *testing.T) {
	echo := newEchoServer(t)
	evil := "/tmp/x\n\x1b[31mcurl"
	full, err := attribution.NewPinner("", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := full.Pin("/usr/bin/git", curlSHA); err != nil {
		t.Fatal(err)
	}
	long := "attribution: save pins: " + strings.Repeat("y", 400)
	for _, tc := range []struct {
		name, exe string
		pinner    Pinner
		want      string
	}{
		{"pin set full, hostile path", evil, AttributionPinner{Pinner: full}, "attribution: too many pinned binaries: 1 pinned, refusing /tmp/x??[31mcurl"},
		{"save failed, long", curlExe, errPinner{errors.New(long)}, long[:maxRefusalCause]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &debugLog{}
			env := newEnv(t, policyYAML(echo.port, ""), func(c *Config) {
				c.Attributor = fixedIdentity(identityOf(tc.exe, curlSHA, shellExe))
				c.Pinner = tc.pinner
				c.Logger = logs.logger()
			})
			_, body := refusedConnect(t, env, echo.port)
			exe, _ := json.Marshal(tc.exe)
			wantBody := fmt.Sprintf(`{"error":"policy_denied","host":"allowed.test","port":%d,"binary":%s,"pid":242,"policy":"","reason":%q}`+"\n", echo.port, exe, ReasonIdentityCheck)
			if string(body) != wantBody {
				t.Errorf("403 body\n got %s\nwant %s", body, wantBody)
			}
			evs := env.waitEvents(ocsf.ClassNetworkActivity, 1)
			if len(evs) != 1 {
				t.Fatalf("network events: %d, want 1", len(evs))
			}
			if got := get(evs[0], "unmapped", "egress_proxy", "reason"); got != ReasonIdentityCheck {
				t.Errorf("unmapped.egress_proxy.reason %v, want %s", got, ReasonIdentityCheck)
			}
			if got := get(evs[0], "unmapped", "egress_proxy", "cause"); got != tc.want {
				t.Errorf("unmapped.egress_proxy.cause\n got %q\nwant %q", got, tc.want)
			}
			env.p.Close()
			line := logs.String()
			if wantAttr := "cause=" + fmt.Sprintf("%q", tc.want); !strings.Contains(line, wantAttr) {
				t.Errorf("log lacks %s:\n%s", wantAttr, line)
			}
		})
	}
}

// debugLog captures a proxy's log at debug level, safe to read while the
// proxy writes.
type debugLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *debugLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: &l.buf, mu: &l.mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *debugLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// refusedConnect sends a CONNECT to allowed.test:port, requires a 403
// and returns the client's address and the body.
func refusedConnect(t *testing.T, env *testEnv, port int) (netip.AddrPort, []byte) {
	t.Helper()
	c, resp, _ := env.connect(fmt.Sprintf("allowed.test:%d", port))
	defer c.Close()
	client := netip.MustParseAddrPort(c.LocalAddr().String())
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
	return client, body
}
