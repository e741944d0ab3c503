//go:build linux

package sandboxnet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// The test binary doubles as a fake egress-proxy: it honours --listen and
// --ready-fd, answers "fake-proxy\n" to every connection, and behaves as
// the policy file it is given says: "serve", "never-ready" or
// "die-after-ready" (the supervisor clears the proxy's environment, so the
// mode travels in the file).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--policy" {
		fakeProxy(os.Args[1:])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == identityHelperArg {
		identityHelper(os.Args[2:])
	}
	os.Exit(m.Run())
}

func fakeProxy(args []string) {
	var listen, policy, caOut string
	readyFD := -1
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--listen":
			listen = args[i+1]
		case "--ready-fd":
			fmt.Sscan(args[i+1], &readyFD)
		case "--policy":
			policy = args[i+1]
		case "--ca-out":
			caOut = args[i+1]
		}
	}
	if caOut != "" {
		// Like the real proxy: a new CA per start, its certificate out.
		ca, err := tlsca.New(tlsca.Options{})
		if err == nil {
			err = ca.WriteCert(caOut)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake proxy:", err)
			os.Exit(1)
		}
	}
	b, _ := os.ReadFile(policy)
	mode := strings.TrimSpace(string(b))
	if mode == "never-ready" {
		time.Sleep(time.Minute)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake proxy:", err)
		os.Exit(1)
	}
	ready := os.NewFile(uintptr(readyFD), "ready")
	ready.Write([]byte("ready\n"))
	ready.Close()
	if mode == "die-after-ready" {
		os.Exit(3)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Write([]byte("fake-proxy\n"))
		c.Close()
	}
}

type incidents struct {
	sandbox.NopEvents
	mu   sync.Mutex
	list []string
}

func (r *incidents) Incident(kind, title, detail string) {
	r.mu.Lock()
	r.list = append(r.list, title+": "+detail)
	r.mu.Unlock()
}

func (r *incidents) titles() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.list...)
}

// fakeSandbox is a process in a fresh network namespace standing in for a
// sandbox's init.
func fakeSandbox(t *testing.T) (int, netns.NsHandle) {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ns, err := netns.GetFromPid(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return cmd.Process.Pid, ns
}

// dialFromSandbox connects from inside ns and returns what the peer says.
func dialFromSandbox(ns netns.NsHandle, addr string) (string, error) {
	var got string
	err := nettest.Do(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		got = string(b)
		return err
	})
	return got, err
}

func newAttacher(t *testing.T, rec *incidents, mode string, restarts int) (*Attacher, string) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "nftables")
	policy := t.TempDir() + "/policy.yaml"
	os.WriteFile(policy, []byte(mode+"\n"), 0o600)
	// A proxy that must come up gets the product's default time for it
	// (a loaded host takes a while to start a copy of the test binary);
	// one that never will is given up on sooner.
	var ready time.Duration
	if mode == "never-ready" {
		ready = 2 * time.Second
	}
	a, err := New(Config{
		ProxyBin: os.Args[0], PolicyPath: policy, Incidents: rec, MaxRestarts: restarts,
		ReadyTimeout: ready, Stderr: testutil.LogWriter(t, "egress-proxy"),
	})
	if err != nil {
		t.Fatal(err)
	}
	name := testutil.UniqueName("sn-")
	t.Cleanup(func() { fence.Collect(name) })
	return a, name
}

