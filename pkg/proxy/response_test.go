package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// checkProxyStatus checks a 403's Proxy-Status field (RFC 9209) and
// status line against its denial body: the registered error type, and
// the error, reason, entry, host and port in the details.
func checkProxyStatus(t *testing.T, resp *http.Response, db DenialBody) {
	t.Helper()
	errType := "http_request_denied"
	if db.Error == OutcomeSSRFDenied {
		errType = "destination_ip_prohibited"
	}
	ps := resp.Header.Get("Proxy-Status")
	want := ProxyStatusName + "; error=" + errType + `; details="` + db.Error + " reason=" + db.Reason
	if !strings.HasPrefix(ps, want) {
		t.Errorf("Proxy-Status %q, want it to start %q", ps, want)
	}
	for _, f := range []string{" policy=" + db.Policy + " ", " host=" + db.Host + " "} {
		if !strings.HasSuffix(f, "= ") && !strings.Contains(ps, f) {
			t.Errorf("Proxy-Status %q lacks %q", ps, strings.TrimSpace(f))
		}
	}
	if db.Policy == "" && strings.Contains(ps, " policy=") {
		t.Errorf("Proxy-Status %q names an entry the body does not", ps)
	}
	if want := "403 Forbidden (" + db.Error + ": " + db.Reason + ")"; resp.Status != want {
		t.Errorf("status line %q, want %q", resp.Status, want)
	}
}

// sfString reports whether v is one RFC 8941 sf-string ("..." of
// printable ASCII with '"' and '\' escaped) and returns its content.
func sfString(v string) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(v)-1; i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v)-1 || v[i] != '"' && v[i] != '\\' {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func TestProxyStatusIsAStructuredFieldWhateverTheNames(t *testing.T) {
	d := DenialBody{
		Error: OutcomePolicyDenied, Host: "api.example.com", Port: 443,
		Binary: "/opt/my tool/\"q\"\\bin\xe2\x80\x8b\n", Policy: "team a% \"x\"",
		Reason: "l7_access_denied", Method: "POST", Path: "/v1/a b",
	}
	ps := d.ProxyStatus()
	name, params, ok := strings.Cut(ps, "; error=http_request_denied; details=")
	if !ok || name != ProxyStatusName {
		t.Fatalf("Proxy-Status %q", ps)
	}
	details, ok := sfString(params)
	if !ok {
		t.Fatalf("details %s is not an sf-string", params)
	}
	want := "policy_denied reason=l7_access_denied policy=team%20a%25%20%22x%22 host=api.example.com port=443" +
		" binary=/opt/my%20tool/%22q%22%5Cbin%E2%80%8B%0A method=POST path=/v1/a%20b"
	if details != want {
		t.Errorf("details\n got %s\nwant %s", details, want)
	}
	// Every name=value pair splits on spaces; no value is empty.
	for _, f := range strings.Fields(details)[1:] {
		if k, v, ok := strings.Cut(f, "="); !ok || k == "" || v == "" {
			t.Errorf("field %q", f)
		}
	}
	if p := d.reasonPhrase(); p != "Forbidden (policy_denied: l7_access_denied)" {
		t.Errorf("reason phrase %q", p)
	}
	ssrf := DenialBody{Error: OutcomeSSRFDenied, Host: "internal.test", Port: 80, Reason: "loopback"}
	if got, want := ssrf.ProxyStatus(), ProxyStatusName+`; error=destination_ip_prohibited; details="ssrf_denied reason=loopback host=internal.test port=80"`; got != want {
		t.Errorf("ssrf Proxy-Status\n got %s\nwant %s", got, want)
	}
}
