package upstreamproxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// The flags, as egress-proxy and sandbox-supervisor spell them.
const (
	FlagURL               = "--upstream-proxy"
	FlagAuthFile          = "--upstream-proxy-auth-file"
	FlagAllowInsecure     = "--upstream-proxy-allow-insecure"
	FlagCABundle          = "--upstream-proxy-ca-bundle"
	FlagNoProxy           = "--upstream-proxy-no-proxy"
	FlagConnectByHostname = "--upstream-proxy-connect-by-hostname"
)

// MaxCABundleBytes bounds the CA bundle file.
const MaxCABundleBytes = 1 << 20

// Optional is a flag value that remembers whether it was given, so that
// an empty value is told apart from an omitted flag.
type Optional struct {
	Value string
	Given bool
}

// String implements flag.Value.
func (o *Optional) String() string { return o.Value }

// Set implements flag.Value.
func (o *Optional) Set(v string) error { o.Value, o.Given = v, true; return nil }

// Switch is a boolean flag value that remembers whether it was given
// (--flag=false is given, and an acknowledgement given as false is still
// one set without its subject).
type Switch struct {
	Value bool
	Given bool
}

// String implements flag.Value.
func (s *Switch) String() string { return strconv.FormatBool(s.Value) }

// Set implements flag.Value.
func (s *Switch) Set(v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	s.Value, s.Given = b, true
	return nil
}

// IsBoolFlag lets the flag be given without a value.
func (s *Switch) IsBoolFlag() bool { return true }

// Settings are the --upstream-proxy flags as given.
type Settings struct {
	URL, AuthFile, CABundle, NoProxy Optional
	AllowInsecure, ConnectByHostname Switch
}

// Register adds the flags to fs.
func (s *Settings) Register(fs *flag.FlagSet) {
	fs.Var(&s.URL, name(FlagURL), "chain TLS (CONNECT) tunnels through the corporate forward proxy at `URL`, http://host:port or https://host:port (plain-HTTP requests still go direct)")
	fs.Var(&s.AuthFile, name(FlagAuthFile), "root-only (0600) `FILE` holding the proxy's user:pass, sent as Proxy-Authorization: Basic")
	fs.Var(&s.AllowInsecure, name(FlagAllowInsecure), "accept that "+FlagAuthFile+" sends the credential in cleartext to an http:// proxy")
	fs.Var(&s.CABundle, name(FlagCABundle), "PEM `FILE` of CA certificates trusted for an https:// proxy and for a TLS-intercepting proxy's re-signed certificates (sandbox-supervisor also adds them to the sandbox's trust bundle)")
	fs.Var(&s.NoProxy, name(FlagNoProxy), "comma-separated `LIST` of destinations dialled directly: name, .name, IP, CIDR, each optionally :PORT (loopback always)")
	fs.Var(&s.ConnectByHostname, name(FlagConnectByHostname), "send the host name, not the checked address, as the CONNECT target (the proxy resolves it; for proxies whose ACLs refuse IP targets)")
}

func name(flag string) string { return strings.TrimPrefix(flag, "--") }

// Given reports whether any of the flags was given.
func (s *Settings) Given() bool {
	return s.URL.Given || s.AuthFile.Given || s.CABundle.Given || s.NoProxy.Given || s.AllowInsecure.Given || s.ConnectByHostname.Given
}

// GivenFlags names the flags that were given, in a fixed order.
func (s *Settings) GivenFlags() []string {
	var out []string
	for _, f := range []struct {
		name  string
		given bool
	}{
		{FlagURL, s.URL.Given}, {FlagAuthFile, s.AuthFile.Given}, {FlagAllowInsecure, s.AllowInsecure.Given},
		{FlagCABundle, s.CABundle.Given}, {FlagNoProxy, s.NoProxy.Given}, {FlagConnectByHostname, s.ConnectByHostname.Given},
	} {
		if f.given {
			out = append(out, f.name)
		}
	}
	return out
}

// Args are the flags as arguments for another process (sandbox-supervisor
// passes them to the egress-proxy it starts): paths as given, the
// credential never (only its file's path).
func (s *Settings) Args() []string {
	var a []string
	for _, o := range []struct {
		flag string
		v    *Optional
	}{{FlagURL, &s.URL}, {FlagAuthFile, &s.AuthFile}, {FlagCABundle, &s.CABundle}, {FlagNoProxy, &s.NoProxy}} {
		if o.v.Given {
			a = append(a, o.flag, o.v.Value)
		}
	}
	for _, b := range []struct {
		flag string
		v    *Switch
	}{{FlagAllowInsecure, &s.AllowInsecure}, {FlagConnectByHostname, &s.ConnectByHostname}} {
		if b.v.Given {
			a = append(a, b.flag+"="+strconv.FormatBool(b.v.Value))
		}
	}
	return a
}

// ErrUsage is matched (errors.Is) by Load's errors about the flags
// themselves (a malformed value, a flag without the one it needs), as
// opposed to the files they name.
var ErrUsage = errors.New("upstream proxy flags")

type usageError struct{ error }

