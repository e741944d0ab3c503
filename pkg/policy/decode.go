package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Parse decodes, validates and normalises a policy. On any problem it
// returns an Errors listing all of them with field paths and lines; it
// never returns a partially valid policy.
func Parse(data []byte) (p *Policy, err error) {
	if len(data) > MaxPolicySize {
		return nil, Errors{{Msg: fmt.Sprintf("policy is %d bytes; at most %d allowed", len(data), MaxPolicySize)}}
	}
	defer func() {
		// The YAML library must not be able to crash a caller with hostile
		// input; a panic is a rejected policy.
		if r := recover(); r != nil {
			p, err = nil, Errors{{Msg: fmt.Sprintf("YAML decoder failed: %v", r)}}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{Path: "version", Msg: "policy is empty; version: 1 is required"}}
		}
		return nil, Errors{yamlError(err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, Errors{yamlError(err)}
		}
		return nil, Errors{{Line: line, Msg: "multiple YAML documents; a policy file holds exactly one"}}
	}
	d := &decoder{}
	pol := d.policy(&doc)
	if len(d.errs) > 0 {
		sortErrors(d.errs)
		return nil, d.errs
	}
	normalise(pol)
	return pol, nil
}

var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)`) })

func yamlError(err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	fe := &FieldError{Msg: "invalid YAML: " + msg}
	if m := yamlLineRE().FindStringSubmatch(msg); m != nil {
		fe.Line, _ = strconv.Atoi(m[1])
	}
	return fe
}

type decoder struct {
	errs Errors
}

func (d *decoder) errf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// keyPath appends a map key to a path, quoting keys that are not plain
// identifiers.
func keyPath(base, key string) string {
	seg := key
	if !identRE().MatchString(key) {
		seg = "[" + strconv.Quote(key) + "]"
		if base == "" {
			return seg
		}
		return base + seg
	}
	if base == "" {
		return seg
	}
	return base + "." + seg
}

func indexPath(base string, i int) string { return fmt.Sprintf("%s[%d]", base, i) }

// identRE is a map key that can be written as .key in a field path;
// anything else (including keys with dots) is written ["key"].
var identRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`) })

// nameRE is what a network_policies key must look like.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) })

// openShellOnly are keys OpenShell accepts that Palisade does not
// implement; they get a clearer message than "unknown key".
var openShellOnly = map[string]bool{
	"network_middlewares": true, "path": true, "allow_encoded_slash": true,
	"websocket_credential_rewrite": true, "allow_all_known_mcp_methods": true,
	"harness": true, "command": true, "fields": true,
}

type field struct {
	key *yaml.Node
	val *yaml.Node
}

// checkNode rejects aliases, so that a policy means what it literally says
// and cannot expand exponentially.
func (d *decoder) checkNode(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		d.errf(n, path, "YAML aliases are not allowed in a policy")
		return false
	}
	return true
}

// mapping checks that n is a mapping with string keys, no duplicates and,
// when allowed is non-nil, only allowed keys, and returns its fields.
func (d *decoder) mapping(n *yaml.Node, path string, allowed []string) (map[string]field, bool) {
	if !d.checkNode(n, path) {
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		d.errf(n, path, "must be a mapping, not %s", kindName(n))
		return nil, false
	}
	out := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			d.errf(k, path, "keys must be strings, not %s", kindName(k))
			continue
		}
		kp := keyPath(path, k.Value)
		if prev, dup := out[k.Value]; dup {
			d.errf(k, kp, "duplicate key (first defined on line %d)", prev.key.Line)
			continue
		}
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			if openShellOnly[k.Value] {
				d.errf(k, kp, "OpenShell key %q is not supported by Palisade", k.Value)
			} else {
				d.errf(k, kp, "unknown key %q (allowed: %s)", k.Value, strings.Join(allowed, ", "))
			}
			continue
		}
		out[k.Value] = field{k, v}
	}
	return out, true
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return "a string"
		case "!!int":
			return "an integer"
		case "!!bool":
			return "a boolean"
		case "!!float":
			return "a float"
		case "!!null":
			return "null"
		default:
			return "a " + n.Tag + " value"
		}
	}
	return "an unknown node"
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if !d.checkNode(n, path) {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		hint := ""
		if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!bool" || n.Tag == "!!float") {
			hint = fmt.Sprintf(" (quote it: %q)", n.Value)
		}
		d.errf(n, path, "must be a string, not %s%s", kindName(n), hint)
		return "", false
	}
	return n.Value, true
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if !d.checkNode(n, path) {
		return false, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		d.errf(n, path, "must be true or false, not %s", kindName(n))
		return false, false
	}
	switch n.Value {
	case "true", "True", "TRUE":
		return true, true
	case "false", "False", "FALSE":
		return false, true
	}
	d.errf(n, path, "must be true or false")
	return false, false
}

