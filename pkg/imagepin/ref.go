// Package imagepin keeps the one sandbox-image pin of a worker (seed 000,
// "One sandbox-image pin") and detects anything that silently disagrees
// with it.
//
// The pin is a file, $MAC_OPENSHELL_RUNTIME_IMAGE_REF_FILE or
// ~/.mac/openshell/runtime-image-ref, whose only content is one image
// reference carrying an @sha256 digest. Coding sandboxes get the image
// through the --from argument in MAC_OPENSHELL_CREATE_ARGS, which is
// derived from the pin (DeriveCreateArgs); the repository test gate reads
// the pin directly. Check refuses to pick one when the two disagree, and
// MAC_HUB_VERIFY_IMAGE, the old gate-only pin, counts only on a host that
// has no pin. The file format is documented in docs/image-pin.md.
package imagepin

import (
	"fmt"
	"regexp"
	"strings"
)

// Ref is a parsed container image reference.
type Ref struct {
	Domain string // registry host[:port], "" when the reference names none
	Path   string // repository path below the domain
	Tag    string // "" when absent
	Digest string // "sha256:<64 hex>", "" when absent
}

// Name is the repository name including the domain.
func (r Ref) Name() string {
	if r.Domain == "" {
		return r.Path
	}
	return r.Domain + "/" + r.Path
}

// String reassembles the reference exactly as parsed.
func (r Ref) String() string {
	s := r.Name()
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// The grammar of github.com/distribution/reference, written out here.
var (
	pathComponentRE   = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	domainComponentRE = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domainRE          = regexp.MustCompile(`^(?:` + domainComponentRE + `(?:\.` + domainComponentRE + `)*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$`)
	tagRE             = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	sha256DigestRE    = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	sha256HexRE       = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

const maxNameLength = 255

// ParseRef parses an image reference ([domain/]path[:tag][@digest]). It
// accepts only sha256 digests. The error names what is wrong.
func ParseRef(s string) (Ref, error) {
	fail := func(format string, args ...any) (Ref, error) {
		return Ref{}, fmt.Errorf("image reference %q: %s", s, fmt.Sprintf(format, args...))
	}
	if s == "" {
		return fail("empty")
	}
	if strings.TrimSpace(s) != s || strings.ContainsAny(s, " \t\r\n\x00") {
		return fail("contains whitespace")
	}
	var r Ref
	rest := s
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		r.Digest = rest[i+1:]
		rest = rest[:i]
		if !sha256DigestRE.MatchString(r.Digest) {
			return fail("digest %q is not sha256:<64 lowercase hex digits>", r.Digest)
		}
	}
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i:], "/") {
		r.Tag = rest[i+1:]
		rest = rest[:i]
		if !tagRE.MatchString(r.Tag) {
			return fail("tag %q is invalid (letters, digits, _ . -, at most 128, not starting with . or -)", r.Tag)
		}
	}
	if rest == "" {
		return fail("missing repository name")
	}
	if len(rest) > maxNameLength {
		return fail("repository name longer than %d characters", maxNameLength)
	}
	path := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		first := rest[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
			r.Domain = first
			path = rest[i+1:]
			if !domainRE.MatchString(r.Domain) {
				return fail("registry host %q is invalid", r.Domain)
			}
		}
	}
	if path == "" {
		return fail("missing repository path after registry %q", r.Domain)
	}
	for _, c := range strings.Split(path, "/") {
		if !pathComponentRE.MatchString(c) {
			return fail("repository path component %q is invalid (lowercase letters and digits, separated by . _ __ or -)", c)
		}
	}
	r.Path = path
	return r, nil
}

// ParsePinnedRef parses a reference that must carry an @sha256 digest, as
// the pin must.
func ParsePinnedRef(s string) (Ref, error) {
	r, err := ParseRef(s)
	if err != nil {
		return Ref{}, err
	}
	if r.Digest == "" {
		return Ref{}, fmt.Errorf("image reference %q: a pin must carry an @sha256:<64 hex> digest (a tag alone can move)", s)
	}
	return r, nil
}

// ValidInputSHA256 reports whether s is a sha256 hex digest (64 lowercase
// hex digits), the form --input-sha256 takes.
func ValidInputSHA256(s string) bool { return sha256HexRE.MatchString(s) }
