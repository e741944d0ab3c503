// Package sandboxnet joins a sandbox to its only way out: it builds the
// network fence (package fence: a veth pair, nftables in the sandbox and
// on the host) and starts the sandbox's egress-proxy on the host side of
// the veth. It implements sandbox.NetworkAttacher and sandbox.TrustSource:
// the proxy writes its inspection CA's certificate, and the attacher
// combines it with the system roots (and an upstream corporate proxy's
// CA bundle, when one is configured) into the bundle the sandbox trusts.
//
// The proxy also serves the policy DNS and the transparent listener: the
// fence admits DNS to the host address and redirects the synthetic range
// (policydns.SyntheticRange) to the transparent listener, and the
// attacher (a sandbox.ResolvSource) gives the sandbox a resolv.conf
// naming the policy DNS and a hosts file with loopback names only. Every
// name in the policy resolves to a synthetic address, so clients that
// ignore the proxy variables are decided exactly as through them.
//
// The proxy reports readiness on a pipe; a proxy that is not ready within
// the timeout fails the sandbox (exit 125). If the proxy dies, egress
// fails closed (the fence redirects nothing anywhere but the proxy's
// addresses, where nothing listens), an incident event is emitted, and the
// proxy is restarted a bounded number of times with backoff.
package sandboxnet

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/upstreamproxy"
)

// Defaults.
const (
	DefaultProxyPort = 3128
	DefaultFencePort = 3129
	// DefaultTransparentPort is the first of the DefaultTransparentPorts
	// ports of the proxy's transparent listener (3132-3139), for
	// connections to policy DNS synthetic addresses. The fence redirects
	// to the range, not to one port, so that a client port reused for
	// another synthetic address while its earlier connection is in
	// TIME_WAIT gets another destination port instead of a source port
	// the kernel's NAT moved (which the proxy could not attribute).
	DefaultTransparentPort  = 3132
	DefaultTransparentPorts = 8
	// DefaultDNSPort is the proxy's policy DNS listener (UDP and TCP);
	// the sandbox asks port 53 of the same address, redirected there.
	DefaultDNSPort = 3131
	// ResolvName is the sandbox's /etc/resolv.conf (policy DNS), in the
	// sandbox's state directory.
	ResolvName = "resolv.conf"
	// HostsName is the sandbox's /etc/hosts, in its state directory.
	HostsName = "hosts"
	// DefaultReadyTimeout bounds a proxy start that neither reports ready
	// nor exits (an exit is seen at once). A start loads and verifies the
	// eBPF programs, which on a loaded host (two CPUs, load 15-25: other
	// sandboxes and test runs) took more than 5 s; a start given up on is
	// killed, a restart given up on costs one of DefaultMaxRestarts and
	// an epoch, and a sandbox's first start given up on fails the run.
	DefaultReadyTimeout = 30 * time.Second
	DefaultMaxRestarts  = 3
	ControlSocketName   = "proxy.sock"
	// CACertName is the proxy's inspection CA certificate (public) and
	// BundleName the combined trust bundle (system roots + that CA) the
	// sandbox sees, both in the sandbox's state directory.
	CACertName = "proxy-ca.pem"
	BundleName = "ca-bundle.pem"
	// DNSEpochName holds the boot epoch of the proxy last started for
	// the sandbox (decimal), in its state directory: every start, a
	// restart after the proxy died included, takes the next one (its
	// --dns-epoch), so synthetic addresses a client cached are never
	// handed out again by the next EpochRanges-1 starts.
	DNSEpochName = "dns-epoch"
)

