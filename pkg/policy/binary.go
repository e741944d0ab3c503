package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Binary patterns are absolute paths whose components may be globs in the
// syntax of path.Match ("*", "?", "[...]" within one component) or the
// whole component "**", which matches zero or more components.

// checkBinaryPattern validates a binaries[].path value and returns it
// cleaned.
func checkBinaryPattern(p string) (string, error) {
	clean, err := checkAbsPath(p)
	if err != nil {
		return "", err
	}
	if strings.Contains(p, `\`) {
		return "", errors.New(`must not contain '\' (glob escapes are not supported)`)
	}
	if clean == "/" {
		return "", errors.New(`must name an executable, not "/"`)
	}
	for _, c := range strings.Split(clean[1:], "/") {
		if c == "**" {
			continue
		}
		if strings.Contains(c, "**") {
			return "", fmt.Errorf(`"**" must be a whole path component, not part of %q`, c)
		}
		if _, err := path.Match(c, ""); err != nil {
			return "", fmt.Errorf("component %q is not a valid glob", c)
		}
	}
	return clean, nil
}

// checkAbsPath validates an absolute filesystem path (no "..", no control
// characters, bounded length) and returns it cleaned.
func checkAbsPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("must not be empty")
	}
	if len(p) > MaxPathLen {
		return "", fmt.Errorf("is %d characters; at most %d allowed", len(p), MaxPathLen)
	}
	if !strings.HasPrefix(p, "/") {
		return "", errors.New("must be an absolute path (start with '/')")
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f {
			return "", errors.New("must not contain control characters")
		}
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", errors.New("must not contain '..' components")
		}
	}
	return path.Clean(p), nil
}

// MatchBinary reports whether the absolute executable path exe matches the
// binary pattern (as stored in Binary.Path).
func MatchBinary(pattern, exe string) bool {
	if !strings.HasPrefix(pattern, "/") || !strings.HasPrefix(exe, "/") {
		return false
	}
	exe = path.Clean(exe)
	return matchComponents(splitComponents(pattern), splitComponents(exe))
}

func splitComponents(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

func matchComponents(pat, comps []string) bool {
	// Dynamic programming over (pattern index, path index); "**" consumes
	// zero or more components.
	type state struct{ i, j int }
	seen := map[state]bool{}
	var walk func(i, j int) bool
	walk = func(i, j int) bool {
		s := state{i, j}
		if v, ok := seen[s]; ok {
			return v
		}
		var ok bool
		switch {
		case i == len(pat):
			ok = j == len(comps)
		case pat[i] == "**":
			ok = walk(i+1, j) || (j < len(comps) && walk(i, j+1))
		case j < len(comps):
			m, err := path.Match(pat[i], comps[j])
			ok = err == nil && m && walk(i+1, j+1)
		}
		seen[s] = ok
		return ok
	}
	return walk(0, 0)
}

// binaryMayLieUnder reports whether some path matched by the binary
// pattern is dir itself or lies beneath it. dir is a literal cleaned
// absolute path. Any non-empty remainder of the pattern can be satisfied by
// some suffix, so the question is whether the pattern can consume all of
// dir's components as a prefix.
func binaryMayLieUnder(pattern, dir string) bool {
	pat := splitComponents(pattern)
	d := splitComponents(dir)
	type state struct{ i, j int }
	seen := map[state]bool{}
	var walk func(i, j int) bool
	walk = func(i, j int) bool {
		if j == len(d) {
			return true // dir consumed: the rest of the pattern names something under it
		}
		if i == len(pat) {
			return false // pattern ended above dir
		}
		s := state{i, j}
		if v, ok := seen[s]; ok {
			return v
		}
		var ok bool
		if pat[i] == "**" {
			ok = walk(i+1, j) || walk(i, j+1)
		} else {
			m, err := path.Match(pat[i], d[j])
			ok = err == nil && m && walk(i+1, j+1)
		}
		seen[s] = ok
		return ok
	}
	return walk(0, 0)
}
