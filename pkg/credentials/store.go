package credentials

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/sigv4"
)

// Store is one set of credentials in force: values and the endpoints
// they are bound to, swapped whole by a reload. It is immutable and safe
// for concurrent use. The zero Store holds nothing.
type Store struct {
	file    *File
	creds   map[string]*credential
	revoked bool
	sum     string
}

type credential struct {
	value string
	prov  *Provider
}

// Build resolves the file's values, reading each env source through
// lookup (the environment of the process that starts the proxy). A
// variable that is unset or holds an unusable value is an error naming
// the key and the variable, never the value.
func Build(f *File, lookup func(string) (string, bool)) (*Store, error) {
	s := &Store{file: f, creds: map[string]*credential{}}
	var errs Errors
	for _, name := range sortedKeys(f.Providers) {
		p := f.Providers[name]
		for _, k := range sortedKeys(p.Credentials) {
			src := p.Credentials[k]
			v := src.Value
			if src.Env != "" {
				var ok bool
				v, ok = lookup(src.Env)
				path := fmt.Sprintf("providers.%s.credentials.%s.env", name, k)
				if !ok {
					errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf("environment variable %s is not set", src.Env)})
					continue
				}
				if err := CheckValue(v); err != nil {
					errs = append(errs, &FieldError{Path: path, Msg: fmt.Sprintf("environment variable %s %v", src.Env, err)})
					continue
				}
			}
			s.creds[k] = &credential{value: v, prov: p}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	s.sum = s.digest()
	return s, nil
}

// digest hashes everything s holds, in a fixed order.
func (s *Store) digest() string {
	h := sha256.New()
	for _, name := range sortedKeys(s.file.Providers) {
		p := s.file.Providers[name]
		fmt.Fprintf(h, "provider %q\n", name)
		for _, e := range p.Endpoints {
			fmt.Fprintf(h, "endpoint %q %v %q\n", e.Host.String(), e.Ports, e.Path)
		}
		for _, k := range sortedKeys(p.Credentials) {
			fmt.Fprintf(h, "credential %q %q\n", k, s.creds[k].value)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Revoked is the Store in force after a reload failed: it holds no value
// and refuses every placeholder (ReasonRevoked), so neither the old
// values nor a part of the new ones stay usable.
func Revoked() *Store { return &Store{revoked: true} }

// IsRevoked reports whether s is a Revoked store.
func (s *Store) IsRevoked() bool { return s != nil && s.revoked }

// Len is the number of credentials in s.
func (s *Store) Len() int {
	if s == nil {
		return 0
	}
	return len(s.creds)
}

// Providers is the number of providers in s.
func (s *Store) Providers() int {
	if s == nil || s.file == nil {
		return 0
	}
	return len(s.file.Providers)
}

// File is what s was built from (nil for a revoked store).
func (s *Store) File() *File {
	if s == nil {
		return nil
	}
	return s.file
}

// Target is the request a placeholder would be resolved for: the
// canonical host and port the proxy decided, the request's path
// readings, and the policy endpoint's credential_binding provider.
type Target struct {
	Host string
	Port int
	// Paths returns the readings of the request's decoded path (every
	// one must lie under a provider endpoint's path prefix); ok false
	// when the path cannot be read, which binds no prefixed endpoint.
	// Called only when a placeholder is found and a prefix matters.
	Paths func() (paths []string, ok bool)
	// Binding is the matched policy endpoint's credential_binding
	// provider ("" when none).
	Binding string
}

// bound reports whether p's credentials may be sent to t.
func (s *Store) bound(p *Provider, t *Target) bool {
	if len(p.Endpoints) == 0 {
		return t.Binding != "" && t.Binding == p.Name
	}
	var paths []string
	pathsRead, pathsOK := false, false
	for _, e := range p.Endpoints {
		if !slices.Contains(e.Ports, t.Port) || !e.Host.Match(t.Host) {
			continue
		}
		if e.Path == "" || e.Path == "/" {
			return true
		}
		if !pathsRead {
			pathsRead = true
			if t.Paths != nil {
				paths, pathsOK = t.Paths()
			}
		}
		if pathsOK && allUnder(paths, e.Path) {
			return true
		}
	}
	return false
}

// allUnder reports whether every path is prefix or lies below it
// ("/v1" admits "/v1" and "/v1/x", not "/v1beta").
func allUnder(paths []string, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	for _, p := range paths {
		if p != prefix && !strings.HasPrefix(p, prefix+"/") {
			return false
		}
	}
	return len(paths) > 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Load reads, parses and builds the credentials file at path (LoadFile,
// Build).
func Load(path string, lookup func(string) (string, bool)) (*Store, error) {
	f, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Build(f, lookup)
	if err != nil {
		return nil, fmt.Errorf("credentials file %s: %w", path, err)
	}
	return s, nil
}

// Sum identifies what s holds (providers, endpoints, keys and values):
// equal for two loads of the same. It is a digest
// of secrets: compare it, never show it.
func (s *Store) Sum() string {
	if s == nil {
		return ""
	}
	return s.sum
}

// Find reports the key of a credential whose value text holds ("" when
// none): a check that an environment or a file the sandbox will see
// carries no value. The caller reports the key, never the value.
func (s *Store) Find(text string) string {
	if s == nil {
		return ""
	}
	for _, k := range sortedKeys(s.creds) {
		if strings.Contains(text, s.creds[k].value) {
			return k
		}
	}
	return ""
}

// The keys of a provider's AWS credentials (OpenShell's, and the AWS
// SDKs' variable names).
const (
	KeyAWSAccessKeyID     = "AWS_ACCESS_KEY_ID"
	KeyAWSSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	KeyAWSSessionToken    = "AWS_SESSION_TOKEN"
)

// ReasonSigningUnbound: a request to a credential_signing endpoint for
// which no provider with AWS credentials is bound (the credentials
// changed since the policy loaded).
const ReasonSigningUnbound = "sigv4_credentials_unavailable"

// hasAWS reports whether p holds AWS credentials (an access key id and
// a secret key).
func hasAWS(p *Provider) bool {
	_, id := p.Credentials[KeyAWSAccessKeyID]
	_, secret := p.Credentials[KeyAWSSecretAccessKey]
	return id && secret
}

// AWS returns the AWS credentials bound to t, for re-signing a request
// with SigV4: those of the first provider (by name) that holds
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN,
// optional) and whose binding admits t. reason is ReasonRevoked or
// ReasonSigningUnbound when there are none.
func (s *Store) AWS(t *Target) (c sigv4.Credentials, reason string) {
	switch {
	case s == nil:
		return c, ReasonSigningUnbound
	case s.revoked:
		return c, ReasonRevoked
	}
	for _, name := range sortedKeys(s.file.Providers) {
		p := s.file.Providers[name]
		if !hasAWS(p) || !s.bound(p, t) {
			continue
		}
		c.AccessKeyID = s.creds[KeyAWSAccessKeyID].value
		c.SecretAccessKey = s.creds[KeyAWSSecretAccessKey].value
		if tok, ok := s.creds[KeyAWSSessionToken]; ok && tok.prov == p {
			c.SessionToken = tok.value
		}
		return c, ""
	}
	return c, ReasonSigningUnbound
}
