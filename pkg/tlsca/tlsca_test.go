package tlsca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestAuthorityMintsVerifiableLeaves(t *testing.T) {
	a, err := New(Options{Name: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	ca := a.Certificate()
	if !ca.IsCA || !ca.MaxPathLenZero || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Fatalf("CA constraints: IsCA %v MaxPathLenZero %v usage %v", ca.IsCA, ca.MaxPathLenZero, ca.KeyUsage)
	}
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("CA key is %T, want ECDSA P-256", ca.PublicKey)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, host := range []string{"registry.test", "192.0.2.7", "2001:db8::1"} {
		leaf, err := a.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
		if life := leaf.Leaf.NotAfter.Sub(leaf.Leaf.NotBefore); life > LeafLifetime+backdate {
			t.Errorf("%s: leaf valid for %v", host, life)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.test", Roots: pool}); err == nil {
			t.Errorf("%s: leaf verifies for another name", host)
		}
	}
	// Another sandbox's CA does not vouch for these leaves.
	b, _ := New(Options{Name: "t2"})
	other := x509.NewCertPool()
	other.AddCert(b.Certificate())
	leaf, _ := a.Leaf("registry.test")
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "registry.test", Roots: other}); err == nil {
		t.Fatal("a leaf verified under another sandbox's CA")
	}
}

func TestLeafCacheIsBoundedLRU(t *testing.T) {
	a, err := New(Options{CacheSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	l1, _ := a.Leaf("a.test")
	a.Leaf("b.test")
	if again, _ := a.Leaf("a.test"); again != l1 || a.Minted() != 2 {
		t.Fatalf("cached leaf not reused (minted %d)", a.Minted())
	}
	a.Leaf("c.test") // evicts b (a was used more recently)
	if !a.Cached("a.test") || a.Cached("b.test") || !a.Cached("c.test") {
		t.Fatalf("LRU order wrong: a %v b %v c %v", a.Cached("a.test"), a.Cached("b.test"), a.Cached("c.test"))
	}
	// Concurrent requests for one new name mint once.
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); a.Leaf("d.test") }()
	}
	wg.Wait()
	if a.Minted() != 4 {
		t.Fatalf("minted %d, want 4", a.Minted())
	}
}

func TestLeafRenewedNearExpiry(t *testing.T) {
	now := time.Now()
	a, err := New(Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	l1, _ := a.Leaf("a.test")
	now = now.Add(LeafLifetime * 3 / 4)
	l2, _ := a.Leaf("a.test")
	if l1 == l2 || !l2.Leaf.NotAfter.After(l1.Leaf.NotAfter) {
		t.Fatal("a leaf with a quarter of its life left was served from the cache")
	}
}

// The public outputs never carry key material.
func TestPublicOutputsHoldNoKey(t *testing.T) {
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := a.WriteCert(p); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	d := a.key.D.FillBytes(make([]byte, 32))
	for name, out := range map[string][]byte{"file": b, "CertPEM": a.CertPEM(), "bundle": Bundle([]byte("x"), a.CertPEM())} {
		if bytes.Contains(out, []byte("PRIVATE")) || bytes.Contains(out, d) {
			t.Errorf("%s holds key material", name)
		}
	}
	if CountCerts(b) != 1 {
		t.Fatalf("file holds %d certificates", CountCerts(b))
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	// Rewriting keeps the inode (bind mounts see the new contents) and
	// refuses a symlink at the path.
	fi1, _ := os.Stat(p)
	if err := WriteInPlace(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Stat(p)
	if !os.SameFile(fi1, fi2) {
		t.Fatal("rewrite replaced the file")
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(p, link)
	if err := WriteInPlace(link, []byte("x")); err == nil {
		t.Fatal("wrote through a symlink")
	}
}

func TestLoadPoolFailsClosed(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	os.WriteFile(empty, []byte("no certificates here\n"), 0o644)
	if _, err := LoadPool(empty); err == nil {
		t.Fatal("a certificate-free bundle was accepted")
	}
	if _, err := LoadPool(filepath.Join(dir, "missing.pem")); err == nil {
		t.Fatal("a missing bundle was accepted")
	}
	a, _ := New(Options{})
	good := filepath.Join(dir, "good.pem")
	a.WriteCert(good)
	pool, err := LoadPool(good)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := a.Leaf("x.test")
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "x.test", Roots: pool}); err != nil {
		t.Fatalf("operator bundle not trusted: %v", err)
	}
}

func BenchmarkLeafCached(b *testing.B) {
	a, _ := New(Options{})
	a.Leaf("bench.test")
	for b.Loop() {
		a.Leaf("bench.test")
	}
}

func BenchmarkLeafMint(b *testing.B) {
	a, _ := New(Options{CacheSize: 1})
	i := 0
	for b.Loop() {
		i++
		a.Leaf(string(rune('a'+i%2)) + ".test")
	}
}
