package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"sync"
)

// Kind is a repository file that can name package registry hosts.
type Kind string

// The files derivation reads.
const (
	KindNpmrc        Kind = "npmrc"        // .npmrc: registry=, @scope:registry=
	KindPackageLock  Kind = "package-lock" // package-lock.json, npm-shrinkwrap.json: "resolved"
	KindYarnLock     Kind = "yarn-lock"    // yarn.lock: resolved
	KindPnpmLock     Kind = "pnpm-lock"    // pnpm-lock.yaml: tarball:, registry:, repo:
	KindRequirements Kind = "requirements" // requirements*.txt: --index-url, --extra-index-url, -i, --find-links, URL requirements
	KindUVLock       Kind = "uv-lock"      // uv.lock: registry =, url =, git =
	KindPoetryLock   Kind = "poetry-lock"  // poetry.lock: [package.source] url =
	kindNone         Kind = ""
)

// Parser bounds for untrusted input.
const (
	maxJSONDepth   = 512     // deeper package-lock nesting is refused
	maxLineLen     = 1 << 20 // longer text lines are refused
	maxValueLen    = 8192    // longer values are ignored: no registry URL is that long
	maxRefsPerFile = 1 << 20 // a parser stops after this many references
)

// Ecosystems: which package manager binaries a grant is for.
const (
	ecosystemNPM    = "npm"
	ecosystemPython = "python"
	ecosystemAny    = "any" // hub-declared hosts: every package manager
)

// Kinds lists every Kind, in a fixed order.
var Kinds = []Kind{KindNpmrc, KindPackageLock, KindYarnLock, KindPnpmLock, KindRequirements, KindUVLock, KindPoetryLock}

// KindOf recognises a repository file by its slash-separated path relative
// to the repository root.
func KindOf(rel string) Kind {
	base := path.Base(rel)
	switch base {
	case ".npmrc":
		return KindNpmrc
	case "package-lock.json", "npm-shrinkwrap.json":
		return KindPackageLock
	case "yarn.lock":
		return KindYarnLock
	case "pnpm-lock.yaml":
		return KindPnpmLock
	case "uv.lock":
		return KindUVLock
	case "poetry.lock":
		return KindPoetryLock
	}
	if m, _ := path.Match("requirements*.txt", base); m {
		return KindRequirements
	}
	if strings.HasSuffix(base, ".txt") && path.Base(path.Dir(rel)) == "requirements" {
		return KindRequirements // requirements/dev.txt
	}
	return kindNone
}

// ecosystem is the package manager family whose binaries a grant derived
// from a file of this kind is for.
func (k Kind) ecosystem() string {
	switch k {
	case KindNpmrc, KindPackageLock, KindYarnLock, KindPnpmLock:
		return ecosystemNPM
	}
	return ecosystemPython
}

// Ref is one registry reference found in a file: a URL (or, where the
// format requires a URL, whatever stands there) and its 1-based line.
type Ref struct {
	Value string
	Line  int
}

// Parse extracts the registry references of one file of the given kind.
// The input is untrusted: Parse never panics, runs in time linear in the
// input, refuses lines longer than 1 MiB and JSON nested deeper than 512
// levels, and stops after 1,048,576 references. References found before
// an error are returned with it.
func Parse(kind Kind, data []byte) ([]Ref, error) {
	var refs []Ref
	emit := func(v string, line int) bool {
		if len(v) > maxValueLen {
			return true // absurd value: not a URL any registry uses
		}
		refs = append(refs, Ref{Value: v, Line: line})
		return len(refs) < maxRefsPerFile
	}
	var err error
	switch kind {
	case KindNpmrc:
		err = eachLine(data, func(l string, n int) bool { return npmrcLine(l, n, emit) })
	case KindPackageLock:
		err = packageLock(data, emit)
	case KindYarnLock:
		err = eachLine(data, func(l string, n int) bool { return yarnLine(l, n, emit) })
	case KindPnpmLock:
		err = eachLine(data, func(l string, n int) bool { return regexLine(pnpmKey(), l, n, emit) })
	case KindRequirements:
		err = requirements(data, emit)
	case KindUVLock, KindPoetryLock:
		err = eachLine(data, func(l string, n int) bool { return regexLine(tomlKey(), l, n, emit) })
	default:
		err = fmt.Errorf("unknown file kind %q", kind)
	}
	return refs, err
}

