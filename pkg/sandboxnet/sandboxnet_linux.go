//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

func init() {
	// gc removes what a dead sandbox's fence left behind.
	sandbox.RegisterCollector(func(l state.Labels) error { return fence.Collect(l.Name) })
}

// Attacher implements sandbox.NetworkAttacher and sandbox.WritableSink.
type Attacher struct {
	cfg Config

	mu      sync.Mutex
	proxies map[string]*proxyProc
	// writable holds what each sandbox may write (SandboxWritable), for
	// its proxy's --writable.
	writable map[string][]string
}

var _ sandbox.WritableSink = (*Attacher)(nil)

// SandboxWritable implements sandbox.WritableSink: the paths are passed
// to the sandbox's proxy as --writable (code identity).
func (a *Attacher) SandboxWritable(sandbox string, paths []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.writable == nil {
		a.writable = map[string][]string{}
	}
	a.writable[sandbox] = append([]string(nil), paths...)
}

// New returns an attacher; errors name the missing piece.
func New(cfg Config) (*Attacher, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.PolicyPath == "" {
		return nil, errors.New("sandboxnet: the egress proxy needs the policy file (bundled policies have no network entries)")
	}
	if _, err := os.Stat(cfg.ProxyBin); err != nil {
		return nil, fmt.Errorf("sandboxnet: egress-proxy binary: %w (use --proxy-bin)", err)
	}
	return &Attacher{cfg: cfg, proxies: map[string]*proxyProc{}}, nil
}

// Attach implements sandbox.NetworkAttacher.
func (a *Attacher) Attach(ctx context.Context, name string, initPID int) ([]string, func() error, error) {
	c := a.cfg
	// Every sandbox with a proxy has the policy DNS and the transparent
	// listener: the fence admits DNS to the host address and redirects
	// the synthetic range.
	fc := fence.Config{
		Sandbox:   name,
		NetnsPath: fmt.Sprintf("/proc/%d/ns/net", initPID),
		Pool:      c.Pool, ProxyPort: c.ProxyPort, FencePort: c.FencePort,
		DNSPort: DefaultDNSPort, TransparentPort: DefaultTransparentPort, TransparentPorts: DefaultTransparentPorts,
		StateDir: c.FenceStateDir,
	}
	f, err := fence.Setup(ctx, fc)
	if err != nil {
		return nil, nil, err
	}
	a.mu.Lock()
	writable := a.writable[name]
	a.mu.Unlock()
	p := &proxyProc{cfg: c, name: name, initPID: initPID, fence: f, stop: make(chan struct{}), writable: writable}
	if err := p.trustDir(); err != nil {
		f.Teardown()
		return nil, nil, err
	}
	if err := p.writeResolv(); err != nil {
		f.Teardown()
		p.removeTrustDir()
		return nil, nil, err
	}
	if err := p.start(); err != nil {
		f.Teardown()
		p.removeTrustDir()
		return nil, nil, err
	}
	p.done.Add(1)
	go p.supervise()
	a.mu.Lock()
	a.proxies[name] = p
	a.mu.Unlock()
	env := ProxyEnv(netip.AddrPortFrom(f.HostAddr, c.ProxyPort))
	return env, p.close, nil
}