func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	if !d.checkNode(n, path) {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.errf(n, path, "must be an integer, not %s", kindName(n))
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		d.errf(n, path, "must be a decimal integer, not %q", n.Value)
		return 0, false
	}
	return v, true
}

// seq checks that n is a list of at most MaxListLen items. emptyMsg, if
// not "", rejects an empty list with that message.
func (d *decoder) seq(n *yaml.Node, path, emptyMsg string) ([]*yaml.Node, bool) {
	if !d.checkNode(n, path) {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		d.errf(n, path, "must be a list, not %s", kindName(n))
		return nil, false
	}
	if len(n.Content) == 0 && emptyMsg != "" {
		d.errf(n, path, "%s", emptyMsg)
		return nil, false
	}
	if len(n.Content) > MaxListLen {
		d.errf(n, path, "has %d entries; at most %d allowed", len(n.Content), MaxListLen)
		return nil, false
	}
	return n.Content, true
}

// oneOf checks an enumerated string.
func (d *decoder) oneOf(n *yaml.Node, path string, allowed ...string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		d.errf(n, path, "must be one of %s, not %q", strings.Join(allowed, ", "), s)
		return "", false
	}
	return s, true
}

// pathEntry remembers where a filesystem path or binary was declared, for
// cross-field checks.
type pathEntry struct {
	value string
	path  string
	node  *yaml.Node
}

func (d *decoder) policy(doc *yaml.Node) *Policy {
	root := doc
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) != 1 {
			d.errf(doc, "", "policy must be a single YAML mapping")
			return nil
		}
		root = doc.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		d.errf(root, "version", "policy is empty; version: 1 is required")
		return nil
	}
	fields, ok := d.mapping(root, "", []string{"version", "filesystem_policy", "landlock", "process", "network_policies"})
	if !ok {
		return nil
	}
	p := &Policy{}
	if f, ok := fields["version"]; !ok {
		d.errf(root, "version", "is required and must be 1")
	} else if v, ok := d.integer(f.val, "version"); ok {
		if v != 1 {
			d.errf(f.val, "version", "must be 1, not %d (only OpenShell policy schema version 1 is supported)", v)
		}
		p.Version = int(v)
	}
	// An optional section written with no value ("landlock:") is the same
	// as omitting it.
	for _, k := range []string{"filesystem_policy", "landlock", "process"} {
		if f, ok := fields[k]; ok && f.val.Kind == yaml.ScalarNode && f.val.Tag == "!!null" {
			delete(fields, k)
		}
	}
	var rw []pathEntry
	if f, ok := fields["filesystem_policy"]; ok {
		rw = d.filesystem(f.val, "filesystem_policy", &p.Filesystem)
	}
	p.Landlock.Compatibility = CompatibilityHardRequirement
	if f, ok := fields["landlock"]; ok {
		if lf, ok := d.mapping(f.val, "landlock", []string{"compatibility"}); ok {
			if c, ok := lf["compatibility"]; ok {
				if s, ok := d.oneOf(c.val, "landlock.compatibility", CompatibilityBestEffort, CompatibilityHardRequirement); ok {
					p.Landlock.Compatibility = s
				}
			}
		}
	}
	p.Process = Process{RunAsUser: SandboxIdentity, RunAsGroup: SandboxIdentity}
	if f, ok := fields["process"]; ok {
		if pf, ok := d.mapping(f.val, "process", []string{"run_as_user", "run_as_group"}); ok {
			if u, ok := pf["run_as_user"]; ok {
				if s, ok := d.identity(u.val, "process.run_as_user"); ok {
					p.Process.RunAsUser = s
				}
			}
			if g, ok := pf["run_as_group"]; ok {
				if s, ok := d.identity(g.val, "process.run_as_group"); ok {
					p.Process.RunAsGroup = s
				}
			}
		}
	}
	p.NetworkPolicies = map[string]*NetworkPolicy{}
	var bins []pathEntry
	if f, ok := fields["network_policies"]; ok {
		bins = d.networkPolicies(f.val, "network_policies", p.NetworkPolicies)
	}
	d.binariesVsWritable(bins, rw, p.Filesystem.IncludeWorkdir)
	return p
}

