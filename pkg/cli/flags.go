package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
)

// ParseInterspersed parses flags that may come before, between or after
// positional arguments ("check FILE --json") and returns the positional
// ones; everything after "--" is positional.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
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

// WriteJSON writes v as one line of JSON (HTML characters unescaped).
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}