// eachLine calls fn for every line (without its terminator) until fn
// returns false.
func eachLine(data []byte, fn func(line string, n int) bool) error {
	n := 0
	for len(data) > 0 {
		n++
		i := bytes.IndexByte(data, '\n')
		var line []byte
		if i < 0 {
			line, data = data, nil
		} else {
			line, data = data[:i], data[i+1:]
		}
		if len(line) > maxLineLen {
			return fmt.Errorf("line %d is longer than %d bytes", n, maxLineLen)
		}
		if !fn(strings.TrimSuffix(string(line), "\r"), n) {
			return nil
		}
	}
	return nil
}

func unquote(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

// npmrcLine handles "registry=URL" and "@scope:registry=URL". Every other
// key (including the //host/:_authToken credentials) is ignored and never
// leaves this function.
func npmrcLine(l string, n int, emit func(string, int) bool) bool {
	l = strings.TrimSpace(l)
	if l == "" || l[0] == '#' || l[0] == ';' {
		return true
	}
	key, val, ok := strings.Cut(l, "=")
	if !ok {
		return true
	}
	key = strings.TrimSpace(key)
	if key != "registry" && !(strings.HasPrefix(key, "@") && strings.HasSuffix(key, ":registry")) {
		return true
	}
	return emit(unquote(val), n)
}

// yarnLine handles yarn v1 `resolved "URL"` lines.
func yarnLine(l string, n int, emit func(string, int) bool) bool {
	t := strings.TrimSpace(l)
	rest, ok := strings.CutPrefix(t, "resolved")
	if !ok || rest == "" || (rest[0] != ' ' && rest[0] != ':' && rest[0] != '\t') {
		return true
	}
	v := unquote(strings.TrimPrefix(strings.TrimSpace(rest), ":"))
	if !strings.Contains(v, "://") {
		return true
	}
	return emit(v, n)
}

// The key patterns compile on first use, not at package init: every
// sandbox start (and the init inside it) links this package, few parse a
// lockfile.
var (
	// pnpm-lock.yaml: resolution: {tarball: URL}, registry: URL, repo: URL.
	pnpmKey = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:^|[\s{,])(?:tarball|registry|repo):\s*(?:'([^']*)'|"([^"]*)"|([^\s,'"{}]+))`)
	})
	// uv.lock and poetry.lock: registry = "...", url = "...", git = "...".
	tomlKey = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:^|[\s{,\[])(?:registry|url|git)\s*=\s*(?:"([^"]*)"|'([^']*)')`)
	})
)

// regexLine emits every URL-looking value the key pattern captures.
func regexLine(re *regexp.Regexp, l string, n int, emit func(string, int) bool) bool {
	if !strings.Contains(l, "://") {
		return true
	}
	for _, m := range re.FindAllStringSubmatch(l, -1) {
		v := m[1] + m[2]
		if len(m) > 3 {
			v += m[3]
		}
		if strings.Contains(v, "://") && !emit(v, n) {
			return false
		}
	}
	return true
}

