package eventlog

import (
	"os"
	"strings"
	"testing"
	"time"
)

// example returns the JSON of docs/events.md's example NAME.
func example(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- ocsf-example: "+name+" -->\n```json\n")
	if !ok {
		t.Fatalf("no example %s in docs/events.md", name)
	}
	body, _, _ := strings.Cut(rest, "```")
	return []byte(strings.Join(strings.Fields(body), " "))
}

func TestDenialLines(t *testing.T) {
	for _, c := range []struct {
		example, want string
		denial        bool
	}{
		{"network-open-denied", "DENY /usr/bin/curl(4242) -> api.example.com:443 policy_denied", true},
		{"file-denied", "DENY-FS /usr/bin/cat(4242) read /etc/shadow", true},
		{"http-denied", "DENY /usr/bin/curl(4242) -> POST files.example.com:80/pub/data.tar.gz policy_denied", true},
		{"denial-logging-unavailable", "", false},
	} {
		e, ok := Parse(example(t, c.example))
		if !ok {
			t.Fatalf("%s: not parsed", c.example)
		}
		if IsDenial(e) != c.denial {
			t.Errorf("%s: IsDenial %v", c.example, !c.denial)
		}
		if got := Line(e); c.denial && got != c.want {
			t.Errorf("%s: %q, want %q", c.example, got, c.want)
		}
	}
	// A reason code in status_detail is shown after the class.
	e, _ := Parse([]byte(`{"class_uid":4001,"action_id":2,"status_code":"policy_denied","status_detail":"no_matching_endpoint","actor":{"process":{"pid":4242,"file":{"path":"/usr/bin/curl"}}},"dst_endpoint":{"hostname":"pastebin.com","port":443}}`))
	if got, want := Line(e), "DENY /usr/bin/curl(4242) -> pastebin.com:443 policy_denied/no_matching_endpoint"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestFilter(t *testing.T) {
	e, _ := Parse(example(t, "network-open-denied"))
	at := time.UnixMilli(e.Time)
	for _, c := range []struct {
		f    Filter
		want bool
	}{
		{Filter{Sandbox: "sbx-3f9a2c"}, true},
		{Filter{Sandbox: "sbx-other"}, false},
		{Filter{Sandbox: "sbx-3f9a2c", Since: at.Add(time.Second)}, false},
		{Filter{Sandbox: "sbx-3f9a2c", Since: at.Add(-time.Second), Denied: true}, true},
	} {
		if got := c.f.Match(e); got != c.want {
			t.Errorf("%+v: %v", c.f, got)
		}
	}
	if _, ok := Parse([]byte("not json")); ok {
		t.Error("a non-event line parsed")
	}
}