// ProxyPID returns the pid of the named sandbox's current egress-proxy,
// or 0 when none runs (for status reporting and tests).
func (a *Attacher) ProxyPID(sandbox string) int {
	a.mu.Lock()
	p := a.proxies[sandbox]
	a.mu.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil || p.stopped {
		return 0
	}
	select {
	case <-p.exited:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

// TrustBundle implements sandbox.TrustSource: the host path of the
// combined bundle (system roots + the proxy's CA) for the named sandbox,
// "" when it has none.
func (a *Attacher) TrustBundle(sandbox string) string {
	if p := a.proxy(sandbox); p != nil {
		return p.bundle
	}
	return ""
}

// proxy returns the named sandbox's proxyProc, nil when none.
func (a *Attacher) proxy(sandbox string) *proxyProc {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.proxies[sandbox]
}

// proxyProc is one sandbox's egress-proxy and its supervision.
type proxyProc struct {
	cfg     Config
	name    string
	initPID int
	fence   *fence.Fence
	// writable are the host paths the sandbox may write (--writable).
	writable []string
	resolv   string // the sandbox's /etc/resolv.conf (policy DNS)
	hosts    string // the sandbox's /etc/hosts (loopback names only)
	dir      string // where the CA certificate and the bundle live
	tmpDir   bool   // dir was made here (no state root) and goes at close
	bundle   string
	// log is the proxy's stderr, ProxyLogName in the sandbox's state
	// directory (nil without one: the proxy's stderr is cfg.Stderr).
	log *proxyLog
	// epoch is the policy DNS boot epoch of the proxy started last:
	// persisted in dir/DNSEpochName when dir is the sandbox's state
	// directory, else counted here from a random start.
	epoch    uint64
	epochSet bool

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stop    chan struct{}
	stopped bool
	done    sync.WaitGroup
}

func (p *proxyProc) args() []string {
	c := p.cfg
	host := p.fence.HostAddr
	a := []string{
		"--policy", c.PolicyPath,
		"--listen", netip.AddrPortFrom(host, c.ProxyPort).String(),
		"--fence-listen", netip.AddrPortFrom(host, c.FencePort).String(),
		"--sandbox", p.name,
		"--cgroup", p.name,
		"--init-pid", strconv.Itoa(p.initPID),
		"--ready-fd", "3",
		"--log-format", c.LogFormat,
		"--log-level", c.LogLevel,
	}
	if c.StateRoot != "" {
		a = append(a, "--control", filepath.Join(c.StateRoot, p.name, ControlSocketName))
	}
	nextFD := 4 // after --ready-fd (start's ExtraFiles, in order)
	if _, ok := ocsf.FDDest(c.Events); ok {
		// The supervisor's inherited descriptor, passed on (start).
		a = append(a, "--events", "/dev/fd/4")
		nextFD++
	} else if c.Events != "" {
		a = append(a, "--events", c.Events)
	}
	if c.Credentials != "" {
		a = append(a, "--credentials", c.Credentials, "--credentials-env-fd", strconv.Itoa(nextFD))
	}
	if c.HostsFile != "" {
		a = append(a, "--hosts-file", c.HostsFile)
	}
	if c.SendGuard != "" {
		a = append(a, "--send-guard", c.SendGuard)
	}
	for _, w := range p.writable {
		a = append(a, "--writable", w)
	}
	if c.Attribution != "" {
		a = append(a, "--attribution", c.Attribution)
	}
	if c.UpstreamCABundle != "" {
		a = append(a, "--upstream-ca-bundle", c.UpstreamCABundle)
	}
	if c.Ceiling != "" {
		a = append(a, "--ceiling", c.Ceiling)
	}
	if c.Procs != nil {
		a = append(a, "--procs", strconv.Itoa(*c.Procs))
	}
	a = append(a, c.UpstreamProxy.Args()...)
	a = append(a, "--dns-listen", netip.AddrPortFrom(host, DefaultDNSPort).String(),
		"--transparent-listen", fmt.Sprintf("%s-%d", netip.AddrPortFrom(host, DefaultTransparentPort), DefaultTransparentPort+DefaultTransparentPorts-1))
	if c.DNSTTL != 0 {
		a = append(a, "--dns-ttl", c.DNSTTL.String())
	}
	a = append(a, "--dns-epoch", strconv.FormatUint(p.epoch, 10))
	a = append(a, "--ca-out", filepath.Join(p.dir, CACertName))
	return a
}

// trustDir picks the directory of the CA certificate and the bundle: the
// sandbox's state directory, or a private temporary one.
func (p *proxyProc) trustDir() error {
	if p.cfg.StateRoot != "" {
		p.dir = filepath.Join(p.cfg.StateRoot, p.name)
		if fi, err := os.Stat(p.dir); err == nil && fi.IsDir() {
			p.bundle = filepath.Join(p.dir, BundleName)
			l, err := openProxyLog(filepath.Join(p.dir, ProxyLogName), p.name, p.cfg.Logger)
			if err != nil {
				return fmt.Errorf("sandboxnet: %w", err)
			}
			p.log = l
			return nil
		}
	}
	d, err := os.MkdirTemp("", "palisade-trust-")
	if err != nil {
		return fmt.Errorf("sandboxnet: trust bundle directory: %w", err)
	}
	p.dir, p.tmpDir, p.bundle = d, true, filepath.Join(d, BundleName)
	return nil
}

func (p *proxyProc) removeTrustDir() {
	if p.log != nil {
		p.log.Close()
	}
	if p.tmpDir {
		os.RemoveAll(p.dir)
	}
}

// writeBundle combines the system roots with the certificate the proxy
// just wrote and the upstream proxy's CA bundle. It rewrites the bundle
// in place: the sandbox's read-only bind mounts of it show a restarted
// proxy's new CA to new processes.
func (p *proxyProc) writeBundle() error {
	caPEM, err := os.ReadFile(filepath.Join(p.dir, CACertName))
	if err != nil {
		return fmt.Errorf("egress-proxy CA certificate: %w", err)
	}
	if tlsca.CountCerts(caPEM) != 1 {
		return fmt.Errorf("egress-proxy CA certificate %s: want exactly one PEM certificate", filepath.Join(p.dir, CACertName))
	}
	_, sys := tlsca.SystemRootsPEM()
	return tlsca.WriteInPlace(p.bundle, tlsca.Bundle(sys, p.cfg.UpstreamProxyCA, caPEM))
}

// start launches the proxy and waits for "ready" on its pipe.
// nextEpoch advances the policy DNS boot epoch for the proxy about to
// start: the persisted one plus one (0 when there is none yet), written
// (atomically, durably) before the proxy runs, so no two starts share
// one even across supervisor restarts. A file that does not hold an
// epoch is an error: the start fails rather than guess one that may
// repeat the last.
func (p *proxyProc) nextEpoch() error {
	if p.tmpDir || p.dir == "" {
		if !p.epochSet {
			var b [8]byte
			if _, err := rand.Read(b[:]); err != nil {
				return fmt.Errorf("sandboxnet: policy DNS epoch: %w", err)
			}
			p.epoch, p.epochSet = binary.LittleEndian.Uint64(b[:]), true
			return nil
		}
		p.epoch++
		return nil
	}
	file := filepath.Join(p.dir, DNSEpochName)
	next := uint64(0)
	switch b, err := os.ReadFile(file); {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("sandboxnet: policy DNS epoch: %w", err)
	default:
		last, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if perr != nil {
			shown := bytes.TrimSpace(b)
			shown = shown[:min(len(shown), 32)] // a line, not a whole file
			return fmt.Errorf("sandboxnet: policy DNS epoch: %s does not hold an epoch (%q); remove it to count from 0 again", file, shown)
		}
		next = last + 1
	}
	if err := fsutil.WriteFileAtomic(file, []byte(strconv.FormatUint(next, 10)+"\n"), 0o600); err != nil {
		return fmt.Errorf("sandboxnet: policy DNS epoch: %w", err)
	}
	p.epoch, p.epochSet = next, true
	return nil
}

func (p *proxyProc) start() error {
	if err := p.nextEpoch(); err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("egress-proxy: ready pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(p.cfg.ProxyBin, p.args()...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = p.cfg.Stdout, p.cfg.Stderr
	if p.log != nil {
		// exec copies through a pipe; Wait returns once it is drained.
		p.log.started()
		cmd.Stderr = p.log
	}
	cmd.ExtraFiles = []*os.File{w}
	if fd, ok := ocsf.FDDest(p.cfg.Events); ok {
		// --events /dev/fd/N: the proxy appends to the same pipe, socket
		// or file, as its descriptor 4.
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			w.Close()
			return fmt.Errorf("egress-proxy: pass --events %s: %w", p.cfg.Events, err)
		}
		ev := os.NewFile(uintptr(nfd), p.cfg.Events)
		defer ev.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, ev)
	}
	if p.cfg.Credentials != "" {
		cr, err := credentialPipe(p.cfg.CredentialEnv)
		if err != nil {
			w.Close()
			return err
		}
		defer cr.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, cr)
	}
	// The proxy dies with the supervisor.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: unix.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("egress-proxy: start %s: %w", p.cfg.ProxyBin, err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(r).ReadString('\n')
		if err != nil || line != "ready\n" {
			ready <- fmt.Errorf("egress-proxy exited before it was ready (%q, %v)", line, err)
			return
		}
		ready <- nil
	}()
	select {
	case err = <-ready:
	case <-time.After(p.cfg.ReadyTimeout):
		err = fmt.Errorf("egress-proxy not ready after %s", p.cfg.ReadyTimeout)
	}
	if err != nil {
		cmd.Process.Kill()
		<-exited
		if p.log != nil {
			if tail := p.log.Tail(); tail != "" {
				err = fmt.Errorf("%w; its log ends: %s", err, tail)
			}
		}
		return err
	}
	if p.log != nil {
		p.log.isReady()
	}
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	if err := p.writeBundle(); err != nil {
		cmd.Process.Kill()
		<-exited
		return err
	}
	p.cfg.Logger.Debug("egress-proxy ready", "sandbox", p.name, "pid", cmd.Process.Pid)
	return nil
}