// requirements handles pip requirement files: the index options, find
// links and direct URL requirements. Continuation lines are joined;
// comments are stripped; other options (-r, -c, -e paths, hashes) are
// ignored.
func requirements(data []byte, emit func(string, int) bool) error {
	var logical strings.Builder
	start := 0
	stop := false
	err := eachLine(data, func(l string, n int) bool {
		if logical.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(l, `\`) {
			if logical.Len()+len(l) > maxLineLen {
				logical.Reset()
				return true
			}
			logical.WriteString(strings.TrimSuffix(l, `\`))
			logical.WriteByte(' ')
			return true
		}
		logical.WriteString(l)
		line := logical.String()
		logical.Reset()
		if !requirementLine(line, start, emit) {
			stop = true
			return false
		}
		return true
	})
	if err == nil && !stop && logical.Len() > 0 {
		requirementLine(logical.String(), start, emit)
	}
	return err
}

func requirementLine(l string, n int, emit func(string, int) bool) bool {
	// pip: "#" starts a comment at the line start or after whitespace.
	if i := strings.Index(l, "#"); i == 0 {
		return true
	}
	for i := 1; i < len(l); i++ {
		if l[i] == '#' && (l[i-1] == ' ' || l[i-1] == '\t') {
			l = l[:i]
			break
		}
	}
	f := strings.Fields(l)
	for i := 0; i < len(f); i++ {
		tok := f[i]
		next := func() (string, bool) {
			if i+1 < len(f) {
				i++
				return f[i], true
			}
			return "", false
		}
		var v string
		var ok, mustURL bool
		switch {
		case tok == "--index-url" || tok == "--extra-index-url" || tok == "-i":
			v, ok = next()
			mustURL = true
		case strings.HasPrefix(tok, "--index-url=") || strings.HasPrefix(tok, "--extra-index-url="):
			_, v, _ = strings.Cut(tok, "=")
			ok, mustURL = true, true
		case strings.HasPrefix(tok, "-i") && !strings.HasPrefix(tok, "--"):
			v, ok, mustURL = tok[2:], true, true
		case tok == "--find-links" || tok == "-f":
			v, ok = next()
		case strings.HasPrefix(tok, "--find-links="):
			_, v, _ = strings.Cut(tok, "=")
			ok = true
		case strings.HasPrefix(tok, "-f") && !strings.HasPrefix(tok, "--"):
			v, ok = tok[2:], true
		case tok == "@":
			v, ok = next() // name @ URL (PEP 508 direct reference)
		case i == 0 && strings.Contains(tok, "://"):
			v, ok = tok, true // a bare URL requirement
		case strings.HasPrefix(tok, "-"):
			// Another option; its argument (if any) is not a registry.
			continue
		}
		if !ok {
			continue
		}
		v = unquote(v)
		if v == "" || (!mustURL && !strings.Contains(v, "://")) {
			continue
		}
		if !emit(v, n) {
			return false
		}
	}
	return true
}

// packageLock walks the JSON token stream of package-lock.json or
// npm-shrinkwrap.json (v1 nested "dependencies", v2/v3 "packages") and
// emits every string value of a "resolved" key, without building the
// document in memory.
func packageLock(data []byte, emit func(string, int) bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		obj       bool
		expectKey bool
		key       string
	}
	var stack []frame
	line, scanned := 1, 0
	lineAt := func(off int64) int {
		if off > int64(len(data)) {
			off = int64(len(data))
		}
		line += bytes.Count(data[scanned:off], []byte{'\n'})
		scanned = int(off)
		return line
	}
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].expectKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if len(stack) != 0 {
				return errors.New("unexpected end of JSON")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= maxJSONDepth {
					return fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
				}
				if n := len(stack); n > 0 && stack[n-1].obj {
					stack[n-1].expectKey = false
				}
				stack = append(stack, frame{obj: t == '{', expectKey: t == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			n := len(stack)
			if n > 0 && stack[n-1].obj && stack[n-1].expectKey {
				stack[n-1].key = t
				stack[n-1].expectKey = false
				continue
			}
			if n > 0 && stack[n-1].obj && stack[n-1].key == "resolved" && strings.Contains(t, "://") {
				if !emit(t, lineAt(dec.InputOffset())) {
					return nil
				}
			}
			valueDone()
		default:
			valueDone()
		}
	}
}
