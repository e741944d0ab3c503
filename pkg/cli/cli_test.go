package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestCode(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("x"), 1},
		{Usagef("bad %s", "flag"), 2},
		{Failf("denied"), 1},
		{fmt.Errorf("wrapped: %w", WithCode(125, errors.New("sandbox"))), 125},
		{Quiet(3), 3},
		{WithCode(7, nil), 0},
	}
	for i, c := range cases {
		if got := Code(c.err); got != c.want {
			t.Errorf("case %d: Code(%v) = %d, want %d", i, c.err, got, c.want)
		}
	}
}

func TestTruthy(t *testing.T) {
	for _, v := range []string{"1", "true", "TRUE", " yes ", "on"} {
		if !Truthy(v) {
			t.Errorf("Truthy(%q) = false", v)
		}
	}
	for _, v := range []string{"", "0", "false", "off", "no", "2"} {
		if Truthy(v) {
			t.Errorf("Truthy(%q) = true", v)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger("json", &buf, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hello", "k", "v")
	if !bytes.Contains(buf.Bytes(), []byte(`"msg":"hello"`)) {
		t.Fatalf("json logger wrote %q", buf.String())
	}
	if _, err := NewLogger("xml", &buf, slog.LevelInfo); Code(err) != ExitUsage {
		t.Fatalf("unknown format: got %v, want usage error", err)
	}
}

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	j := fs.Bool("json", false, "")
	o := fs.String("o", "", "")
	pos, err := ParseInterspersed(fs, []string{"a", "--json", "b", "-o", "out", "--", "-c", "--json"})
	if err != nil || !*j || *o != "out" || strings.Join(pos, " ") != "a b -c --json" {
		t.Fatalf("pos %q json %v o %q err %v", pos, *j, *o, err)
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, map[string]string{"a": "<b>"}); err != nil || buf.String() != "{\"a\":\"<b>\"}\n" {
		t.Fatalf("%q %v", buf.String(), err)
	}
}