func (d *decoder) filesystem(n *yaml.Node, path string, fs *FilesystemPolicy) []pathEntry {
	fields, ok := d.mapping(n, path, []string{"include_workdir", "read_only", "read_write"})
	if !ok {
		return nil
	}
	if f, ok := fields["include_workdir"]; ok {
		if b, ok := d.boolean(f.val, path+".include_workdir"); ok {
			fs.IncludeWorkdir = b
		}
	}
	seen := map[string]string{} // cleaned path -> field path of first use
	list := func(key string) []pathEntry {
		f, ok := fields[key]
		if !ok {
			return nil
		}
		lp := path + "." + key
		items, ok := d.seq(f.val, lp, "")
		if !ok {
			return nil
		}
		var out []pathEntry
		for i, it := range items {
			ip := indexPath(lp, i)
			s, ok := d.str(it, ip)
			if !ok {
				continue
			}
			clean, err := checkAbsPath(s)
			if err != nil {
				d.errf(it, ip, "%v", err)
				continue
			}
			if key == "read_write" && clean == "/" {
				d.errf(it, ip, `must not be "/" (the whole filesystem writable is too broad)`)
				continue
			}
			if prev, dup := seen[clean]; dup {
				d.errf(it, ip, "%s is already listed at %s", clean, prev)
				continue
			}
			seen[clean] = ip
			out = append(out, pathEntry{value: clean, path: ip, node: it})
		}
		return out
	}
	ro := list("read_only")
	rw := list("read_write")
	if total := lenItems(fields["read_only"]) + lenItems(fields["read_write"]); total > MaxPaths {
		d.errf(n, path, "lists %d paths; at most %d (read_only and read_write combined) allowed", total, MaxPaths)
	}
	for _, e := range ro {
		fs.ReadOnly = append(fs.ReadOnly, e.value)
	}
	for _, e := range rw {
		fs.ReadWrite = append(fs.ReadWrite, e.value)
	}
	return rw
}

func lenItems(f field) int {
	if f.val == nil || f.val.Kind != yaml.SequenceNode {
		return 0
	}
	return len(f.val.Content)
}

// identity validates run_as_user / run_as_group.
func (d *decoder) identity(n *yaml.Node, path string) (string, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return "", false
	}
	if s == SandboxIdentity {
		return s, true
	}
	if s == "root" {
		d.errf(n, path, "must never be root")
		return "", false
	}
	if !allDigits(s) {
		d.errf(n, path, "must be %q or a numeric ID in 1..4294967294, not %q", SandboxIdentity, s)
		return "", false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err == nil && v == 0:
		d.errf(n, path, "must never be 0 (root)")
	case err != nil || v > 4294967294:
		d.errf(n, path, "numeric ID %s is out of range 1..4294967294", s)
	case s[0] == '0':
		d.errf(n, path, "write the numeric ID without leading zeros (%d)", v)
	default:
		return s, true
	}
	return "", false
}

