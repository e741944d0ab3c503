package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Tier is why a host was granted (seed 000, "Two trust tiers").
type Tier string

// The two trust tiers.
const (
	// TierDerivedTrustedRegistry: derived from the repository working tree
	// and EXACTLY on the reviewed trusted-registry list.
	TierDerivedTrustedRegistry Tier = "derived_trusted_registry"
	// TierHubDeclared: listed in the task's top-level
	// metadata.egress_contract.hosts (set through an authenticated hub
	// credential) and well-formed.
	TierHubDeclared Tier = "hub_declared"
)

// Reason says why a host was refused.
type Reason string

// Refusal reasons.
const (
	// ReasonContractGap: derived from the repository, not on the trusted
	// list and not declared by the hub. The task's egress contract does not
	// cover it; a fetch from it will be denied.
	ReasonContractGap Reason = "contract_gap"
	// ReasonMalformedHost: not a valid DNS host name.
	ReasonMalformedHost Reason = "malformed_host"
	// ReasonIPLiteral: an IP address; grants are host-scoped only.
	ReasonIPLiteral Reason = "ip_literal"
	// ReasonWildcard: a host pattern; grants name exactly one host.
	ReasonWildcard Reason = "wildcard"
	// ReasonPort: a port other than 443; grants are HTTPS on 443 only.
	ReasonPort Reason = "port_not_443"
	// ReasonScheme: not an https (or git+https) URL.
	ReasonScheme Reason = "unsupported_scheme"
	// ReasonUnparsable: a value that should be a URL is not one.
	ReasonUnparsable Reason = "unparsable_url"
	// ReasonRuntimeMetadata: listed under metadata.runtime, which the
	// worker writes and which therefore carries only repository trust.
	ReasonRuntimeMetadata Reason = "runtime_metadata_not_trusted"
	// ReasonLimit: more hosts than one expansion grants.
	ReasonLimit Reason = "limit_reached"
	// ReasonNoBinary: every binary the grant would name lies under a
	// writable path of the base policy.
	ReasonNoBinary Reason = "no_safe_binary"
)

// DefaultTrustedRegistries is the built-in reviewed list of registry hosts
// a repository may name and have granted: the public npm and PyPI
// registries (registry.yarnpkg.com is a CNAME of the npm registry used by
// yarn v1 lockfiles; files.pythonhosted.org serves PyPI's files). A
// --trusted-registries file replaces it; it never merges.
var DefaultTrustedRegistries = []string{
	"files.pythonhosted.org",
	"pypi.org",
	"registry.npmjs.org",
	"registry.yarnpkg.com",
}

// MaxHostLen is the longest host name accepted (DNS: 253).
const MaxHostLen = 253

// CheckHost validates a bare host name as a grant may name it: an exact,
// lower-case DNS name of at least two labels, no wildcard, no IP literal,
// no port, no scheme or path, no trailing dot. It returns the name
// lower-cased, or the reason and a human detail.
func CheckHost(s string) (string, Reason, string) {
	if s == "" {
		return "", ReasonMalformedHost, "empty host"
	}
	if len(s) > MaxHostLen {
		return "", ReasonMalformedHost, fmt.Sprintf("%d characters; a DNS name has at most %d", len(s), MaxHostLen)
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@") {
		return "", ReasonMalformedHost, "want a bare host name, not a URL"
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil && a.IsValid() {
		return "", ReasonIPLiteral, "IP literals are never granted; name the host"
	}
	if strings.Contains(s, ":") {
		if h, _, ok := strings.Cut(s, ":"); ok {
			if _, err := netip.ParseAddr(h); err == nil {
				return "", ReasonIPLiteral, "IP literals are never granted; name the host"
			}
		}
		return "", ReasonPort, "ports are not accepted; grants are HTTPS on port 443"
	}
	if strings.Contains(s, "*") {
		return "", ReasonWildcard, "wildcards are never granted; name each host"
	}
	hp, err := policy.CompileHostPattern(s)
	if err != nil {
		return "", ReasonMalformedHost, "not a valid DNS name: host " + err.Error()
	}
	switch {
	case hp.IsIP():
		return "", ReasonIPLiteral, "IP literals are never granted; name the host"
	case hp.IsWildcard():
		return "", ReasonWildcard, "wildcards are never granted; name each host"
	}
	h := hp.String()
	if !strings.Contains(h, ".") {
		return "", ReasonMalformedHost, "single-label names are not granted (they resolve through search domains)"
	}
	return h, "", ""
}

// HostOfURL extracts the host a registry URL names, applying the same
// rules as CheckHost plus: the scheme must be https or git+https and an
// explicit port must be 443. On refusal it returns what may be reported
// of the host (never user information, path or query) with the reason.
func HostOfURL(raw string) (host string, reason Reason, detail string) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", ReasonUnparsable, "not an absolute URL with a host"
	}
	name := strings.ToLower(u.Hostname())
	switch strings.ToLower(u.Scheme) {
	case "https", "git+https":
	case "http":
		return reportable(name), ReasonScheme, "plain http is never granted; grants are HTTPS on port 443"
	default:
		return reportable(name), ReasonScheme, fmt.Sprintf("scheme %q is not granted; grants are HTTPS on port 443", reportable(u.Scheme))
	}
	if p := u.Port(); p != "" && p != "443" {
		return reportable(name), ReasonPort, fmt.Sprintf("port %s is not granted; grants are HTTPS on port 443", reportable(p))
	}
	h, why, d := CheckHost(name)
	if why != "" {
		return reportable(name), why, d
	}
	return h, "", ""
}

// reportable renders an untrusted host for an event: valid UTF-8, no
// control characters, at most 80 bytes.
func reportable(s string) string {
	s = strings.ToValidUTF8(s, "?")
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 80 {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			b.WriteByte('?')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// MaxTrustedRegistries bounds a --trusted-registries file.
const MaxTrustedRegistries = 1024

// ParseTrustedRegistries reads a trusted-registry list: one exact host
// name per line; blank lines and lines starting with '#' are ignored. Every
// entry must pass CheckHost (no wildcards, IPs or ports): a list that
// contains anything else is rejected as a whole, naming the line. The
// result is sorted and deduplicated. An empty list is valid and trusts no
// derived host.
func ParseTrustedRegistries(data []byte) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 4096)
	n := 0
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		h, why, d := CheckHost(l)
		if why != "" {
			return nil, fmt.Errorf("trusted registries line %d: %q: %s (%s)", n, reportable(l), why, d)
		}
		out = append(out, h)
		if len(out) > MaxTrustedRegistries {
			return nil, fmt.Errorf("trusted registries: more than %d entries", MaxTrustedRegistries)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trusted registries line %d: %w", n+1, err)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// checkTrusted validates a trusted list given through the API.
func checkTrusted(list []string) ([]string, error) {
	out := make([]string, 0, len(list))
	for i, s := range list {
		h, why, d := CheckHost(s)
		if why != "" {
			return nil, fmt.Errorf("trusted registries[%d]: %q: %s (%s)", i, reportable(s), why, d)
		}
		if h != s {
			return nil, fmt.Errorf("trusted registries[%d]: %q: must be lower-case", i, reportable(s))
		}
		out = append(out, h)
	}
	if len(out) > MaxTrustedRegistries {
		return nil, errors.New("trusted registries: too many entries")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
