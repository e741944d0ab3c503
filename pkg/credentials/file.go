package credentials

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Limits of a credentials file.
const (
	MaxFileSize   = 1 << 20 // bytes
	MaxValueLen   = 16 << 10
	MaxProviders  = 64
	MaxKeys       = 256 // credentials over all providers
	MaxEndpoints  = 64  // per provider
	MaxKeyLen     = 128
	maxPathPrefix = 1024
)

// File is a parsed credentials file: what Parse checked, values not yet
// resolved (an env source is read when a Store is built).
type File struct {
	Providers map[string]*Provider
}

// Provider is one named group of credentials and the endpoints they are
// bound to (none: bound by a policy endpoint's credential_binding).
type Provider struct {
	Name        string
	Credentials map[string]Source // by key (the sandbox variable's name)
	Endpoints   []Endpoint
}

// Source is where a credential's value comes from: Value inline, or Env,
// a variable of the environment of the process that starts the proxy.
type Source struct {
	Value string
	Env   string
}

// Endpoint is where a provider's credentials may be sent.
type Endpoint struct {
	Host  *policy.HostPattern
	Ports []int
	// Path is a path prefix ("" or "/": any path). "/v1" admits /v1
	// and /v1/..., not /v1beta.
	Path string
}

// FieldError and Errors report what is wrong with a credentials file,
// by field path; a message never quotes a value.
type FieldError = policy.FieldError

// Errors is every problem found in one credentials file.
type Errors []*FieldError

func (e Errors) Error() string {
	var b strings.Builder
	b.WriteString("invalid credentials file: ")
	if len(e) > 1 {
		fmt.Fprintf(&b, "%d problems:", len(e))
		for _, fe := range e {
			b.WriteString("\n  ")
			b.WriteString(fe.Error())
		}
		return b.String()
	}
	if len(e) == 1 {
		b.WriteString(e[0].Error())
	}
	return b.String()
}

var (
	// keyRE is a credential key: an environment variable name.
	keyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	// reservedKeyRE are the key namespaces OpenShell reserves for its
	// revision-scoped and refresh-handle placeholders (seed 004).
	reservedKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(v[0-9]+_|s[0-9a-f]{64}_)`) })
)

// Parse decodes and checks a credentials file. Every problem is listed
// (Errors); none repeats a value.
func Parse(data []byte) (f *File, err error) {
	if len(data) > MaxFileSize {
		return nil, Errors{{Msg: fmt.Sprintf("file is %d bytes; at most %d allowed", len(data), MaxFileSize)}}
	}
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, Errors{{Msg: "YAML decoder failed"}}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{Path: "version", Msg: "file is empty; version: 1 is required"}}
		}
		// yaml's messages quote the offending text, which may be a
		// value: keep the line only.
		return nil, Errors{{Line: yamlLine(err), Msg: "invalid YAML"}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, Errors{{Line: extra.Line, Msg: "multiple YAML documents; a credentials file holds exactly one"}}
	}
	d := &decoder{}
	f = d.file(&doc)
	if len(d.errs) > 0 {
		return nil, d.errs
	}
	return f, nil
}

var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)`) })

func yamlLine(err error) int {
	if m := yamlLineRE().FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

type decoder struct{ errs Errors }

func (d *decoder) errf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

type field struct{ key, val *yaml.Node }

// mapping returns n's fields in document order; allowed nil accepts any
// key.
func (d *decoder) mapping(n *yaml.Node, path string, allowed []string) ([]field, bool) {
	if n.Kind == yaml.AliasNode {
		d.errf(n, path, "YAML aliases are not allowed")
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		d.errf(n, path, "must be a mapping")
		return nil, false
	}
	var out []field
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			d.errf(k, path, "keys must be strings")
			continue
		}
		kp := join(path, k.Value)
		if prev, dup := seen[k.Value]; dup {
			d.errf(k, kp, "duplicate key (first on line %d)", prev)
			continue
		}
		seen[k.Value] = k.Line
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			d.errf(k, kp, "unknown key %q (allowed: %s)", k.Value, strings.Join(allowed, ", "))
			continue
		}
		out = append(out, field{k, v})
	}
	return out, true
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.errf(n, path, "must be a string (quote it)")
		return "", false
	}
	return n.Value, true
}