func (d *decoder) networkPolicies(n *yaml.Node, path string, out map[string]*NetworkPolicy) []pathEntry {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // "network_policies:" with nothing: no egress, like {}
	}
	fields, ok := d.mapping(n, path, nil)
	if !ok {
		return nil
	}
	if len(fields) > MaxListLen {
		d.errf(n, path, "has %d entries; at most %d allowed", len(fields), MaxListLen)
		return nil
	}
	// Walk in document order so errors come out in order.
	var bins []pathEntry
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		f, ok := fields[k.Value]
		if !ok || f.key != k {
			continue
		}
		ep := keyPath(path, k.Value)
		if !nameRE().MatchString(k.Value) {
			d.errf(k, ep, "entry names must be 1-%d characters of letters, digits, '_', '.', '-', starting with a letter or digit", MaxNameLen)
			continue
		}
		np, b := d.networkPolicy(f.val, ep, k.Value)
		bins = append(bins, b...)
		if np != nil {
			out[k.Value] = np
		}
	}
	return bins
}

func (d *decoder) networkPolicy(n *yaml.Node, path, key string) (*NetworkPolicy, []pathEntry) {
	fields, ok := d.mapping(n, path, []string{"name", "endpoints", "binaries"})
	if !ok {
		return nil, nil
	}
	before := len(d.errs)
	np := &NetworkPolicy{Name: key}
	if f, ok := fields["name"]; ok {
		if s, ok := d.str(f.val, path+".name"); ok {
			if err := checkDisplayName(s); err != nil {
				d.errf(f.val, path+".name", "%v", err)
			} else {
				np.Name = s
			}
		}
	}
	if f, ok := fields["endpoints"]; !ok {
		d.errf(n, path+".endpoints", "is required (at least one endpoint)")
	} else if items, ok := d.seq(f.val, path+".endpoints", "must list at least one endpoint"); ok {
		seen := map[string]int{}
		for i, it := range items {
			ip := indexPath(path+".endpoints", i)
			if e := d.endpoint(it, ip); e != nil {
				c := string(mustJSON(canonicalEndpoint(e)))
				if prev, dup := seen[c]; dup {
					d.errf(it, ip, "duplicates endpoints[%d]", prev)
					continue
				}
				seen[c] = i
				np.Endpoints = append(np.Endpoints, e)
			}
		}
	}
	var bins []pathEntry
	if f, ok := fields["binaries"]; !ok {
		d.errf(n, path+".binaries", "is required (at least one binary)")
	} else if items, ok := d.seq(f.val, path+".binaries", "must list at least one binary"); ok {
		seen := map[string]string{}
		for i, it := range items {
			ip := indexPath(path+".binaries", i)
			bf, ok := d.mapping(it, ip, []string{"path"})
			if !ok {
				continue
			}
			pf, ok := bf["path"]
			if !ok {
				d.errf(it, ip+".path", "is required")
				continue
			}
			s, ok := d.str(pf.val, ip+".path")
			if !ok {
				continue
			}
			clean, err := checkBinaryPattern(s)
			if err != nil {
				d.errf(pf.val, ip+".path", "%v", err)
				continue
			}
			if prev, dup := seen[clean]; dup {
				d.errf(pf.val, ip+".path", "%s is already listed at %s", clean, prev)
				continue
			}
			seen[clean] = ip + ".path"
			np.Binaries = append(np.Binaries, Binary{Path: clean})
			bins = append(bins, pathEntry{value: clean, path: ip + ".path", node: pf.val})
		}
	}
	if len(d.errs) > before {
		return nil, bins
	}
	return np, bins
}

