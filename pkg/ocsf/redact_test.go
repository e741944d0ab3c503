package ocsf_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"http://user:s3cret@example.com:8080/a/b?token=abc#frag", "http://example.com:8080/a/b"},
		{"https://example.com/path?x=1", "https://example.com/path"},
		{"https://example.com/?", "https://example.com/"},
		{"https://example.com#only-fragment", "https://example.com"},
		{"http://[2001:db8::1]:8443/p?q", "http://[2001:db8::1]:8443/p"},
		{"/relative/path?k=v", "/relative/path"},
		{"mailto:someone@example.com?subject=x", "mailto:"},
		{"http://example.com/a%3Fb?c", "http://example.com/a%3Fb"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got := ocsf.RedactURL(u).String(); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := ocsf.RedactURLString(c.in); got != c.want {
			t.Errorf("RedactURLString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	// Hand-built URL with credentials in Host.
	u := &url.URL{Scheme: "http", Host: "user:pw@example.com", Path: "/x"}
	if got := ocsf.RedactURL(u).String(); got != "http://example.com/x" {
		t.Errorf("hand-built URL: %q", got)
	}
	if ocsf.RedactURL(nil) != nil {
		t.Error("RedactURL(nil) != nil")
	}
}

func TestRedactURLStringUnparsable(t *testing.T) {
	// url.Parse rejects these; the fallback still strips secrets.
	cases := []struct{ in, want string }{
		{"http://user:pw@exa mple.com/p?token=1", "http://exa mple.com/p"},
		{"http://us%zzer:pw@host/p%zz?secret#f", "http://host/p%zz"},
		{"::not a url?secret=1", "::not a url"},
	}
	for _, c := range cases {
		if _, err := url.Parse(c.in); err == nil {
			t.Fatalf("%q parses; the case does not test the fallback", c.in)
		}
		if got := ocsf.RedactURLString(c.in); got != c.want {
			t.Errorf("RedactURLString(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestNewURL(t *testing.T) {
	u, _ := url.Parse("https://bob:pw@api.example.com/v1/items?key=SECRET#x")
	o := ocsf.NewURL(u)
	if o.Scheme != "https" || o.Hostname != "api.example.com" || o.Port != 443 || o.Path != "/v1/items" {
		t.Fatalf("NewURL = %+v", o)
	}
	if o.URLString != "https://api.example.com/v1/items" {
		t.Fatalf("url_string = %q", o.URLString)
	}
	u, _ = url.Parse("http://example.com")
	if o := ocsf.NewURL(u); o.Path != "/" || o.Port != 80 || o.URLString != "http://example.com/" {
		t.Fatalf("NewURL(no path) = %+v", o)
	}
	if ocsf.NewURL(nil) != nil {
		t.Fatal("NewURL(nil) != nil")
	}
}

// FuzzRedactURLString: whatever the input, the result carries no query,
// no fragment and no userinfo.
func FuzzRedactURLString(f *testing.F) {
	for _, s := range []string{
		"http://user:pw@host/p?q=1#f", "https://h/", "//u@h/p?x", "a@b@c/d?e", "http://[::1]:80/?#",
		"http://user:pw@exa mple.com/p?token=1", "%zz?x", "", "?", "#", "@",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := ocsf.RedactURLString(in)
		if strings.ContainsAny(out, "?#") {
			t.Fatalf("RedactURLString(%q) = %q keeps a query or fragment", in, out)
		}
		if u, err := url.Parse(out); err == nil {
			if u.User != nil {
				t.Fatalf("RedactURLString(%q) = %q keeps userinfo %q", in, out, u.User)
			}
			return
		}
		// Unparsable output: look at the authority a lenient reader would see.
		auth := ""
		if i := strings.Index(out, "://"); i >= 0 && !strings.ContainsAny(out[:i], "/@ ") {
			auth = out[i+3:]
		} else if strings.HasPrefix(out, "//") {
			auth = out[2:]
		}
		if i := strings.IndexByte(auth, '/'); i >= 0 {
			auth = auth[:i]
		}
		if strings.Contains(auth, "@") {
			t.Fatalf("RedactURLString(%q) = %q keeps userinfo in the authority", in, out)
		}
	})
}