func (d *decoder) file(doc *yaml.Node) *File {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	fields, ok := d.mapping(root, "", []string{"version", "providers"})
	if !ok {
		return nil
	}
	f := &File{Providers: map[string]*Provider{}}
	var version, providers *yaml.Node
	for _, fl := range fields {
		switch fl.key.Value {
		case "version":
			version = fl.val
		case "providers":
			providers = fl.val
		}
	}
	switch {
	case version == nil:
		d.errf(root, "version", "is required and must be 1")
	case version.Kind != yaml.ScalarNode || version.Tag != "!!int" || version.Value != "1":
		d.errf(version, "version", "must be 1")
	}
	if providers == nil {
		d.errf(root, "providers", "is required (at least one provider)")
		return f
	}
	pf, ok := d.mapping(providers, "providers", nil)
	if !ok {
		return f
	}
	if len(pf) == 0 {
		d.errf(providers, "providers", "must list at least one provider")
	}
	if len(pf) > MaxProviders {
		d.errf(providers, "providers", "has %d providers; at most %d allowed", len(pf), MaxProviders)
		return f
	}
	keys := map[string]string{} // key -> field path of first use
	for _, fl := range pf {
		path := join("providers", fl.key.Value)
		if !policy.ProviderNameRE().MatchString(fl.key.Value) {
			d.errf(fl.key, path, "provider names are 1-64 characters of letters, digits, '_', '.', '-', starting with a letter or digit")
			continue
		}
		if p := d.provider(fl.val, path, fl.key.Value, keys); p != nil {
			f.Providers[p.Name] = p
		}
	}
	if len(keys) > MaxKeys {
		d.errf(providers, "providers", "holds %d credentials; at most %d allowed", len(keys), MaxKeys)
	}
	return f
}

func (d *decoder) provider(n *yaml.Node, path, name string, keys map[string]string) *Provider {
	fields, ok := d.mapping(n, path, []string{"credentials", "endpoints"})
	if !ok {
		return nil
	}
	p := &Provider{Name: name, Credentials: map[string]Source{}}
	var creds *yaml.Node
	for _, fl := range fields {
		switch fl.key.Value {
		case "credentials":
			creds = fl.val
		case "endpoints":
			p.Endpoints = d.endpoints(fl.val, path+".endpoints")
		}
	}
	if creds == nil {
		d.errf(n, path+".credentials", "is required (at least one credential)")
		return p
	}
	cf, ok := d.mapping(creds, path+".credentials", nil)
	if !ok {
		return p
	}
	if len(cf) == 0 {
		d.errf(creds, path+".credentials", "must list at least one credential")
	}
	for _, fl := range cf {
		k := fl.key.Value
		kp := join(path+".credentials", k)
		switch {
		case !keyRE().MatchString(k) || len(k) > MaxKeyLen:
			d.errf(fl.key, kp, "a credential's key is the name of the sandbox's variable: letters, digits and '_', not starting with a digit, at most %d characters", MaxKeyLen)
			continue
		case reservedKeyRE().MatchString(k):
			d.errf(fl.key, kp, "keys beginning with v<digits>_ or s<64 hex digits>_ are reserved for OpenShell's placeholder namespaces")
			continue
		}
		if prev, dup := keys[k]; dup {
			d.errf(fl.key, kp, "key %s is already defined at %s: a placeholder names its key alone, so keys are unique across providers", k, prev)
			continue
		}
		keys[k] = kp
		if s, ok := d.source(fl.val, kp); ok {
			p.Credentials[k] = s
		}
	}
	return p
}

// source decodes {value: V} or {env: NAME}.
func (d *decoder) source(n *yaml.Node, path string) (Source, bool) {
	fields, ok := d.mapping(n, path, []string{"value", "env"})
	if !ok {
		return Source{}, false
	}
	if len(fields) != 1 {
		d.errf(n, path, "set exactly one of value (the secret itself) or env (a variable of the environment of the process that starts the proxy)")
		return Source{}, false
	}
	fl := fields[0]
	s, ok := d.str(fl.val, path+"."+fl.key.Value)
	if !ok {
		return Source{}, false
	}
	if fl.key.Value == "env" {
		if !keyRE().MatchString(s) {
			d.errf(fl.val, path+".env", "must name an environment variable (letters, digits and '_', not starting with a digit)")
			return Source{}, false
		}
		return Source{Env: s}, true
	}
	if err := CheckValue(s); err != nil {
		d.errf(fl.val, path+".value", "%v", err)
		return Source{}, false
	}
	return Source{Value: s}, true
}

// CheckValue checks a credential's value; the error never repeats it.
func CheckValue(v string) error {
	switch {
	case v == "":
		return errors.New("is empty")
	case len(v) > MaxValueLen:
		return fmt.Errorf("is longer than %d bytes", MaxValueLen)
	case strings.ContainsAny(v, "\x00\r\n"):
		return errors.New("contains a NUL, CR or LF byte, which no header may carry")
	case strings.Contains(v, Prefix):
		return errors.New("contains a placeholder")
	}
	return nil
}

