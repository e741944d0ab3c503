package eventlog

import (
	"strings"
	"testing"
)

// The agent names its executables and the files it touches: a denial's
// human line must not carry a terminal escape to the operator's terminal
// (logs runs as root), nor a newline that forges a second DENY line.
func TestLineEscapesWhatTheAgentNamed(t *testing.T) {
	evil := "/work/ls\x1b]0;PWNED\x07\x1b[31mRED\nDENY-FS forged(1) read nothing\r\u202e\u2028\u009b2J\xff"
	line := `{"class_uid":1001,"activity_name":"Read","action_id":2,"time":1,` +
		`"actor":{"process":{"pid":7,"sandbox":"s","file":{"path":` + quoteJSON(evil) + `}}},` +
		`"file":{"path":` + quoteJSON(evil) + `}}`
	e, ok := Parse([]byte(line))
	if !ok {
		t.Fatalf("not parsed: %s", line)
	}
	got := Line(e)
	for _, r := range got {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' || r == '\u2028' || r == '\ufffd' {
			t.Fatalf("Line kept %U: %q", r, got)
		}
	}
	if !strings.HasPrefix(got, `DENY-FS /work/ls\x1b]0;PWNED\a\x1b[31mRED\nDENY-FS forged(1) read nothing\r\u202e\u2028\u009b2J\ufffd(7) read`) {
		t.Errorf("Line does not show the escaped name: %q", got)
	}
	if plain := Line(Event{ClassUID: classFileSystem, ActionID: actionDenied, ActivityName: "Read", File: struct {
		Path string `json:"path"`
	}{"/etc/shadow"}}); plain != "DENY-FS ? read /etc/shadow" {
		t.Errorf("a clean line changed: %q", plain)
	}
}

// quoteJSON is a JSON string literal of s with its bytes >= 0x20 raw
// (an invalid byte decodes to U+FFFD).
func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&15])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
