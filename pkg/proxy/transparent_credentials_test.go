package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// A transparent connection's requests get their placeholders resolved
// exactly as a CONNECT tunnel's (issue 26 on top of issue 28): the
// transparent listener serves an inspected endpoint through the same
// tunnel and per-request function (inspect), so the one resolution after
// admission (prepareOutgoing) applies to transparent HTTPS, h1 and h2,
// and to transparent plaintext HTTP. A placeholder whose credential is
// bound elsewhere is refused with 403 and a Credential Misuse finding,
// marked transparent, and reaches nothing upstream.
func TestTransparentCredentialsResolveAsConnect(t *testing.T) {
	spy := newHeaderSpy(t)
	src := &credSource{}
	te := newTransparentEnv(t, func(port int) string {
		src.set(fmt.Sprintf(`version: 1
providers:
  api:
    credentials:
      %s: {value: %q}
    endpoints:
      - host: allowed.test
        ports: [%d, %d]
  elsewhere:
    credentials:
      ELSEWHERE_TOKEN: {value: "elsewhere-%s"}
    endpoints:
      - host: other.test
        port: %d
`, credKey, credSecret, port, spy.port, credSecret, port))
		return restPolicy(port, "full", fmt.Sprintf("      - host: allowed.test\n        port: %d\n        protocol: rest\n        access: full\n", spy.port))
	}, "127.0.0.1", func(c *Config) {
		c.Credentials = src.load
		c.CredentialsPath = "/etc/palisade/credentials.yaml"
	})
	ph := credentials.Placeholder(credKey)
	send := func(cl *http.Client, rawURL, placeholder string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", rawURL+"?key="+url.QueryEscape(placeholder), nil)
		req.Header.Set("Authorization", "Bearer "+placeholder)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", rawURL, err)
		}
		return resp
	}

	for _, h2 := range []bool{false, true} {
		cl := te.client(h2)
		base := fmt.Sprintf("https://allowed.test:%d", te.up.port)
		resp := send(cl, base+"/v1/chat", ph)
		var got map[string]any
		json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != 200 || got["authorization"] != "Bearer "+credSecret {
			t.Fatalf("h2=%v transparent HTTPS, bound: %d, upstream got authorization %q", h2, resp.StatusCode, got["authorization"])
		}
		reqs := te.up.requests()
		if last := reqs[len(reqs)-1]; !strings.HasPrefix(last, "GET /v1/chat?key="+credSecret+" ") {
			t.Fatalf("h2=%v transparent HTTPS, bound: upstream saw %q", h2, last)
		}
		before := len(te.up.requests())
		// (A path per protocol: the denial limiter folds a repeated
		// method, path and reason into a count.)
		resp = send(cl, fmt.Sprintf("%s/v1/h2=%v", base, h2), credentials.Placeholder("ELSEWHERE_TOKEN"))
		if d := readDenial(t, resp); resp.StatusCode != 403 || d.Reason != credentials.ReasonEndpointMismatch {
			t.Fatalf("h2=%v transparent HTTPS, bound elsewhere: %d %+v", h2, resp.StatusCode, d)
		}
		if n := len(te.up.requests()); n != before {
			t.Fatalf("h2=%v: the refused request reached the upstream", h2)
		}
	}

	// Transparent plaintext HTTP to the inspected port.
	te.setOrig(netip.AddrPortFrom(te.m.Synthetic, uint16(spy.port)))
	plain := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return te.dialT() }}}
	defer plain.CloseIdleConnections()
	resp := send(plain, fmt.Sprintf("http://allowed.test:%d/v1/chat", spy.port), ph)
	resp.Body.Close()
	spy.mu.Lock()
	auth, uri := spy.header.Get("Authorization"), spy.uri
	spy.mu.Unlock()
	if resp.StatusCode != 200 || auth != "Bearer "+credSecret || uri != "/v1/chat?key="+credSecret {
		t.Fatalf("transparent HTTP, bound: %d, upstream got %q %q", resp.StatusCode, auth, uri)
	}

	// Each refusal is a Credential Misuse finding of the transparent
	// listener; nothing recorded holds a value or a placeholder.
	findings := te.waitEvents(ocsf.ClassDetectionFinding, 1)
	misuse := 0
	for _, f := range findings {
		if types, _ := get(f, "finding_info", "types").([]any); len(types) == 1 && types[0] == ocsf.FindingTypeCredentialMisuse {
			misuse++
		}
	}
	if misuse == 0 {
		t.Errorf("no Credential Misuse finding among %d findings", len(findings))
	}
	denied := 0
	waitFor(t, "two credential_endpoint_mismatch events", func() bool {
		n := 0
		for _, ev := range te.rec.ByClass(ocsf.ClassHTTPActivity) {
			if get(ev, "unmapped", "egress_proxy", "reason") == credentials.ReasonEndpointMismatch {
				n++
			}
		}
		return n >= 2
	})
	for _, ev := range te.rec.ByClass(ocsf.ClassHTTPActivity) {
		if get(ev, "unmapped", "egress_proxy", "reason") == credentials.ReasonEndpointMismatch {
			denied++
			if get(ev, "unmapped", "egress_proxy", "listener") != ListenerTransparent || get(ev, "unmapped", "egress_proxy", "transparent", "name") != "allowed.test" {
				b, _ := json.Marshal(ev)
				t.Errorf("denial not marked transparent: %s", b)
			}
		}
	}
	if denied != 2 {
		t.Errorf("%d credential_endpoint_mismatch HTTP events, want 2 (h1, h2)", denied)
	}
	all := bytes.Join(te.rec.Lines(), []byte("\n"))
	for _, s := range []string{credSecret, "elsewhere-" + credSecret, "openshell:resolve", "openshell%3A"} {
		if bytes.Contains(all, []byte(s)) {
			t.Errorf("events hold %q", s)
		}
	}
}