func (d *decoder) endpoints(n *yaml.Node, path string) []Endpoint {
	if n.Kind != yaml.SequenceNode {
		d.errf(n, path, "must be a list")
		return nil
	}
	if len(n.Content) == 0 {
		d.errf(n, path, "must not be empty (omit it to bind the provider with credential_binding in the policy)")
		return nil
	}
	if len(n.Content) > MaxEndpoints {
		d.errf(n, path, "has %d endpoints; at most %d allowed", len(n.Content), MaxEndpoints)
		return nil
	}
	var out []Endpoint
	for i, it := range n.Content {
		if e, ok := d.endpoint(it, fmt.Sprintf("%s[%d]", path, i)); ok {
			out = append(out, e)
		}
	}
	return out
}

func (d *decoder) endpoint(n *yaml.Node, path string) (Endpoint, bool) {
	var e Endpoint
	fields, ok := d.mapping(n, path, []string{"host", "port", "ports", "path"})
	if !ok {
		return e, false
	}
	good := true
	var port, ports *yaml.Node
	for _, fl := range fields {
		fp := path + "." + fl.key.Value
		switch fl.key.Value {
		case "host":
			s, ok := d.str(fl.val, fp)
			if !ok {
				good = false
				continue
			}
			hp, err := policy.CompileHostPattern(s)
			if err != nil {
				d.errf(fl.val, fp, "%q: %v", s, err)
				good = false
				continue
			}
			e.Host = hp
		case "port":
			port = fl.val
		case "ports":
			ports = fl.val
		case "path":
			s, ok := d.str(fl.val, fp)
			if ok {
				if err := checkPathPrefix(s); err != nil {
					d.errf(fl.val, fp, "%v", err)
					ok = false
				}
			}
			good = good && ok
			e.Path = s
		}
	}
	if e.Host == nil && good {
		d.errf(n, path+".host", "is required")
		good = false
	}
	switch {
	case port != nil && ports != nil:
		d.errf(ports, path+".ports", "set either port or ports, not both")
		good = false
	case port == nil && ports == nil:
		d.errf(n, path+".port", "is required (set port or ports)")
		good = false
	case port != nil:
		if v, ok := d.port(port, path+".port"); ok {
			e.Ports = []int{v}
		} else {
			good = false
		}
	default:
		if ports.Kind != yaml.SequenceNode || len(ports.Content) == 0 {
			d.errf(ports, path+".ports", "must be a list of at least one port")
			return e, false
		}
		for i, it := range ports.Content {
			v, ok := d.port(it, fmt.Sprintf("%s.ports[%d]", path, i))
			if !ok {
				good = false
				continue
			}
			if !slices.Contains(e.Ports, v) {
				e.Ports = append(e.Ports, v)
			}
		}
	}
	return e, good
}

func (d *decoder) port(n *yaml.Node, path string) (int, bool) {
	v, err := strconv.Atoi(n.Value)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil || v < 1 || v > 65535 {
		d.errf(n, path, "must be a port number 1-65535")
		return 0, false
	}
	return v, true
}

// checkPathPrefix: an absolute, decoded path without dot segments,
// query, fragment, escapes or control characters.
func checkPathPrefix(s string) error {
	switch {
	case !strings.HasPrefix(s, "/"):
		return errors.New(`must start with "/"`)
	case len(s) > maxPathPrefix:
		return fmt.Errorf("is longer than %d characters", maxPathPrefix)
	case strings.ContainsAny(s, "?#%*\\"):
		return errors.New(`is a decoded path prefix: no '?', '#', '%', '*' or '\'`)
	}
	for _, seg := range strings.Split(s[1:], "/") {
		if seg == "." || seg == ".." {
			return errors.New("must not contain . or .. segments")
		}
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return errors.New("must not contain control characters")
		}
	}
	if strings.Contains(s, "//") {
		return errors.New("must not contain empty segments")
	}
	return nil
}

// Keys lists the file's credential keys, sorted.
func (f *File) Keys() []string {
	var out []string
	for _, p := range f.Providers {
		for k := range p.Credentials {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// EnvNames lists the environment variables the file's credentials are
// read from, sorted and without duplicates.
func (f *File) EnvNames() []string {
	var out []string
	for _, p := range f.Providers {
		for _, s := range p.Credentials {
			if s.Env != "" {
				out = append(out, s.Env)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
