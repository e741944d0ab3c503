package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Canonical returns the canonical form of the policy: compact JSON (also
// valid YAML, so Parse accepts it) with every default materialised, keys in
// a fixed order, and every list whose order carries no meaning (paths,
// ports, endpoints, binaries, rules, allowed_ips, query globs) sorted.
// Two files that mean the same thing have the same canonical form.
func (p *Policy) Canonical() []byte {
	c := p.Clone()
	normalise(c)
	return canonicalJSON(c)
}

// canonicalJSON is mustJSON(p), byte for byte (TestCanonicalJSONMatches
// EncodingJSON, and FuzzLoad on every input it accepts), with the
// policy's top level written here: encoding/json builds an encoder for
// every struct type a value's type reaches the first time a process
// encodes it, whether or not the value holds any, and for Policy that
// is the whole tree of network policy types (endpoints, rules,
// WebSocket, MCP, GraphQL options). A sandbox start checksums its
// policy once, so it paid that every time: 0.25-0.3 ms of CPU per
// `sandbox-supervisor run` (perf record of 150 starts of the bundled
// policy, 2026-12-02; 1.75% of a start's CPU). The leaves (strings,
// string lists) still go through encoding/json, whose encoders for them
// are built in microseconds, and so do the network policies when there
// are any. The first call in a fresh process, which is the one a start
// makes, took 67 µs against encoding/json's 650 µs (middle halves 59-120
// and 375-816 µs, 40 processes each, the bundled policy). Once the
// encoders are built it is a little slower than encoding/json on the
// whole policy: BenchmarkCanonical (3 runs each, 2026-12-02) 6.6-7.1 µs
// against 6.0-6.4 µs on checksum_test.go's base policy, 1.73-1.77 µs
// against 1.28-1.47 µs on the bundled one (1.1-1.3x); nothing checksums
// policies in a loop.
func canonicalJSON(p *Policy) []byte {
	var b bytes.Buffer
	b.Grow(512)
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	value := func(v any) {
		if err := enc.Encode(v); err != nil {
			panic("policy: encode JSON: " + err.Error()) // plain values: cannot fail
		}
		b.Truncate(b.Len() - 1) // Encode's newline
	}
	b.WriteString(`{"version":`)
	b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(p.Version), 10))
	b.WriteString(`,"filesystem_policy":{"include_workdir":`)
	b.Write(strconv.AppendBool(b.AvailableBuffer(), p.Filesystem.IncludeWorkdir))
	b.WriteString(`,"read_only":`)
	value(p.Filesystem.ReadOnly)
	b.WriteString(`,"read_write":`)
	value(p.Filesystem.ReadWrite)
	b.WriteString(`},"landlock":{"compatibility":`)
	value(p.Landlock.Compatibility)
	b.WriteString(`},"process":{"run_as_user":`)
	value(p.Process.RunAsUser)
	b.WriteString(`,"run_as_group":`)
	value(p.Process.RunAsGroup)
	b.WriteString(`},"network_policies":`)
	if p.NetworkPolicies != nil && len(p.NetworkPolicies) == 0 {
		b.WriteString("{}")
	} else {
		value(p.NetworkPolicies)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Checksum is the hex SHA-256 of Canonical().
func (p *Policy) Checksum() string {
	sum := sha256.Sum256(p.Canonical())
	return hex.EncodeToString(sum[:])
}

// YAML returns the normalised policy as human-readable YAML (what
// `policy-sync check` prints). It parses back to the same checksum.
func (p *Policy) YAML() []byte {
	c := p.Clone()
	normalise(c)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		panic("policy: encode YAML: " + err.Error()) // plain structs: cannot fail
	}
	enc.Close()
	return b.Bytes()
}

func mustJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("policy: encode JSON: " + err.Error()) // plain structs: cannot fail
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// normalise puts a decoded policy into canonical shape in place.
func normalise(p *Policy) {
	if p.Filesystem.ReadOnly == nil {
		p.Filesystem.ReadOnly = []string{}
	}
	if p.Filesystem.ReadWrite == nil {
		p.Filesystem.ReadWrite = []string{}
	}
	slices.Sort(p.Filesystem.ReadOnly)
	p.Filesystem.ReadOnly = slices.Compact(p.Filesystem.ReadOnly)
	slices.Sort(p.Filesystem.ReadWrite)
	p.Filesystem.ReadWrite = slices.Compact(p.Filesystem.ReadWrite)
	if p.NetworkPolicies == nil {
		p.NetworkPolicies = map[string]*NetworkPolicy{}
	}
	for key, np := range p.NetworkPolicies {
		if np == nil {
			delete(p.NetworkPolicies, key)
			continue
		}
		if np.Name == "" {
			np.Name = key
		}
		for i, e := range np.Endpoints {
			np.Endpoints[i] = canonicalEndpoint(e)
		}
		np.Endpoints = slices.DeleteFunc(np.Endpoints, func(e *Endpoint) bool { return e == nil })
		slices.SortFunc(np.Endpoints, func(a, b *Endpoint) int { return bytes.Compare(mustJSON(a), mustJSON(b)) })
		np.Endpoints = slices.CompactFunc(np.Endpoints, func(a, b *Endpoint) bool { return bytes.Equal(mustJSON(a), mustJSON(b)) })
		if np.Endpoints == nil {
			np.Endpoints = []*Endpoint{}
		}
		slices.SortFunc(np.Binaries, func(a, b Binary) int { return strings.Compare(a.Path, b.Path) })
		np.Binaries = slices.Compact(np.Binaries)
		if np.Binaries == nil {
			np.Binaries = []Binary{}
		}
	}
}

// canonicalEndpoint normalises one endpoint in place and returns it.
func canonicalEndpoint(e *Endpoint) *Endpoint {
	if e == nil {
		return nil
	}
	e.Host = strings.ToLower(e.Host)
	slices.Sort(e.Ports)
	e.Ports = slices.Compact(e.Ports)
	if e.Ports == nil {
		e.Ports = []int{}
	}
	if e.TLS == TLSTerminate {
		e.TLS = ""
	}
	if e.Protocol != ProtocolTCP && e.Enforcement == "" {
		e.Enforcement = EnforcementEnforce
	}
	slices.Sort(e.AllowedIPs)
	e.AllowedIPs = slices.Compact(e.AllowedIPs)
	canonicalWebSocket(e.WebSocket)
	canonicalProtocol(e)
	rest := !e.BodyInspected() // JSON-RPC method names are case-sensitive
	for i := range e.Rules {
		canonicalMatch(&e.Rules[i].Allow, rest)
	}
	slices.SortFunc(e.Rules, func(a, b Rule) int { return bytes.Compare(mustJSON(a), mustJSON(b)) })
	e.Rules = slices.CompactFunc(e.Rules, func(a, b Rule) bool { return bytes.Equal(mustJSON(a), mustJSON(b)) })
	for i := range e.DenyRules {
		canonicalMatch(&e.DenyRules[i], rest)
	}
	slices.SortFunc(e.DenyRules, func(a, b RequestMatch) int { return bytes.Compare(mustJSON(a), mustJSON(b)) })
	e.DenyRules = slices.CompactFunc(e.DenyRules, func(a, b RequestMatch) bool { return bytes.Equal(mustJSON(a), mustJSON(b)) })
	return e
}

func canonicalMatch(m *RequestMatch, httpMethod bool) {
	if httpMethod {
		m.Method = strings.ToUpper(m.Method)
	}
	if len(m.Query) == 0 {
		m.Query = nil
	}
	for k, q := range m.Query {
		any := slices.Clone(q.Any)
		slices.Sort(any)
		m.Query[k] = QueryMatch{Any: slices.Compact(any)}
	}
	if len(m.Params) == 0 {
		m.Params = nil
	}
	for k, q := range m.Params {
		any := slices.Clone(q.Any)
		slices.Sort(any)
		m.Params[k] = QueryMatch{Any: slices.Compact(any)}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