func checkDisplayName(s string) error {
	if s == "" {
		return errors.New("must not be empty (omit it to use the entry key)")
	}
	if len(s) > 128 {
		return errors.New("is longer than 128 characters")
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return errors.New("must not contain control characters")
		}
	}
	return nil
}

var endpointKeys = append(append([]string{"host", "port", "ports", "protocol", "tls", "enforcement", "access", "rules", "deny_rules", "allowed_ips", "websocket"}, credentialKeys...), protocolKeys...)

func (d *decoder) endpoint(n *yaml.Node, path string) *Endpoint {
	fields, ok := d.mapping(n, path, endpointKeys)
	if !ok {
		return nil
	}
	before := len(d.errs)
	e := &Endpoint{}
	var hostPat *HostPattern
	if f, ok := fields["host"]; ok {
		if s, ok := d.str(f.val, path+".host"); ok {
			hp, err := CompileHostPattern(s)
			switch {
			case err != nil:
				d.errf(f.val, path+".host", "%q: %v", s, err)
			case hp.IsIP() && forbiddenOverlap(netipPrefixOf(hp)) != "":
				d.errf(f.val, path+".host", "%s is %s, which is never allowed", hp, forbiddenOverlap(netipPrefixOf(hp)))
			default:
				hostPat = hp
				e.Host = hp.String()
			}
		}
	}
	// Ports.
	pf, hasPort := fields["port"]
	psf, hasPorts := fields["ports"]
	switch {
	case hasPort && hasPorts:
		d.errf(psf.key, path+".ports", "set either port or ports, not both")
	case !hasPort && !hasPorts:
		d.errf(n, path+".port", "is required (set port or ports)")
	case hasPort:
		if v, ok := d.port(pf.val, path+".port"); ok {
			e.Ports = []int{v}
		}
	default:
		if items, ok := d.seq(psf.val, path+".ports", "must list at least one port"); ok {
			for i, it := range items {
				ip := indexPath(path+".ports", i)
				if v, ok := d.port(it, ip); ok {
					if slices.Contains(e.Ports, v) {
						d.errf(it, ip, "port %d is listed twice", v)
						continue
					}
					e.Ports = append(e.Ports, v)
				}
			}
		}
	}
	protoNode := (*yaml.Node)(nil)
	if f, ok := fields["protocol"]; ok {
		protoNode = f.val
		if s, ok := d.str(f.val, path+".protocol"); ok {
			switch s {
			case ProtocolREST, ProtocolTCP, ProtocolWebSocket, ProtocolMCP, ProtocolJSONRPC, ProtocolGraphQL:
				e.Protocol = s
			case "sql":
				d.errf(f.val, path+".protocol", "OpenShell protocol %q is not supported by Palisade (use rest, websocket, tcp, mcp, json-rpc or graphql, or omit it)", s)
			default:
				d.errf(f.val, path+".protocol", "must be rest, websocket, tcp, mcp, json-rpc or graphql (or omitted for plain proxying), not %q", s)
			}
		}
	}
	tlsNode := (*yaml.Node)(nil)
	if f, ok := fields["tls"]; ok {
		tlsNode = f.val
		if s, ok := d.str(f.val, path+".tls"); ok {
			switch s {
			case TLSSkip:
				e.TLS = s
			case TLSTerminate:
				e.TLS = s // normalised to "" below, once protocol is known
			case "passthrough":
				d.errf(f.val, path+".tls", `"passthrough" is deprecated in OpenShell and has no effect; omit tls, or use skip`)
			default:
				d.errf(f.val, path+".tls", "must be skip or terminate (or omitted for auto-detection), not %q", s)
			}
		}
	}
	enfNode := (*yaml.Node)(nil)
	if f, ok := fields["enforcement"]; ok {
		enfNode = f.val
		if s, ok := d.oneOf(f.val, path+".enforcement", EnforcementEnforce, EnforcementAudit); ok {
			e.Enforcement = s
		}
	}
	accessNode := (*yaml.Node)(nil)
	if f, ok := fields["access"]; ok {
		accessNode = f.val
		if s, ok := d.oneOf(f.val, path+".access", AccessReadOnly, AccessReadWrite, AccessFull); ok {
			e.Access = s
		}
	}
	d.protocolOptions(fields, path, e)
	match := d.requestMatch
	if e.BodyInspected() {
		match = func(n *yaml.Node, path string) (RequestMatch, bool) { return d.protocolMatch(n, path, e) }
	}
	rulesF, hasRules := fields["rules"]
	if hasRules {
		if items, ok := d.seq(rulesF.val, path+".rules", "must not be empty (rules: [] would deny everything; use access: full or remove rules)"); ok {
			for i, it := range items {
				ip := indexPath(path+".rules", i)
				rf, ok := d.mapping(it, ip, []string{"allow"})
				if !ok {
					continue
				}
				af, ok := rf["allow"]
				if !ok {
					d.errf(it, ip+".allow", "is required")
					continue
				}
				if m, ok := match(af.val, ip+".allow"); ok {
					e.Rules = append(e.Rules, Rule{Allow: m})
				}
			}
		}
	}
	denyF, hasDeny := fields["deny_rules"]
	if hasDeny {
		if items, ok := d.seq(denyF.val, path+".deny_rules", "must not be empty (remove deny_rules if nothing is denied)"); ok {
			for i, it := range items {
				if m, ok := match(it, indexPath(path+".deny_rules", i)); ok {
					e.DenyRules = append(e.DenyRules, m)
				}
			}
		}
	}
	ipsF, hasIPs := fields["allowed_ips"]
	if hasIPs {
		if items, ok := d.seq(ipsF.val, path+".allowed_ips", "must not be empty (remove it if no addresses are allowed)"); ok {
			seen := map[string]int{}
			for i, it := range items {
				ip := indexPath(path+".allowed_ips", i)
				s, ok := d.str(it, ip)
				if !ok {
					continue
				}
				pfx, err := parseAllowedIP(s)
				if err != nil {
					d.errf(it, ip, "%v", err)
					continue
				}
				c := pfx.String()
				if prev, dup := seen[c]; dup {
					d.errf(it, ip, "%s is already listed at allowed_ips[%d]", c, prev)
					continue
				}
				seen[c] = i
				e.AllowedIPs = append(e.AllowedIPs, c)
			}
		}
	}

	d.credentialFields(fields, path, e)
	wsF, hasWS := fields["websocket"]
	if hasWS {
		e.WebSocket = d.webSocket(wsF.val, path+".websocket")
	}

	// Cross-field rules.
	_, hasHost := fields["host"]
	if !hasHost && !hasIPs {
		d.errf(n, path+".host", "is required (an endpoint needs a host or allowed_ips)")
	}
	switch e.Protocol {
	case ProtocolTCP:
		if !hasHost {
			d.errf(protoNode, path+".host", "protocol tcp requires a DNS hostname")
		} else if hostPat != nil && hostPat.IsIP() {
			d.errf(fields["host"].val, path+".host", "protocol tcp requires a DNS hostname, not an IP address")
		} else if hostPat != nil && hostPat.IsWildcard() {
			d.errf(fields["host"].val, path+".host", "protocol tcp requires an exact DNS hostname, not a wildcard")
		}
		if accessNode != nil {
			d.errf(accessNode, path+".access", "is an L7 field; protocol tcp does not inspect traffic")
		}
		if hasRules {
			d.errf(rulesF.val, path+".rules", "is an L7 field; protocol tcp does not inspect traffic")
		}
		if hasDeny {
			d.errf(denyF.val, path+".deny_rules", "is an L7 field; protocol tcp does not inspect traffic")
		}
		if enfNode != nil {
			d.errf(enfNode, path+".enforcement", "applies to L7 rules; protocol tcp has none")
		}
		if e.TLS == TLSTerminate {
			d.errf(tlsNode, path+".tls", "protocol tcp never terminates TLS")
		}
	case ProtocolMCP, ProtocolJSONRPC, ProtocolGraphQL:
		d.protocolCross(fields, path, e, n)
	case ProtocolREST:
		if hasRules && accessNode != nil {
			d.errf(rulesF.key, path+".rules", "access and rules are mutually exclusive")
		}
		if !hasRules && accessNode == nil {
			d.errf(protoNode, path+".access", "protocol rest requires access or rules")
		}
		if e.TLS == TLSSkip {
			d.errf(tlsNode, path+".tls", "tls: skip disables inspection, so protocol rest rules could not be enforced")
		}
	case ProtocolWebSocket:
		if hasRules && accessNode != nil {
			d.errf(rulesF.key, path+".rules", "access and rules are mutually exclusive")
		}
		if !hasWS {
			d.errf(protoNode, path+".websocket", "is required by protocol websocket (the messages the sandbox may send)")
		}
		if e.TLS == TLSSkip {
			d.errf(tlsNode, path+".tls", "tls: skip disables inspection, so protocol websocket rules could not be enforced")
		}
	default:
		if accessNode != nil {
			d.errf(accessNode, path+".access", "requires protocol: rest (without it traffic is not inspected)")
		}
		if hasRules {
			d.errf(rulesF.key, path+".rules", "requires protocol: rest (without it traffic is not inspected)")
		}
		if hasDeny {
			d.errf(denyF.key, path+".deny_rules", "require protocol: rest")
		}
	}
	d.credentialCross(fields, path, e)
	if hasWS && e.Protocol != ProtocolWebSocket {
		d.errf(wsF.key, path+".websocket", "requires protocol: websocket")
	}
	if len(d.errs) > before {
		return nil
	}
	if e.TLS == TLSTerminate {
		e.TLS = "" // same behaviour as auto-detection
	}
	if e.Protocol != ProtocolTCP && e.Enforcement == "" {
		e.Enforcement = EnforcementEnforce
	}
	return e
}