func (usageError) Is(target error) bool { return target == ErrUsage }
func (e usageError) Unwrap() error      { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Chain is a loaded upstream proxy configuration. It is safe for
// concurrent use. Printing it never shows the credential.
type Chain struct {
	Addr
	// ConnectByHostname sends the requested name as the CONNECT target.
	ConnectByHostname bool
	// NoProxy are the destinations dialled directly.
	NoProxy *NoProxy
	// CABundle is the CA bundle's path ("" without one).
	CABundle string

	caPEM []byte
	tls   *tls.Config // for an https:// proxy
	auth  *credential // nil without a credential file
}

// Check applies every rule Load applies that needs no file: the values
// and the rules between the flags. Its errors match ErrUsage.
func (s *Settings) Check() error {
	if !s.Given() {
		return nil
	}
	_, err := s.parse()
	return err
}

// parse checks the flags and parses the URL and the NO_PROXY list.
func (s *Settings) parse() (*Chain, error) {
	if err := s.check(); err != nil {
		return nil, usageError{err}
	}
	addr, err := ParseURL(s.URL.Value)
	if err != nil {
		return nil, usagef("%s %w", FlagURL, err)
	}
	if s.AuthFile.Given && !addr.Secure && !s.AllowInsecure.Value {
		return nil, usagef("%s sends the credential as cleartext Basic auth to the http:// proxy %s: give %s to accept that, use an https:// proxy, or drop %s",
			FlagAuthFile, addr, FlagAllowInsecure, FlagAuthFile)
	}
	c := &Chain{Addr: addr, ConnectByHostname: s.ConnectByHostname.Value}
	if s.NoProxy.Given {
		if c.NoProxy, err = ParseNoProxy(s.NoProxy.Value); err != nil {
			return nil, usagef("%s: %w", FlagNoProxy, err)
		}
	}
	return c, nil
}

// Load checks the settings and loads the files they name. It returns nil
// and no error when no flag was given (no upstream proxy). Every setting
// that is present but invalid is an error naming its flag: an empty
// value, a malformed URL, an unreadable or certificate-free CA bundle, an
// unreadable or malformed credential file, a credential file for an
// http:// proxy without FlagAllowInsecure, that acknowledgement without
// a credential file, and any of the other flags without FlagURL. Errors
// about the flags themselves match ErrUsage; those about the files do
// not.
func (s *Settings) Load() (*Chain, error) {
	if !s.Given() {
		return nil, nil
	}
	c, err := s.parse()
	if err != nil {
		return nil, err
	}
	addr := c.Addr
	var pool *x509.CertPool
	if s.CABundle.Given {
		if c.CABundle, err = filepath.Abs(s.CABundle.Value); err != nil {
			return nil, fmt.Errorf("%s: %w", FlagCABundle, err)
		}
		if c.caPEM, pool, err = loadCABundle(c.CABundle); err != nil {
			return nil, fmt.Errorf("%s: %w", FlagCABundle, err)
		}
	}
	if s.AuthFile.Given {
		h, err := ReadCredentialFile(s.AuthFile.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", FlagAuthFile, err)
		}
		c.auth = &credential{header: h}
	}
	if addr.Secure {
		if pool == nil {
			if pool, err = x509.SystemCertPool(); err != nil || pool == nil {
				pool = x509.NewCertPool()
			}
		}
		c.tls = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: addr.Host, NextProtos: []string{"http/1.1"}}
	}
	return c, nil
}

// check applies the rules between the flags (before any file is read).
func (s *Settings) check() error {
	if !s.URL.Given {
		for _, f := range s.GivenFlags() {
			if f == FlagAllowInsecure && !s.AuthFile.Given {
				return fmt.Errorf("%s is given without %s (and without %s): it acknowledges a credential that is not there", FlagAllowInsecure, FlagAuthFile, FlagURL)
			}
			return fmt.Errorf("%s is given but %s is not: it has no upstream proxy to apply to", f, FlagURL)
		}
	}
	for _, o := range []struct {
		flag string
		v    Optional
	}{{FlagAuthFile, s.AuthFile}, {FlagCABundle, s.CABundle}, {FlagNoProxy, s.NoProxy}} {
		if o.v.Given && strings.TrimSpace(o.v.Value) == "" {
			return fmt.Errorf("%s must not be empty (omit the flag instead)", o.flag)
		}
	}
	if s.AllowInsecure.Given && !s.AuthFile.Given {
		return fmt.Errorf("%s is given without %s: it acknowledges a credential that is not there", FlagAllowInsecure, FlagAuthFile)
	}
	return nil
}

// loadCABundle reads a PEM bundle of at most MaxCABundleBytes holding at
// least one certificate, and returns it with a pool of the system roots
// plus its certificates.
func loadCABundle(path string) ([]byte, *x509.CertPool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxCABundleBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > MaxCABundleBytes {
		return nil, nil, fmt.Errorf("%s is larger than %d bytes", path, MaxCABundleBytes)
	}
	if tlsca.CountCerts(b) == 0 {
		return nil, nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(b)
	return b, pool, nil
}

// CAPEM is the CA bundle's PEM text (nil without one): the egress proxy
// adds it to the roots of inspected tunnels' upstream servers, the
// supervisor to the sandbox's trust bundle.
func (c *Chain) CAPEM() []byte {
	if c == nil {
		return nil
	}
	return append([]byte(nil), c.caPEM...)
}

// HasCredential reports whether CONNECTs carry Proxy-Authorization.
func (c *Chain) HasCredential() bool { return c != nil && c.auth != nil }
