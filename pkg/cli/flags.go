package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
)

// ParseInterspersed parses flags that may come before, between or after
// positional arguments ("check FILE --json") and returns the positional
// ones; everything after "--" is positional.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := ParseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stopped at a positional argument; keep it and go on.
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// ParseFlags is fs.Parse(args) with the error's flag spelled --name
// (flag.ErrHelp is returned as it is).
func ParseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return errors.New(FlagMessage(err.Error()))
}

// WriteJSON writes v as one line of JSON (HTML characters unescaped).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// longFlagLine is a line of flag.PrintDefaults naming a flag longer than
// one letter. This file's expressions are compiled on first use: only
// --help and flag errors need them, and at package initialisation every
// start of every binary paid for them (with the others below, about
// 0.03 ms: GODEBUG=inittrace=1).
var longFlagLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^  -[A-Za-z][-A-Za-z0-9_.]`) })

// PrintFlags writes fs's flags to w as flag.PrintDefaults does, but
// spelled as every Palisade --help and message spells them: --name, and
// -x for a one-letter flag (-o). The flag package accepts -name and
// --name alike and prints -name.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if longFlagLine().MatchString(line) {
			line = "  --" + line[3:]
		}
		io.WriteString(w, line)
	}
}

// flagName is a flag as the flag package's messages spell it ("flag
// provided but not defined: -x", "invalid value ... for flag -x: ...",
// "flag needs an argument: -x", "invalid boolean value ... for -x").
var flagName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(: |for |flag )-([A-Za-z][-A-Za-z0-9_.])`) })

// FlagMessage respells the flag package's messages with --name (a
// one-letter flag stays -x).
func FlagMessage(s string) string { return flagName().ReplaceAllString(s, "$1--$2") }

// FlagOutput is a FlagSet output for w that respells the flag package's
// own error lines with --name; everything else passes unchanged.
func FlagOutput(w io.Writer) io.Writer { return flagWriter{w} }

type flagWriter struct{ w io.Writer }

// flagErrors start the lines the flag package writes for a parse error.
var flagErrors = []string{"flag provided but not defined", "flag needs an argument", "invalid value", "invalid boolean", "bad flag syntax"}

func (f flagWriter) Write(p []byte) (int, error) {
	s := string(p)
	for _, e := range flagErrors {
		if strings.HasPrefix(s, e) {
			s = FlagMessage(s)
			break
		}
	}
	if _, err := io.WriteString(f.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