// credentialPipe is the read end of a pipe holding env, for the proxy's
// --credentials-env-fd: the snapshot is written from a goroutine (a
// pipe buffer may be smaller than it) and the write end closed, so the
// proxy reads it to its end. A proxy that dies before reading it ends
// the write with EPIPE.
func credentialPipe(env []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("egress-proxy: credentials pipe: %w", err)
	}
	go func() {
		w.Write(env)
		w.Close()
	}()
	return r, nil
}

// supervise restarts the proxy when it dies, a bounded number of times.
// While it is down nothing listens on the proxy's addresses: the fence
// still sends everything there, so egress fails closed.
func (p *proxyProc) supervise() {
	defer p.done.Done()
	for restarts := 0; ; {
		p.mu.Lock()
		exited, cmd := p.exited, p.cmd
		p.mu.Unlock()
		select {
		case <-p.stop:
			return
		case <-exited:
		}
		select {
		case <-p.stop:
			return
		default:
		}
		status := cmd.ProcessState.String()
		if restarts >= p.cfg.MaxRestarts {
			p.cfg.Incidents.Incident("Egress Proxy Down", "egress proxy for "+p.name+" is down for good",
				fmt.Sprintf("egress-proxy %s after %d restarts; egress stays closed", status, restarts))
			p.cfg.Logger.Error("egress-proxy gave up", "sandbox", p.name, "restarts", restarts)
			return
		}
		restarts++
		p.cfg.Incidents.Incident("Egress Proxy Down", "egress proxy for "+p.name+" died",
			fmt.Sprintf("egress-proxy %s; egress fails closed until restart %d of %d", status, restarts, p.cfg.MaxRestarts))
		p.cfg.Logger.Warn("egress-proxy died; restarting", "sandbox", p.name, "status", status, "restart", restarts)
		backoff := time.Duration(restarts*restarts) * 100 * time.Millisecond
		select {
		case <-p.stop:
			return
		case <-time.After(backoff):
		}
		// The old proxy's connections died with it, and its names'
		// addresses with its epoch: their lingering conntrack entries
		// would hold the transparent ports for client ports the sandbox
		// reuses for the new addresses (fence.FlushConntrack). A flush
		// that fails costs at most such a refused connection, never an
		// allowed one: the start goes on.
		if err := p.fence.FlushConntrack(); err != nil {
			p.cfg.Logger.Warn("egress-proxy restart: conntrack entries not flushed", "sandbox", p.name, "err", err)
		}
		if err := p.start(); err != nil {
			p.cfg.Logger.Error("egress-proxy restart failed", "sandbox", p.name, "err", err)
			p.mu.Lock()
			// Treat a failed start like a death: loop to the next attempt.
			p.exited = closedChan()
			p.mu.Unlock()
		}
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// close stops the proxy (SIGTERM, then SIGKILL after 2 s) and removes the
// fence.
func (p *proxyProc) close() error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	close(p.stop)
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	p.done.Wait()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(unix.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	p.removeTrustDir()
	return p.fence.Teardown()
}
