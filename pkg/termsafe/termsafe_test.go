package termsafe

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile is what a gate or a file name can hold: OSC 52 (clipboard
// write), a title, clear screen and home, a CR that rewrites the line, a
// C1 CSI, a bidi override, a line separator, an invalid byte.
const hostile = "\x1b]52;c;cHduZWQ=\a\x1b]0;owned\a\x1b[2J\x1b[Hpushed 00 to origin/main\rX\u009b31m\u202eevil\u2028\xff"

func rawUnsafe(s string, allow ...rune) []rune {
	var bad []rune
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				bad = append(bad, r)
				continue
			}
		}
		if Unsafe(r) && !strings.ContainsRune(string(allow), r) {
			bad = append(bad, r)
		}
	}
	return bad
}

func TestString(t *testing.T) {
	t.Parallel()
	got := String(hostile)
	want := `\x1b]52;c;cHduZWQ=\a\x1b]0;owned\a\x1b[2J\x1b[Hpushed 00 to origin/main\rX\u009b31m\u202eevil\u2028\ufffd`
	if got != want {
		t.Errorf("String = %s\nwant     %s", got, want)
	}
	if s := "plain café 日本 tab-free"; String(s) != s {
		t.Errorf("a safe string changed: %q", String(s))
	}
}

func TestWriter(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := NewWriter(&out, "[contract] ")
	// Split inside a line and inside a UTF-8 sequence.
	in := "ok\tline\n" + hostile + "\nlast é"
	for i := 0; i < len(in); i += 3 {
		end := min(i+3, len(in))
		if n, err := w.Write([]byte(in[i:end])); n != end-i || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	w.Close()
	want := "[contract] ok\tline\n" +
		`[contract] \x1b]52;c;cHduZWQ=\a\x1b]0;owned\a\x1b[2J\x1b[Hpushed 00 to origin/main\rX\u009b31m\u202eevil\u2028\xff` + "\n" +
		"[contract] last é\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if !strings.HasPrefix(line, "[contract] ") {
			t.Errorf("a line without the prefix: %q", line)
		}
	}
}

// TestWriterLongLine: a line without a newline is cut at 4 KiB, never
// inside a UTF-8 sequence, each piece on a prefixed line.
func TestWriterLongLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	w := NewWriter(&out, "> ")
	in := strings.Repeat("a", maxLine-1) + "é" + strings.Repeat("b", 10)
	w.Write([]byte(in))
	w.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || lines[0] != "> "+strings.Repeat("a", maxLine-1) || lines[1] != "> é"+strings.Repeat("b", 10) {
		t.Errorf("lines %q", lines)
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	doc, _ := json.Marshal(map[string]any{"name": hostile, "n": 1, "list": []string{"a\u202eb", `q"\`}})
	doc = append(doc, '\n')
	got := JSON(doc)
	if bad := rawUnsafe(string(got), '\n'); len(bad) > 0 {
		t.Errorf("raw unsafe runes left: %q in %s", bad, got)
	}
	var a, b any
	if err := json.Unmarshal(doc, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &b); err != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("value changed: %v\n%v\n%v", err, a, b)
	}
}

// FuzzWriter: whatever the input and however it is split, the output has
// no unsafe rune but newlines and tabs, and every line has the prefix.
func FuzzWriter(f *testing.F) {
	f.Add([]byte(hostile), 3)
	f.Add([]byte("a\nb\n\n"), 1)
	f.Add([]byte(strings.Repeat("é", 3000)), 4095)
	f.Fuzz(func(t *testing.T, in []byte, step int) {
		if step <= 0 {
			step = 1
		}
		var out bytes.Buffer
		w := NewWriter(&out, "[g] ")
		for i := 0; i < len(in); i += step {
			w.Write(in[i:min(i+step, len(in))])
		}
		w.Close()
		s := out.String()
		if bad := rawUnsafe(s, '\n', '\t'); len(bad) > 0 {
			t.Fatalf("raw unsafe runes %q in %q", bad, s)
		}
		if s != "" {
			for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
				if !strings.HasPrefix(line, "[g] ") {
					t.Fatalf("line without prefix %q", line)
				}
			}
		}
	})
}

// FuzzJSON: an encoded document keeps its value and loses every raw
// unsafe rune inside strings.
func FuzzJSON(f *testing.F) {
	f.Add(hostile)
	f.Add("plain")
	f.Add(`"\`)
	f.Fuzz(func(t *testing.T, s string) {
		doc, err := json.Marshal([]any{s, map[string]string{s: s}})
		if err != nil {
			return // a string always encodes
		}
		got := JSON(doc)
		if bad := rawUnsafe(string(got)); len(bad) > 0 {
			t.Fatalf("raw unsafe runes %q in %s", bad, got)
		}
		var a, b any
		json.Unmarshal(doc, &a)
		if err := json.Unmarshal(got, &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("value changed: %v %v %v", err, a, b)
		}
	})
}
