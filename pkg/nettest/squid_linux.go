//go:build linux

package nettest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The programs a Squid needs, by the paths .ci/run installs them at
// (Debian's squid and openssl packages).
const (
	SquidBin     = "/usr/sbin/squid"
	SquidNCSA    = "/usr/lib/squid/basic_ncsa_auth"
	OpenSSLBin   = "/usr/bin/openssl"
	squidTimeout = 20 * time.Second
)

// Squid is a real squid playing a corporate forward proxy: it listens on
// a free port of Listen (127.0.0.1 by default), demands Basic
// authentication of one user (basic_ncsa_auth over an htpasswd file the
// test writes), refuses CONNECT to the Deny prefixes with 403, allows
// every other CONNECT, and logs each request ("METHOD TARGET STATUS
// USER") to an access log the test reads. It runs as squid's own
// unprivileged user (proxy) from a private directory, and is killed by
// its pid at test cleanup.
type Squid struct {
	// Addr is where it listens.
	Addr netip.AddrPort
	// User and Password are the credential it accepts.
	User, Password string
	// Secure is true for an https:// proxy (SquidOptions.TLSCert).
	Secure bool

	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// SquidOptions adjust StartSquid.
type SquidOptions struct {
	// Listen is the address to listen on (default 127.0.0.1).
	Listen netip.Addr
	// User and Password default to "chain" and a random password.
	User, Password string
	// Deny are CONNECT destinations answered 403.
	Deny []netip.Prefix
	// Start starts the command (default cmd.Start): a test whose host is
	// another namespace starts it there.
	Start func(*exec.Cmd) error
	// TLSCert and TLSKey (PEM), when set, make it an https:// proxy:
	// clients speak TLS to it before the CONNECT (Internet.ServerPEM
	// issues a pair).
	TLSCert, TLSKey []byte
}

// SquidLine is one access log line.
type SquidLine struct {
	Method, Target, User string
	Status               int
}

// StartSquid starts a Squid and waits until it accepts connections. It
// needs root, squid and openssl (skipping, or failing under
// PALISADE_REQUIRE_PRIVILEGED=1, without them).
func StartSquid(t testing.TB, o SquidOptions) *Squid {
	t.Helper()
	testutil.RequireRoot(t)
	for _, p := range []string{SquidBin, SquidNCSA, OpenSSLBin} {
		_, err := os.Stat(p)
		testutil.RequireData(t, p+" (apt install squid openssl)", err)
	}
	pu, err := user.Lookup("proxy")
	testutil.RequireData(t, "the proxy user squid runs as (apt install squid)", err)
	if !o.Listen.IsValid() {
		o.Listen = netip.MustParseAddr("127.0.0.1")
	}
	if o.User == "" {
		o.User = "chain"
	}
	if o.Password == "" {
		var b [8]byte
		rand.Read(b[:])
		o.Password = "pw-" + hex.EncodeToString(b[:])
	}
	if o.Start == nil {
		o.Start = (*exec.Cmd).Start
	}
	s := &Squid{User: o.User, Password: o.Password, Secure: o.TLSCert != nil}
	if s.dir, err = os.MkdirTemp("", "palisade-squid-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(s.dir) })
	uid, _ := strconv.Atoi(pu.Uid)
	gid, _ := strconv.Atoi(pu.Gid)
	if err := os.Chmod(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(s.dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := s.writeHtpasswd(); err != nil {
		t.Fatalf("squid: %v", err)
	}
	if s.Secure {
		// Read by squid's unprivileged user: a throwaway test key.
		os.WriteFile(filepath.Join(s.dir, "tls-cert.pem"), o.TLSCert, 0o644)
		os.WriteFile(filepath.Join(s.dir, "tls-key.pem"), o.TLSKey, 0o644)
	}
	for attempt := 0; ; attempt++ {
		err := s.start(o)
		if err == nil {
			break
		}
		if attempt == 2 || !errors.Is(err, errPortTaken) {
			t.Fatalf("squid: %v", err)
		}
	}
	t.Cleanup(s.Stop)
	return s
}

var errPortTaken = errors.New("port taken")

// start writes the configuration for a free port and starts squid.
func (s *Squid) start(o SquidOptions) error {
	port, err := freePort(o.Listen)
	if err != nil {
		return err
	}
	s.Addr = netip.AddrPortFrom(o.Listen, uint16(port))
	conf := filepath.Join(s.dir, "squid.conf")
	if err := os.WriteFile(conf, s.config(o.Deny), 0o644); err != nil {
		return err
	}
	os.Remove(filepath.Join(s.dir, "cache.log"))
	s.cmd = exec.Command(SquidBin, "-N", "-f", conf)
	s.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := o.Start(s.cmd); err != nil {
		return err
	}
	cmd, exited := s.cmd, make(chan struct{})
	s.exited = exited
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(squidTimeout)
	for {
		log, _ := os.ReadFile(filepath.Join(s.dir, "cache.log"))
		switch {
		case bytes.Contains(log, []byte("Accepting HTTP Socket connections")), bytes.Contains(log, []byte("Accepting HTTPS Socket connections")):
			return nil
		case bytes.Contains(log, []byte("Address already in use")):
			s.cmd.Process.Kill()
			<-exited
			return errPortTaken
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before it listened (%s):\n%s", s.cmd.ProcessState, tail(log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.cmd.Process.Kill()
			<-exited
			return fmt.Errorf("not listening after %s:\n%s", squidTimeout, tail(log))
		}
	}
}

func tail(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// freePort is a port nothing listens on now at addr.
func freePort(addr netip.Addr) (int, error) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return 0, fmt.Errorf("free port on %s: %w", addr, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// writeHtpasswd writes User's apr1 hash (openssl reads the password on
// stdin, never from argv).
func (s *Squid) writeHtpasswd() error {
	var salt [4]byte
	rand.Read(salt[:])
	cmd := exec.Command(OpenSSLBin, "passwd", "-apr1", "-salt", hex.EncodeToString(salt[:]), "-stdin")
	cmd.Stdin = strings.NewReader(s.Password + "\n")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("openssl passwd: %w", err)
	}
	line := s.User + ":" + strings.TrimSpace(string(out)) + "\n"
	return os.WriteFile(filepath.Join(s.dir, "htpasswd"), []byte(line), 0o644)
}

func (s *Squid) config(deny []netip.Prefix) []byte {
	var b strings.Builder
	port := "http_port " + s.Addr.String()
	if s.Secure {
		port = fmt.Sprintf("https_port %s tls-cert=%s/tls-cert.pem tls-key=%[2]s/tls-key.pem", s.Addr, s.dir)
	}
	fmt.Fprintf(&b, `%s
pid_filename %[2]s/squid.pid
cache_log %[2]s/cache.log
logformat chain %%rm %%ru %%>Hs %%un
access_log stdio:%[2]s/access.log chain
buffered_logs off
cache deny all
cache_store_log none
coredump_dir %[2]s
shutdown_lifetime 0 seconds
netdb_filename none
pinger_enable off
auth_param basic program %[3]s %[2]s/htpasswd
auth_param basic realm palisade-test
acl authed proxy_auth REQUIRED
acl CONNECT method CONNECT
http_access deny !authed
`, port, s.dir, SquidNCSA)
	for _, p := range deny {
		fmt.Fprintf(&b, "acl refused dst %s\n", p)
	}
	if len(deny) > 0 {
		b.WriteString("http_access deny CONNECT refused\n")
	}
	b.WriteString("http_access allow CONNECT authed\nhttp_access deny all\n")
	return []byte(b.String())
}

// PID is squid's process id (0 once stopped).
func (s *Squid) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// URL is the proxy's URL, http:// or https://.
func (s *Squid) URL() string {
	if s.Secure {
		return "https://" + s.Addr.String()
	}
	return "http://" + s.Addr.String()
}

// Log reads the access log so far.
func (s *Squid) Log() []SquidLine {
	f, err := os.Open(filepath.Join(s.dir, "access.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []SquidLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 4 {
			continue
		}
		st, _ := strconv.Atoi(fl[2])
		out = append(out, SquidLine{Method: fl[0], Target: fl[1], Status: st, User: fl[3]})
	}
	return out
}

// Stop ends squid (SIGTERM, SIGKILL after 5 s); its log stays readable
// until the test's cleanup.
func (s *Squid) Stop() {
	if s.cmd == nil {
		return
	}
	cmd := s.cmd
	s.cmd = nil
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-s.exited
	}
}
