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

func TestPrintFlagsSpellsLongFlagsWithTwoDashes(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("log-format", "text", "format")
	fs.String("o", "", "output")
	fs.Bool("json", false, "json\nsecond line")
	var buf bytes.Buffer
	PrintFlags(&buf, fs)
	want := "  --json\n    \tjson\n    \tsecond line\n  --log-format string\n    \tformat (default \"text\")\n  -o string\n    \toutput\n"
	if buf.String() != want {
		t.Fatalf("PrintFlags:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestFlagMessages(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(FlagOutput(&out))
	fs.Duration("timeout", 0, "")
	fs.String("o", "", "")
	cases := map[string][]string{
		"flag provided but not defined: --bogus":            {"--bogus"},
		"flag provided but not defined: -x":                 {"-x"},
		`invalid value "x" for flag --timeout: parse error`: {"-timeout", "x"},
		"flag needs an argument: -o":                        {"-o"},
		"flag needs an argument: --timeout":                 {"--timeout"},
	}
	for want, args := range cases {
		out.Reset()
		err := ParseFlags(fs, args)
		if err == nil || err.Error() != want || !strings.HasPrefix(out.String(), want+"\n") {
			t.Errorf("%v: error %v, printed %q; want %q", args, err, out.String(), want)
		}
	}
	if err := ParseFlags(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestCommandTable(t *testing.T) {
	cmds := []Command{
		{Name: "run", Synopsis: "run -- CMD", Summary: "run it\nsecond line"},
		{Name: "a-very-long-command", Synopsis: "a-very-long-command [--with] [--many] FLAGS", Summary: "long"},
		{Name: "gc", Summary: "collect"},
	}
	if got := CommandNames(cmds); got != "run, a-very-long-command, gc" {
		t.Errorf("CommandNames = %q", got)
	}
	var buf bytes.Buffer
	PrintCommands(&buf, cmds)
	want := "  run -- CMD                    run it\n" +
		"                                second line\n" +
		"  a-very-long-command [--with] [--many] FLAGS\n" +
		"                                long\n" +
		"  gc                            collect\n"
	if buf.String() != want {
		t.Errorf("PrintCommands:\n%s\nwant:\n%s", buf.String(), want)
	}
	err := UnknownCommand("prog", "x", cmds)
	if Code(err) != ExitUsage || !strings.Contains(err.Error(), "commands: run, a-very-long-command, gc") {
		t.Errorf("UnknownCommand: %v", err)
	}
}

func TestBuildInfoString(t *testing.T) {
	b := BuildInfo{Program: "p", Version: "(devel)", Revision: "abc", Time: "2026-01-01T00:00:00Z", Modified: true, GoVersion: "go1.26.0", Platform: "linux/amd64"}
	if got, want := b.String(), "p (devel) commit abc+modified (2026-01-01T00:00:00Z) go1.26.0 linux/amd64"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	b.Revision = ""
	if got, want := b.String(), "p (devel) commit unknown go1.26.0 linux/amd64"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if !IsVersion([]string{"--version"}) || IsVersion([]string{"run", "--version"}) || IsVersion(nil) {
		t.Error("IsVersion")
	}
}
