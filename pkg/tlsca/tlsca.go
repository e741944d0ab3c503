// Package tlsca is the per-sandbox certificate authority of the egress
// proxy's TLS inspection: an ECDSA P-256 CA generated when the proxy
// starts, whose private key exists only in the proxy's memory, and the
// short-lived leaf certificates it mints per host name, kept in a bounded
// LRU cache. Only the public certificate ever leaves the process
// (CertPEM, WriteCert); the combined trust bundle a sandbox sees is the
// system roots plus that certificate (Bundle).
package tlsca

import (
	"bytes"
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"sync"
	"time"
)

// Defaults.
const (
	// DefaultCacheSize bounds the leaf cache (host names).
	DefaultCacheSize = 1024
	// LeafLifetime is how long a minted leaf is valid; a cached leaf is
	// replaced once less than a quarter of it remains.
	LeafLifetime = 24 * time.Hour
	// CALifetime is the CA certificate's validity. The CA lives as long
	// as the proxy process; a restarted proxy makes a new one.
	CALifetime = 365 * 24 * time.Hour
	// backdate covers clocks slightly behind the proxy's.
	backdate = 5 * time.Minute
)

// Authority is one sandbox's CA. Its methods are safe for concurrent use.
type Authority struct {
	cert    *x509.Certificate
	certDER []byte
	certPEM []byte
	key     *ecdsa.PrivateKey // never serialised
	now     func() time.Time

	mu      sync.Mutex
	max     int
	lru     *list.List               // of *leaf, most recent first
	byName  map[string]*list.Element // host -> element
	pending map[string]*mint         // hosts being minted
	minted  uint64
}

type leaf struct {
	host     string
	cert     *tls.Certificate
	notAfter time.Time
}

type mint struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// Options adjust New.
type Options struct {
	// Name goes into the CA's subject ("Palisade sandbox CA <Name>").
	Name string
	// CacheSize bounds the leaf cache; 0 means DefaultCacheSize.
	CacheSize int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// New generates a fresh CA key and certificate in memory.
func New(o Options) (*Authority, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsca: generate CA key: %w", err)
	}
	now := o.Now()
	cn := "Palisade sandbox CA"
	if o.Name != "" {
		cn += " " + o.Name
	}
	ski := keyID(&key.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"Palisade egress-proxy"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("tlsca: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsca: parse CA certificate: %w", err)
	}
	return &Authority{
		cert: cert, certDER: der, key: key, now: o.Now,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		max:     o.CacheSize, lru: list.New(), byName: map[string]*list.Element{}, pending: map[string]*mint{},
	}, nil
}

// Certificate is the CA certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// CertPEM is the CA certificate in PEM form (public; never the key).
func (a *Authority) CertPEM() []byte { return bytes.Clone(a.certPEM) }

// Minted counts the leaves minted so far (cache misses).
func (a *Authority) Minted() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.minted
}

// Leaf returns a certificate for host (a canonical DNS name or IP
// literal) signed by the CA, from the cache when one is there and still
// has at least a quarter of its lifetime left. Concurrent calls for the
// same host mint once.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	if host == "" {
		return nil, errors.New("tlsca: empty host name")
	}
	now := a.now()
	a.mu.Lock()
	if el, ok := a.byName[host]; ok {
		l := el.Value.(*leaf)
		if l.notAfter.Sub(now) > LeafLifetime/4 {
			a.lru.MoveToFront(el)
			a.mu.Unlock()
			return l.cert, nil
		}
		a.lru.Remove(el)
		delete(a.byName, host)
	}
	if m, ok := a.pending[host]; ok {
		a.mu.Unlock()
		<-m.done
		return m.cert, m.err
	}
	m := &mint{done: make(chan struct{})}
	a.pending[host] = m
	a.minted++
	a.mu.Unlock()

	m.cert, m.err = a.mint(host, now)

	a.mu.Lock()
	delete(a.pending, host)
	if m.err == nil {
		a.byName[host] = a.lru.PushFront(&leaf{host: host, cert: m.cert, notAfter: m.cert.Leaf.NotAfter})
		for a.lru.Len() > a.max {
			old := a.lru.Back()
			a.lru.Remove(old)
			delete(a.byName, old.Value.(*leaf).host)
		}
	}
	a.mu.Unlock()
	close(m.done)
	return m.cert, m.err
}

// Cached reports whether a leaf for host is in the cache.
func (a *Authority) Cached(host string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.byName[host]
	return ok
}

func (a *Authority) mint(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsca: generate leaf key: %w", err)
	}
	notAfter := now.Add(LeafLifetime)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: host},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        a.cert.SubjectKeyId,
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("tlsca: sign leaf for %s: %w", host, err)
	}
	leafCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsca: parse leaf for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, a.certDER}, PrivateKey: key, Leaf: leafCert}, nil
}

// WriteCert writes the CA certificate (PEM, public) to path, mode 0644,
// replacing the file's contents in place so that a bind mount of it keeps
// showing the current certificate.
func (a *Authority) WriteCert(path string) error {
	return WriteInPlace(path, a.certPEM)
}

// WriteInPlace truncates and rewrites path (creating it 0644), without
// following a symlink at path. Writing in place rather than renaming keeps
// the inode, so a read-only bind mount of the file shows the new contents.
func WriteInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscallNoFollow, 0o644)
	if err != nil {
		return fmt.Errorf("tlsca: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("tlsca: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("tlsca: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tlsca: close %s: %w", path, err)
	}
	return nil
}

// SystemBundlePaths are where distributions keep the PEM bundle of
// trusted roots (Debian/Ubuntu, RHEL/Fedora, the RHEL extracted bundle,
// openSUSE, Alpine/LibreSSL). A sandbox sees its combined bundle at each
// of them that exists.
var SystemBundlePaths = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// SystemRootsPEM reads the first system bundle that exists and holds at
// least one certificate ("" path and nil when there is none).
func SystemRootsPEM() (string, []byte) {
	for _, p := range SystemBundlePaths {
		b, err := os.ReadFile(p)
		if err == nil && CountCerts(b) > 0 {
			return p, b
		}
	}
	return "", nil
}

// Bundle is the combined trust bundle: the system roots followed by the
// sandbox CA certificate(s).
func Bundle(systemPEM []byte, extra ...[]byte) []byte {
	var b bytes.Buffer
	b.Write(systemPEM)
	if len(systemPEM) > 0 && systemPEM[len(systemPEM)-1] != '\n' {
		b.WriteByte('\n')
	}
	for _, e := range extra {
		b.Write(e)
		if len(e) > 0 && e[len(e)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// CountCerts counts the parseable CERTIFICATE blocks of a PEM text.
func CountCerts(pemText []byte) int {
	n := 0
	for {
		var blk *pem.Block
		blk, pemText = pem.Decode(pemText)
		if blk == nil {
			return n
		}
		if blk.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(blk.Bytes); err == nil {
				n++
			}
		}
	}
}

// LoadPool returns the system roots plus the certificates of the PEM
// files given (an operator's upstream CA bundle). A file that cannot be
// read or holds no certificate is an error: a trust setting that is
// present but broken never degrades to the defaults.
func LoadPool(files ...string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("tlsca: CA bundle %s: %w", f, err)
		}
		if CountCerts(b) == 0 || !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tlsca: CA bundle %s: no PEM certificate in it", f)
		}
	}
	return pool, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("tlsca: crypto/rand failed: " + err.Error())
	}
	return n.Add(n, big.NewInt(1))
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	s := sha1.Sum(b)
	return s[:]
}
