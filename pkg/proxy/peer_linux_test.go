//go:build linux

package proxy

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestControlRefusesOtherUsers proves the peer check behind the 0600
// mode: even with the socket made world-writable, a connection from
// another uid is closed unanswered, while root's is served.
func TestControlRefusesOtherUsers(t *testing.T) {
	testutil.RequireRoot(t)
	env := newEnv(t, policyYAML(9, ""))
	dir := filepath.Join(env.dir, "ctl")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(env.dir, 0o755)
	os.Chmod(filepath.Dir(env.dir), 0o755)
	sock := filepath.Join(dir, "proxy.sock")
	ln, err := ListenControl(sock)
	if err != nil {
		t.Fatal(err)
	}
	go env.p.ServeControl(ln)
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}

	ask := func(c net.Conn) string {
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /status HTTP/1.1\r\nHost: control\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(c)
		return string(b)
	}
	// As nobody: connect on a thread whose credentials are changed with
	// a raw per-thread setresuid; the thread is never reused (it stays
	// locked and exits with its goroutine).
	type result struct {
		c   net.Conn
		err error
	}
	rc := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, 65534, 65534, 65534); e != 0 {
			rc <- result{err: e}
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			rc <- result{err: e}
			return
		}
		c, err := net.Dial("unix", sock)
		rc <- result{c, err}
	}()
	r := <-rc
	if r.err != nil {
		t.Fatalf("connect as nobody: %v", r.err)
	}
	if got := ask(r.c); got != "" {
		t.Fatalf("a non-root peer was answered: %q", got)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if got := ask(c); len(got) < 12 || got[:12] != "HTTP/1.1 200" {
		t.Fatalf("root was not answered: %q", got)
	}
}