func netipPrefixOf(hp *HostPattern) netip.Prefix { return netip.PrefixFrom(hp.addr, hp.addr.BitLen()) }

func (d *decoder) port(n *yaml.Node, path string) (int, bool) {
	v, ok := d.integer(n, path)
	if !ok {
		return 0, false
	}
	if v < 1 || v > 65535 {
		d.errf(n, path, "must be 1-65535, not %d", v)
		return 0, false
	}
	return int(v), true
}

var methodRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z][A-Z0-9_-]{0,31}$`) })

func (d *decoder) requestMatch(n *yaml.Node, path string) (RequestMatch, bool) {
	var m RequestMatch
	fields, ok := d.mapping(n, path, []string{"method", "path", "query"})
	if !ok {
		return m, false
	}
	good := true
	if f, ok := fields["method"]; !ok {
		d.errf(n, path+".method", "is required (an HTTP method or \"*\")")
		good = false
	} else if s, ok := d.str(f.val, path+".method"); !ok {
		good = false
	} else {
		up := strings.ToUpper(s)
		if up != "*" && !methodRE().MatchString(up) {
			d.errf(f.val, path+".method", "must be an HTTP method such as GET or \"*\", not %q", s)
			good = false
		}
		m.Method = up
	}
	if f, ok := fields["path"]; !ok {
		d.errf(n, path+".path", "is required (a URL path glob such as /v1/**)")
		good = false
	} else if s, ok := d.str(f.val, path+".path"); !ok {
		good = false
	} else if err := checkURLPathGlob(s); err != nil {
		d.errf(f.val, path+".path", "%v", err)
		good = false
	} else {
		m.Path = s
	}
	if f, ok := fields["query"]; ok {
		qp := path + ".query"
		qf, ok := d.mapping(f.val, qp, nil)
		if !ok {
			return m, false
		}
		m.Query = map[string]QueryMatch{}
		for name, kv := range qf {
			np := keyPath(qp, name)
			if name == "" || len(name) > 256 {
				d.errf(kv.key, np, "query parameter names must be 1-256 characters")
				good = false
				continue
			}
			globs, ok := d.queryMatcher(kv.val, np)
			if !ok {
				good = false
				continue
			}
			m.Query[name] = QueryMatch{Any: globs}
		}
	}
	return m, good
}

func (d *decoder) queryMatcher(n *yaml.Node, path string) ([]string, bool) {
	if n.Kind == yaml.ScalarNode {
		s, ok := d.str(n, path)
		if !ok {
			return nil, false
		}
		if err := checkGlobText(s); err != nil {
			d.errf(n, path, "%v", err)
			return nil, false
		}
		return []string{s}, true
	}
	fields, ok := d.mapping(n, path, []string{"any"})
	if !ok {
		return nil, false
	}
	af, ok := fields["any"]
	if !ok {
		d.errf(n, path+".any", "is required (a glob string or {any: [globs]})")
		return nil, false
	}
	items, ok := d.seq(af.val, path+".any", "must list at least one glob")
	if !ok {
		return nil, false
	}
	var out []string
	good := true
	for i, it := range items {
		ip := indexPath(path+".any", i)
		s, ok := d.str(it, ip)
		if !ok {
			good = false
			continue
		}
		if err := checkGlobText(s); err != nil {
			d.errf(it, ip, "%v", err)
			good = false
			continue
		}
		if slices.Contains(out, s) {
			d.errf(it, ip, "%q is listed twice", s)
			good = false
			continue
		}
		out = append(out, s)
	}
	return out, good
}

func checkGlobText(s string) error {
	if s == "" {
		return errors.New(`must not be empty (use "*" to match any value)`)
	}
	if len(s) > MaxPathLen {
		return fmt.Errorf("is %d characters; at most %d allowed", len(s), MaxPathLen)
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return errors.New("must not contain control characters")
		}
	}
	return nil
}

func checkURLPathGlob(s string) error {
	if err := checkGlobText(s); err != nil {
		return err
	}
	if s != "*" && s != "**" && !strings.HasPrefix(s, "/") {
		return fmt.Errorf(`must start with "/" (or be "*" or "**"), not %q`, s)
	}
	if strings.ContainsAny(s, " #") {
		return errors.New("must not contain spaces or '#'")
	}
	if strings.Contains(s, "%") {
		// Rules match the decoded path: an escape in a rule would match
		// only a request that encoded it twice.
		if dec, err := url.PathUnescape(s); err == nil && !strings.ContainsAny(dec, "% #") {
			return fmt.Errorf("rules match the percent-decoded request path: write %q (it matches %q too), not %q", dec, s, s)
		}
		return fmt.Errorf("rules match the percent-decoded request path and must not contain '%%', not %q", s)
	}
	return nil
}

// binariesVsWritable rejects binaries the agent could replace: a binary
// pattern that can match a path at or under a read_write path, and, with
// include_workdir, a pattern that can match anywhere ("/**..."), since the
// working directory is only known when the sandbox is created (see
// CheckWorkdir for that check).
func (d *decoder) binariesVsWritable(bins, rw []pathEntry, includeWorkdir bool) {
	for _, b := range bins {
		for _, w := range rw {
			if binaryMayLieUnder(b.value, w.value) {
				d.errf(b.node, b.path, "%s can match files under read_write path %s (%s); the agent could replace the binary", b.value, w.value, w.path)
				break
			}
		}
		if includeWorkdir && strings.HasPrefix(b.value, "/**") {
			d.errf(b.node, b.path, "%s can match files in the working directory, which include_workdir makes writable", b.value)
		}
	}
}