func TestAttachStartsProxyAndRestartsIt(t *testing.T) {
	rec := &incidents{}
	a, name := newAttacher(t, rec, "serve", 2)
	pid, ns := fakeSandbox(t)
	env, cleanup, err := a.Attach(context.Background(), name, pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup() }) // a failure below must not leave the proxy running
	var proxyURL string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HTTPS_PROXY="); ok {
			proxyURL = v
		}
	}
	if !strings.HasPrefix(proxyURL, "http://10.") || !strings.Contains(strings.Join(env, " "), "NO_PROXY=localhost,127.0.0.1,::1") {
		t.Fatalf("env %v", env)
	}
	addr := strings.TrimPrefix(proxyURL, "http://")
	if got, err := dialFromSandbox(ns, addr); err != nil || got != "fake-proxy\n" {
		t.Fatalf("from the sandbox to the proxy: %q, %v", got, err)
	}
	bundle := a.TrustBundle(name)
	before, err := os.ReadFile(bundle)
	if err != nil || tlsca.CountCerts(before) < 1 {
		t.Fatalf("trust bundle %s: %v", bundle, err)
	}
	fiBefore, _ := os.Stat(bundle)

	// Kill the proxy: egress fails closed (refused at once, nothing goes
	// elsewhere), an incident is emitted, and it comes back.
	ppid := a.ProxyPID(name)
	if ppid == 0 {
		t.Fatal("no proxy pid")
	}
	syscall.Kill(ppid, syscall.SIGKILL)
	start := time.Now()
	sawClosed := false
	for time.Since(start) < DefaultReadyTimeout+10*time.Second { // backoff + a start (at most DefaultReadyTimeout)
		got, err := dialFromSandbox(ns, addr)
		if err != nil {
			sawClosed = true
		} else if got == "fake-proxy\n" && len(rec.titles()) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(rec.titles()) != 1 || !strings.Contains(rec.titles()[0], "died") {
		t.Fatalf("incidents %v", rec.titles())
	}
	if got, err := dialFromSandbox(ns, addr); err != nil || got != "fake-proxy\n" {
		t.Fatalf("proxy not restarted: %q, %v", got, err)
	}
	t.Logf("restart observed after %v (saw the closed window: %v)", time.Since(start), sawClosed)
	// The restarted proxy's new CA is in the same file (a bind mount of
	// it shows the change), replacing the old one.
	// (The supervisor rewrites it once the new proxy reported ready,
	// which may be just after the proxy began answering.)
	var after []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		after, _ = os.ReadFile(bundle)
		if !bytes.Equal(before, after) && tlsca.CountCerts(after) == tlsca.CountCerts(before) {
			break // rewritten (a read during the rewrite can see it partly written)
		}
	}
	fiAfter, _ := os.Stat(bundle)
	if bytes.Equal(before, after) || !os.SameFile(fiBefore, fiAfter) || tlsca.CountCerts(after) != tlsca.CountCerts(before) {
		t.Fatalf("bundle not rewritten in place with the new CA (same contents %v, same file %v)", bytes.Equal(before, after), os.SameFile(fiBefore, fiAfter))
	}

	host := HostIfOf(name)
	current := a.ProxyPID(name)
	if current == 0 || current == ppid {
		t.Fatalf("restarted proxy pid %d (killed one was %d)", current, ppid)
	}
	if err := cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(bundle)); !os.IsNotExist(err) {
		t.Fatalf("temporary trust directory left after cleanup: %v", err)
	}
	if _, err := netlink.LinkByName(host); err == nil {
		t.Fatal("veth left after cleanup")
	}
	if a.ProxyPID(name) != 0 {
		t.Fatal("proxy left after cleanup")
	}
	if err := syscall.Kill(current, 0); err != syscall.ESRCH {
		t.Fatalf("proxy %d still exists after cleanup (kill 0: %v)", current, err)
	}
}

func HostIfOf(name string) string { return fence.HostIfName(name) }

func TestProxyNeverReadyFailsAndRemovesFence(t *testing.T) {
	rec := &incidents{}
	a, name := newAttacher(t, rec, "never-ready", 1)
	pid, _ := fakeSandbox(t)
	_, _, err := a.Attach(context.Background(), name, pid)
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("Attach = %v, want a readiness failure", err)
	}
	if _, err := netlink.LinkByName(fence.HostIfName(name)); err == nil {
		t.Fatal("fence left behind after a failed attach")
	}
}

func TestProxyRestartsAreBounded(t *testing.T) {
	rec := &incidents{}
	a, name := newAttacher(t, rec, "die-after-ready", 2)
	pid, _ := fakeSandbox(t)
	_, cleanup, err := a.Attach(context.Background(), name, pid)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	deadline := time.Now().Add(30 * time.Second) // three starts and two backoffs
	for time.Now().Before(deadline) {
		if l := rec.titles(); len(l) > 0 && strings.Contains(l[len(l)-1], "down for good") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	l := rec.titles()
	if len(l) != 3 || !strings.Contains(l[2], "down for good") || !strings.Contains(l[2], "after 2 restarts") {
		t.Fatalf("incidents %v, want two deaths then down for good", l)
	}
}