// Config configures the attacher.
type Config struct {
	// ProxyBin is the egress-proxy binary; "" means egress-proxy next to
	// the running executable.
	ProxyBin string
	// PolicyPath is the policy file the proxy loads and watches.
	PolicyPath string
	// HostsFile, when set, gives the proxy static name resolution.
	HostsFile string
	// UpstreamCABundle, when set, is passed as the proxy's
	// --upstream-ca-bundle: extra roots for upstream servers of inspected
	// (TLS-terminated) tunnels.
	UpstreamCABundle string
	// Ceiling, when set, is the proxy's --ceiling: the policy ceiling its
	// starting policy and every reload must lie within ("" leaves the
	// proxy's default, /etc/palisade/ceiling.yaml when it exists).
	Ceiling string
	// UpstreamProxy are the proxy's --upstream-proxy flags, passed as
	// given (validated by the caller; the proxy validates them again and
	// refuses to start on any error). Only the credential file's path is
	// passed, never the credential.
	UpstreamProxy upstreamproxy.Settings
	// UpstreamProxyCA is the PEM of --upstream-proxy-ca-bundle: a
	// TLS-intercepting corporate proxy re-signs the certificates of the
	// tunnels it carries, so it joins the sandbox's trust bundle.
	UpstreamProxyCA []byte
	// Credentials, when set, is the proxy's --credentials: the root-only
	// file of the credentials whose placeholders it resolves. CredentialEnv
	// is the snapshot (credentials.EncodeEnv) of the supervisor's
	// variables the file's env sources name: the proxy reads it from an
	// inherited pipe (--credentials-env-fd) at every start, so no value
	// is ever on its command line or in its environment.
	Credentials   string
	CredentialEnv []byte
	// Attribution is the proxy's --attribution (bpf, proc or auto; ""
	// leaves the proxy's default, auto).
	Attribution string
	// DNSTTL, when nonzero, is the proxy's --dns-ttl: the lifetime of a
	// synthetic mapping and the TTL of its answer (policydns.MinTTL to
	// MaxTTL); 0 leaves the proxy's default.
	DNSTTL time.Duration
	// SendGuard is the proxy's --send-guard ("" leaves the proxy's
	// default, auto): the supervisor passes "require" under
	// hard_requirement, so a kernel that cannot hold decided connections
	// to their process stops the sandbox instead of running degraded.
	SendGuard string
	// Procs, when set, is the proxy's --procs: how many CPUs run proxy
	// code at once (0: all). nil leaves the proxy's default (1 in
	// sandbox mode).
	Procs *int
	// Events is the --events destination ("" none, "-" Stdout, /dev/fd/N
	// the supervisor's inherited descriptor, passed to the proxy as fd 4).
	Events string
	// StateRoot is the supervisor's state root; the proxy's control socket
	// is <StateRoot>/<sandbox>/proxy.sock.
	StateRoot string
	// FenceStateDir is the fence allocation directory ("" = fence default).
	FenceStateDir string
	// Pool is the /30 pool ("" zero value = fence default).
	Pool                 netip.Prefix
	ProxyPort, FencePort uint16
	ReadyTimeout         time.Duration
	MaxRestarts          int
	LogFormat            string
	LogLevel             string
	// Stdout and Stderr are the proxy's (events on "-", and its logs).
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
	// Events receives incidents (proxy died, restarted, gave up).
	Incidents sandbox.Events
}

func (c *Config) defaults() error {
	if c.ProxyBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("sandboxnet: locate egress-proxy: %w", err)
		}
		c.ProxyBin = filepath.Join(filepath.Dir(exe), "egress-proxy")
	}
	if c.ProxyPort == 0 {
		c.ProxyPort = DefaultProxyPort
	}
	if c.FencePort == 0 {
		c.FencePort = DefaultFencePort
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.MaxRestarts == 0 {
		c.MaxRestarts = DefaultMaxRestarts
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Incidents == nil {
		c.Incidents = sandbox.NopEvents{}
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	return nil
}

// ProxyEnv returns the reserved proxy variables for a proxy at addr.
func ProxyEnv(addr netip.AddrPort) []string {
	u := "http://" + addr.String()
	return []string{
		"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "ALL_PROXY=" + u,
		"http_proxy=" + u, "https_proxy=" + u, "all_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}
