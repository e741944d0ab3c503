package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// Made-up secrets of the WebSocket credential tests.
const (
	wsSecret      = "sk-ws-secret-0042"
	wsOtherSecret = "sk-ws-other-0077"
	wsPathSecret  = "sk-ws-path-0099"
)

// newWSCredEnv is a protocol: websocket endpoint (websocket_credential_rewrite
// as rewrite says) with credentials: WS_TOKEN bound to it, OTHER_TOKEN
// to another host, PATH_TOKEN to it under another path. Its text rules
// allow ticker subscriptions and messages beginning with a placeholder
// ("AUTH openshell:resolve:env:"): what the client sent, never what
// the placeholder resolves to.
func newWSCredEnv(t *testing.T, rewrite bool) (*inspectEnv, *wsUpstream, *bytes.Buffer) {
	t.Helper()
	up := newWSUpstream(t)
	ca, _ := tlsca.New(tlsca.Options{Name: "proxytest"})
	pol := fmt.Sprintf(`version: 1
network_policies:
  ws:
    endpoints:
      - host: allowed.test
        port: %d
        protocol: websocket
        websocket_credential_rewrite: %v
        rules: [{allow: {method: GET, path: /stream}}]
        websocket:
          text:
            - json: {type: subscribe, channel: "ticker.*"}
            - prefix: "AUTH openshell:resolve:env:"
          max_message_bytes: 1024
    binaries:
      - path: /usr/bin/curl
`, up.port, rewrite)
	src := &credSource{text: fmt.Sprintf(`version: 1
providers:
  ws:
    credentials:
      WS_TOKEN: {value: %q}
    endpoints: [{host: allowed.test, port: %d}]
  other:
    credentials:
      OTHER_TOKEN: {value: %q}
    endpoints: [{host: other.test, port: %d}]
  pathed:
    credentials:
      PATH_TOKEN: {value: %q}
    endpoints: [{host: allowed.test, port: %d, path: /elsewhere}]
`, wsSecret, up.port, wsOtherSecret, up.port, wsPathSecret, up.port)}
	var logs bytes.Buffer
	var logMu sync.Mutex
	env := newEnv(t, pol, func(c *Config) {
		c.CA, c.UpstreamRoots = ca, poolOf(up.ca)
		c.Credentials, c.CredentialsPath = src.load, "/etc/palisade/credentials.yaml"
		c.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return &inspectEnv{testEnv: env, ca: ca, up: &upstreamTLS{port: up.port}}, up, &logs
}

// Credential placeholders in the client's WebSocket text messages, over
// HTTP/1.1 and HTTP/2 extended CONNECT (seed 004, issue 26):
//   - one whose credential is not bound to the endpoint (another host;
//     the same host under another path) closes the connection with 1008
//     toward both sides, the message never reaches the upstream, and the
//     connection's event is a denial (credential_endpoint_mismatch) with
//     a Credential Misuse finding, none naming the value, the
//     placeholder or the key (nor any log line);
//   - with websocket_credential_rewrite, a bound one reaches the
//     upstream as its value (a fragmented message re-framed as one),
//     after the rules judged the message as sent (the "AUTH <placeholder>"
//     rule allows it; its value would match no rule);
//   - without it, a bound one reaches the upstream as it was sent.
//
// Mutation-checked: with messageCredentials's refusal dropped (the
// misbound message relayed) the upstream receives OTHER_TOKEN's
// placeholder and no 1008 comes; with the opt-in ignored (always
// rewriting) "not opted in" receives the value; with the rewrite
// judged after resolution the AUTH message is refused; without
// CredentialMisuse set in relayWebSocket no finding comes.
func TestWebSocketCredentialPlaceholders(t *testing.T) {
	ph := credentials.Placeholder
	sub := func(key string) string {
		return `{"type":"subscribe","channel":"ticker.btc","token":"` + ph(key) + `"}`
	}
	for _, rewrite := range []bool{true, false} {
		t.Run(map[bool]string{true: "opted in", false: "not opted in"}[rewrite], func(t *testing.T) {
			e, up, logs := newWSCredEnv(t, rewrite)
			want := []string{sub("WS_TOKEN"), "AUTH " + ph("WS_TOKEN")}
			if rewrite {
				want = []string{`{"type":"subscribe","channel":"ticker.btc","token":"` + wsSecret + `"}`, "AUTH " + wsSecret}
			}
			var wantMsgs []string
			misbound := []string{sub("OTHER_TOKEN"), "AUTH " + ph("PATH_TOKEN")}
			for i, h2 := range []bool{false, true, false, true} {
				c, status := dialWS(t, e, h2, "/stream", "")
				if status != 101 && status != 200 {
					t.Fatalf("h2=%v: upgrade answered %d", h2, status)
				}
				// The bound placeholder in a fragmented message, a ping
				// between its frames, then in one frame.
				c.w.Write(append(append(wsFrame(websocket.OpText, false, true, []byte(sub("WS_TOKEN")[:20])),
					wsFrame(websocket.OpPing, true, true, nil)...),
					wsFrame(websocket.OpContinuation, true, true, []byte(sub("WS_TOKEN")[20:]))...))
				c.w.Write(wsFrame(websocket.OpText, true, true, []byte("AUTH "+ph("WS_TOKEN"))))
				for _, w := range want {
					if op, _, pay, err := readWSFrame(c.r); err != nil || op != websocket.OpText || string(pay) != w {
						t.Fatalf("h2=%v: echo %d %q %v, want %q", h2, op, pay, err, w)
					}
				}
				wantMsgs = append(wantMsgs, want...)
				c.w.Write(wsFrame(websocket.OpText, true, true, []byte(misbound[i%2])))
				if code := c.expectClose(); code != websocket.ClosePolicyViolation {
					t.Errorf("h2=%v misbound %d: close code %d, want 1008", h2, i%2, code)
				}
				c.close()
			}
			waitFor(t, "the upstream's close codes", func() bool { _, _, codes := up.received(); return len(codes) == 4 })
			msgs, _, codes := up.received()
			if strings.Join(msgs, "\n") != strings.Join(wantMsgs, "\n") {
				t.Errorf("the upstream received %q, want %q", msgs, wantMsgs)
			}
			for _, code := range codes {
				if code != websocket.ClosePolicyViolation {
					t.Errorf("upstream close codes %v, want 1008 each", codes)
					break
				}
			}
			waitFor(t, "the denials' events", func() bool {
				n := 0
				for _, ev := range e.rec.ByClass(ocsf.ClassHTTPActivity) {
					if ev["status_code"] == OutcomePolicyDenied && get(ev, "unmapped", "egress_proxy", "reason") == credentials.ReasonEndpointMismatch {
						n++
					}
				}
				return n > 0
			})

			// Identical denials are aggregated by the denial rate limiter:
			// one event and one finding at least.
			findings := e.waitEvents(ocsf.ClassDetectionFinding, 1)
			misuse := 0
			for _, f := range findings {
				if types, _ := get(f, "finding_info", "types").([]any); len(types) == 1 && types[0] == ocsf.FindingTypeCredentialMisuse && get(f, "action") == "Denied" {
					misuse++
				}
			}
			if misuse == 0 {
				t.Errorf("no Credential Misuse finding among %d findings", len(findings))
			}
			all := append(bytes.Join(e.rec.Lines(), []byte("\n")), logs.Bytes()...)
			for _, s := range []string{wsSecret, wsOtherSecret, wsPathSecret, "openshell:resolve", "WS_TOKEN", "OTHER_TOKEN", "PATH_TOKEN"} {
				if bytes.Contains(all, []byte(s)) {
					t.Errorf("events or logs hold %q", s)
				}
			}
			for _, ev := range e.rec.ByClass(ocsf.ClassDetectionFinding) {
				if b, _ := json.Marshal(ev); bytes.Contains(b, []byte("ws-")) {
					t.Errorf("a finding holds a value: %s", b)
				}
			}
		})
	}
}
