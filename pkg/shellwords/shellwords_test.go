package shellwords

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// shSplit asks the system's POSIX shell how it splits s, so that the tests
// compare Split against a real shell rather than against expectations
// written by hand.
func shSplit(t testing.TB, s string) ([]string, bool) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, "-c", `eval "set -- $1" || exit 99; printf '%s\0' "$#" "$@"`, "sh", s)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("sh did not finish splitting %q within 10s", s)
	}
	if err != nil {
		return nil, false
	}
	parts := strings.Split(string(out), "\x00")
	n, err := strconv.Atoi(parts[0])
	if err != nil || len(parts) != n+2 {
		t.Fatalf("sh output for %q unparsable: %q", s, out)
	}
	words := parts[1 : n+1]
	if len(words) == 0 {
		words = nil
	}
	return words, true
}

func TestSplitTable(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   \t ", nil},
		{"--from img", []string{"--from", "img"}},
		{"--from=img --upload /src:/src", []string{"--from=img", "--upload", "/src:/src"}},
		{`--from 'a b'`, []string{"--from", "a b"}},
		{`--from "a b"`, []string{"--from", "a b"}},
		{`a\ b`, []string{"a b"}},
		{`'it'\''s'`, []string{"it's"}},
		{`"a\"b\\c\d"`, []string{`a"b\c\d`}},
		{`"\$x"`, []string{"$x"}},
		{`'$x'`, []string{"$x"}},
		{`''`, []string{""}},
		{`a '' b`, []string{"a", "", "b"}},
		{`x"y"'z'`, []string{"xyz"}},
		{"a\\\nb", []string{"ab"}},
		{"\"a\\\nb\"", []string{"ab"}},
		{`'*' "?" \[`, []string{"*", "?", "["}},
		{`a#b c~`, []string{"a#b", "c~"}},
		{`"#" '~'`, []string{"#", "~"}},
		{`'a;b' "c|d"`, []string{"a;b", "c|d"}},
	}
	for _, c := range cases {
		got, err := Split(c.in)
		if err != nil {
			t.Errorf("Split(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%q) = %q, want %q", c.in, got, c.want)
		}
		if sh, ok := shSplit(t, c.in); !ok || !reflect.DeepEqual(sh, c.want) {
			t.Errorf("sh splits %q as %q (ok=%v), table says %q", c.in, sh, ok, c.want)
		}
	}
}

func TestSplitRejects(t *testing.T) {
	cases := []struct{ in, msg string }{
		{`--from 'img`, "unterminated single quote"},
		{`--from "img`, "unterminated double quote"},
		{`--from "img\"`, "unterminated double quote"},
		{`img\`, "trailing backslash"},
		{`--from $IMG`, "would expand"},
		{`--from "$IMG"`, "inside double quotes would expand"},
		{"--from `cat f`", "would expand"},
		{`--from "$(cat f)"`, "inside double quotes would expand"},
		{`a; rm -rf /`, "operator"},
		{`a && b`, "operator"},
		{`a | b`, "operator"},
		{`a > f`, "operator"},
		{`(a)`, "operator"},
		{`--upload *`, "pathname pattern"},
		{`img?`, "pathname pattern"},
		{`# comment`, "comment"},
		{`--upload ~/src:/src`, "tilde"},
		{"--from a\n--upload b", "newline"},
	}
	for _, c := range cases {
		got, err := Split(c.in)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Split(%q) = %q, %v; want a *SyntaxError", c.in, got, err)
			continue
		}
		if !strings.Contains(se.Error(), c.msg) {
			t.Errorf("Split(%q) error %q does not mention %q", c.in, se, c.msg)
		}
	}
}

func TestQuoteRoundTrip(t *testing.T) {
	words := []string{"", "plain", "a b", "it's", `"`, `\`, "$HOME", "`x`", "*", "~", "#", "a\nb", "--from=r@sha256:ab", "tab\there", "ünï"}
	line := Join(words)
	got, err := Split(line)
	if err != nil {
		t.Fatalf("Split(Join) = %v for %q", err, line)
	}
	if !reflect.DeepEqual(got, words) {
		t.Fatalf("Split(Join(w)) = %q, want %q", got, words)
	}
	sh, ok := shSplit(t, line)
	if !ok || !reflect.DeepEqual(sh, words) {
		t.Fatalf("sh splits Join(w)=%q as %q, want %q", line, sh, words)
	}
	if Quote("ghcr.io/x/y@sha256:00") != "ghcr.io/x/y@sha256:00" {
		t.Errorf("a plain image reference should stay unquoted, got %s", Quote("ghcr.io/x/y@sha256:00"))
	}
}

// FuzzSplit checks that whatever Split accepts, a real POSIX shell splits
// identically, and that Join round-trips every accepted result.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"--from img", `a "b c" 'd'`, `x\ y`, `"a\$b"`, `'`, `$x`, "a\\\nb", `""`, `a"b"c`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			return // no shell can carry NUL in an argument
		}
		words, err := Split(s)
		if err != nil {
			return
		}
		sh, ok := shSplit(t, s)
		if !ok {
			t.Fatalf("Split accepted %q as %q but sh rejects it", s, words)
		}
		if !reflect.DeepEqual(sh, words) {
			t.Fatalf("Split(%q) = %q, sh = %q", s, words, sh)
		}
		again, err := Split(Join(words))
		if err != nil || !reflect.DeepEqual(again, words) {
			t.Fatalf("Split(Join(%q)) = %q, %v", words, again, err)
		}
	})
}
