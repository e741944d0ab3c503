package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// HostPattern is a compiled endpoint host selector. Matching is
// case-insensitive and ignores one trailing dot on the host being matched.
//
//	github.com              exactly that name
//	*.example.com           exactly one label before example.com
//	**.example.com          one or more labels before example.com
//	*-aiplatform.g.com      "*" inside the first label: any run of label characters
//	192.0.2.10, 2001:db8::1 that address (IPv4-mapped IPv6 matches its IPv4)
//
// Wildcards are allowed in the first label only and must be followed by at
// least two literal labels, so bare "*", "**" and TLD wildcards ("*.com")
// never compile. A nil *HostPattern matches nothing.
type HostPattern struct {
	source string
	kind   hostKind
	first  string   // first label pattern (wildcard kinds)
	suffix []string // literal labels after the first (wildcard kinds)
	addr   netip.Addr
}

type hostKind int

const (
	hostExact    hostKind = iota // literal DNS name
	hostOneLabel                 // *.rest
	hostMultiple                 // **.rest
	hostIntra                    // a*b.rest
	hostIP                       // IP literal
)

// CompileHostPattern validates and compiles a host selector. The error says
// what is wrong without repeating the input.
func CompileHostPattern(s string) (*HostPattern, error) {
	if s == "" {
		return nil, errors.New("must not be empty")
	}
	if len(s) > 253 {
		return nil, fmt.Errorf("is %d characters; a DNS name has at most 253", len(s))
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return nil, errors.New("must not contain whitespace or control characters")
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return nil, errors.New("IPv6 zones are not allowed")
		}
		return &HostPattern{source: a.String(), kind: hostIP, addr: a.Unmap()}, nil
	}
	if strings.HasPrefix(s, "[") {
		return nil, errors.New("write IPv6 addresses without brackets")
	}
	lower := strings.ToLower(s)
	if strings.HasSuffix(lower, ".") {
		return nil, errors.New("omit the trailing dot")
	}
	labels := strings.Split(lower, ".")
	for i, l := range labels {
		if l == "" {
			return nil, errors.New("must not contain empty labels")
		}
		if i > 0 && strings.Contains(l, "*") {
			return nil, errors.New("wildcards are allowed only in the first label")
		}
	}
	p := &HostPattern{source: lower}
	first := labels[0]
	switch {
	case first == "*":
		p.kind = hostOneLabel
	case first == "**":
		p.kind = hostMultiple
	case strings.Contains(first, "**"):
		return nil, errors.New(`"**" must be the whole first label`)
	case strings.Contains(first, "*"):
		p.kind = hostIntra
		if len(first) > 63 {
			return nil, errors.New("labels have at most 63 characters")
		}
		for _, r := range first {
			if !(r == '*' || isLabelChar(r)) {
				return nil, fmt.Errorf("first label may contain only letters, digits, '-', '_' and '*', not %q", r)
			}
		}
	default:
		p.kind = hostExact
	}
	rest := labels
	if p.kind != hostExact {
		rest = labels[1:]
	}
	for _, l := range rest {
		if err := checkLabel(l); err != nil {
			return nil, err
		}
	}
	if p.kind == hostExact {
		if last := labels[len(labels)-1]; allDigits(last) {
			return nil, errors.New("is neither a valid IP address nor a DNS name (numeric last label)")
		}
		return p, nil
	}
	if len(rest) < 2 {
		return nil, errors.New("a wildcard must be followed by at least two labels (TLD wildcards such as *.com are not allowed)")
	}
	if allDigits(rest[len(rest)-1]) {
		return nil, errors.New("wildcards cannot select IP addresses")
	}
	p.first = first
	p.suffix = rest
	return p, nil
}

func isLabelChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

func checkLabel(l string) error {
	if len(l) > 63 {
		return errors.New("labels have at most 63 characters")
	}
	for _, r := range l {
		if !isLabelChar(r) {
			return fmt.Errorf("labels may contain only letters, digits, '-' and '_', not %q", r)
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Errorf("label %q must not start or end with '-'", l)
	}
	return nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// String returns the normalised pattern.
func (p *HostPattern) String() string {
	if p == nil {
		return ""
	}
	return p.source
}

// IsWildcard reports whether the pattern can match more than one name.
func (p *HostPattern) IsWildcard() bool {
	return p != nil && (p.kind == hostOneLabel || p.kind == hostMultiple || p.kind == hostIntra)
}

// IsIP reports whether the pattern is an IP literal.
func (p *HostPattern) IsIP() bool { return p != nil && p.kind == hostIP }

// Match reports whether host (a name or IP literal, without port) is
// selected by the pattern.
func (p *HostPattern) Match(host string) bool {
	if p == nil || host == "" {
		return false
	}
	if p.kind == hostIP {
		h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		a, err := netip.ParseAddr(h)
		return err == nil && a.Zone() == "" && a.Unmap() == p.addr
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" || strings.HasSuffix(h, ".") {
		return false
	}
	if p.kind == hostExact {
		return h == p.source
	}
	labels := strings.Split(h, ".")
	n := len(p.suffix)
	if len(labels) <= n {
		return false
	}
	for i, l := range labels[len(labels)-n:] {
		if l != p.suffix[i] {
			return false
		}
	}
	head := labels[:len(labels)-n]
	for _, l := range head {
		if l == "" {
			return false
		}
	}
	switch p.kind {
	case hostOneLabel:
		return len(head) == 1
	case hostMultiple:
		return len(head) >= 1
	case hostIntra:
		return len(head) == 1 && globLabel(p.first, head[0])
	}
	return false
}

// globLabel matches s against pattern where '*' matches any run of
// characters (s never contains '.').
func globLabel(pattern, s string) bool {
	// Iterative wildcard match with backtracking to the last star.
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(pattern) && pattern[pi] == '*':
			star, mark = pi, si
			pi++
		case pi < len(pattern) && pattern[pi] == s[si]:
			pi++
			si++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}
