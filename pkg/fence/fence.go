package fence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/vishvananda/netns"

	"github.com/palisade-sandbox/palisade/pkg/state"
)

// DefaultPool is the IPv4 range sandbox /30s come from unless
// Config.Pool says otherwise.
var DefaultPool = netip.MustParsePrefix("10.200.0.0/16")

// DefaultStateDir holds the allocation lock and one record per fenced
// sandbox unless Config.StateDir says otherwise.
const DefaultStateDir = "/run/palisade/fence"

// SandboxTable is the name of the nftables table (family inet) inside
// every sandbox namespace.
const SandboxTable = "palisade"

// SandboxIf is the name of the sandbox side of the veth pair.
const SandboxIf = "eth0"

// SyntheticRange is the policy DNS's synthetic address range (RFC 2544
// benchmarking, never routed): what Config.TransparentPort captures.
var SyntheticRange = netip.MustParsePrefix("198.18.0.0/15")

// TablePrefix starts the name of every host-side table; the sandbox name
// follows.
const TablePrefix = "palisade-"

// Config describes one sandbox's fence.
type Config struct {
	// Sandbox is the sandbox name (1-63 of [a-z0-9._-]); it names the
	// host-side link and table.
	Sandbox string
	// NetnsPath is the sandbox's network namespace, usually
	// /proc/<init pid>/ns/net. It must not be the host namespace.
	NetnsPath string
	// Pool is the IPv4 range the /30 comes from; the zero value means
	// DefaultPool. It must be /30 or larger and written as its network
	// address (10.200.0.0/16, not 10.200.1.0/16).
	Pool netip.Prefix
	// ProxyPort is the proxy's explicit listener on the host address;
	// FencePort is its fence listener, where every other TCP connection
	// from the sandbox is redirected. Both are required and distinct.
	ProxyPort, FencePort uint16
	// DNSPort, when not 0, is the proxy's policy DNS listener on the host
	// address: the sandbox may send DNS (UDP and TCP) to the host address
	// port 53, which is redirected there. Without it DNS fails at once,
	// as every other UDP does.
	DNSPort uint16
	// TransparentPort, when not 0, is the first port of the proxy's
	// transparent listener: TCP connections to SyntheticRange are
	// redirected to TransparentPort..TransparentPort+TransparentPorts-1
	// instead of to the fence listener, and the proxy must listen on
	// every one of them. TransparentPorts is how many (0 means 1, at most
	// MaxTransparentPorts). With one port, every redirected connection
	// has the reply tuple (host:port -> sandbox:srcport) whatever its
	// synthetic destination, and a client port whose earlier connection
	// to another synthetic address is still in TIME_WAIT clashes: the
	// kernel's NAT then moves the new connection's source port and the
	// proxy cannot attribute it. With a range, the redirect takes the
	// first port of the range that makes the tuple unique instead.
	TransparentPort  uint16
	TransparentPorts uint16
	// StateDir holds the allocation lock and records; "" means
	// DefaultStateDir. Every supervisor on a host must use the same one.
	StateDir string
	// HostNetns is the namespace that plays the host: "" means the
	// caller's own. Tests point it at a throwaway namespace.
	HostNetns string
}

// withDefaults returns c with the zero Pool and StateDir filled in.
func (c Config) withDefaults() Config {
	if !c.Pool.IsValid() {
		c.Pool = DefaultPool
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	return c
}

// validate checks c after withDefaults; errors name the field.
func (c Config) validate() error {
	if err := validateName(c.Sandbox); err != nil {
		return err
	}
	if c.NetnsPath == "" {
		return errors.New("fence: NetnsPath: empty (want the sandbox's /proc/<pid>/ns/net)")
	}
	if err := validatePool(c.Pool); err != nil {
		return err
	}
	if c.ProxyPort == 0 {
		return errors.New("fence: ProxyPort: must not be 0")
	}
	if c.FencePort == 0 {
		return errors.New("fence: FencePort: must not be 0")
	}
	if err := c.validateTransparent(); err != nil {
		return err
	}
	if c.DNSPort != 0 && (c.DNSPort == 53 || c.DNSPort == c.ProxyPort || c.DNSPort == c.FencePort || c.inTransparent(c.DNSPort)) {
		return fmt.Errorf("fence: DNSPort %d: must differ from 53 and the other ports", c.DNSPort)
	}
	if c.ProxyPort == c.FencePort {
		return fmt.Errorf("fence: FencePort %d: must differ from ProxyPort", c.FencePort)
	}
	if !strings.HasPrefix(c.StateDir, "/") {
		return fmt.Errorf("fence: StateDir %q: must be an absolute path", c.StateDir)
	}
	return nil
}

// MaxTransparentPorts bounds Config.TransparentPorts.
const MaxTransparentPorts = 64

// transparentLast is the last port of the transparent range (0 without
// one).
func (c Config) transparentLast() uint16 {
	if c.TransparentPort == 0 {
		return 0
	}
	return c.TransparentPort + max(c.TransparentPorts, 1) - 1
}

// inTransparent reports whether port is in the transparent range.
func (c Config) inTransparent(port uint16) bool {
	return c.TransparentPort != 0 && port >= c.TransparentPort && port <= c.transparentLast()
}

func (c Config) validateTransparent() error {
	switch {
	case c.TransparentPort == 0 && c.TransparentPorts != 0:
		return fmt.Errorf("fence: TransparentPorts %d: needs TransparentPort", c.TransparentPorts)
	case c.TransparentPort == 0:
		return nil
	case c.TransparentPorts > MaxTransparentPorts:
		return fmt.Errorf("fence: TransparentPorts %d: at most %d", c.TransparentPorts, MaxTransparentPorts)
	case int(c.TransparentPort)+int(max(c.TransparentPorts, 1))-1 > 65535:
		return fmt.Errorf("fence: TransparentPorts %d: TransparentPort %d plus the range passes port 65535", c.TransparentPorts, c.TransparentPort)
	case c.inTransparent(c.ProxyPort) || c.inTransparent(c.FencePort):
		return fmt.Errorf("fence: TransparentPort %d-%d: must not contain ProxyPort or FencePort", c.TransparentPort, c.transparentLast())
	}
	return nil
}

func validatePool(p netip.Prefix) error {
	switch {
	case !p.Addr().Is4():
		return fmt.Errorf("fence: Pool %s: must be an IPv4 prefix", p)
	case p.Bits() > 30:
		return fmt.Errorf("fence: Pool %s: must be /30 or larger", p)
	case p.Masked() != p:
		return fmt.Errorf("fence: Pool %s: host bits set (did you mean %s?)", p, p.Masked())
	}
	return nil
}

func validateName(name string) error {
	if err := state.ValidateName(name); err != nil {
		return fmt.Errorf("fence: Sandbox: %w", err)
	}
	return nil
}

// HostIfName is the name of the host side of a sandbox's veth:
// "pal", the first 8 hex digits of sha256(sandbox), "h" — 12 bytes, well
// within the kernel's 15. Two sandbox names that share the 32-bit prefix
// cannot be fenced at once: the second Setup fails with "exists".
func HostIfName(sandbox string) string {
	sum := sha256.Sum256([]byte(sandbox))
	return "pal" + hex.EncodeToString(sum[:4]) + "h"
}

// TableName is the name of a sandbox's host-side nftables table (family
// inet).
func TableName(sandbox string) string { return TablePrefix + sandbox }

// Fence is one sandbox's fence as built by Setup.
type Fence struct {
	Sandbox string
	// Prefix is the /30; HostAddr (its first address) is the host side
	// where the proxy listens, SandboxAddr (its second) the sandbox's
	// eth0.
	Prefix      netip.Prefix
	HostAddr    netip.Addr
	SandboxAddr netip.Addr
	// HostIf is the host side of the veth; Table the host-side table.
	HostIf string
	Table  string
	// ProxyPort and FencePort are as configured.
	ProxyPort, FencePort uint16

	cfg       Config
	hostIndex int

	mu     sync.Mutex
	hostNs netns.NsHandle // open from Setup until a successful Teardown
	live   bool           // made by Setup and not yet torn down
	done   bool           // torn down
}

// ProxyAddr is where the sandbox reaches the proxy: the host address and
// the proxy port. HTTP_PROXY and friends point here.
func (f *Fence) ProxyAddr() netip.AddrPort { return netip.AddrPortFrom(f.HostAddr, f.ProxyPort) }

// FenceAddr is where every other TCP connection from the sandbox lands:
// the proxy's fence listener must be bound here (or to the port on all
// addresses).
func (f *Fence) FenceAddr() netip.AddrPort { return netip.AddrPortFrom(f.HostAddr, f.FencePort) }

// allocate returns the first /30 of pool that overlaps none of used.
func allocate(pool netip.Prefix, used []netip.Prefix) (netip.Prefix, error) {
	if err := validatePool(pool); err != nil {
		return netip.Prefix{}, err
	}
	a := pool.Addr()
	for pool.Contains(a) {
		cand := netip.PrefixFrom(a, 30)
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, nil
		}
		b := a.As4()
		n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		n += 4
		if n < 4 { // wrapped past 255.255.255.255
			break
		}
		a = netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	}
	return netip.Prefix{}, fmt.Errorf("fence: Pool %s: exhausted (no free /30 among %d addresses and routes in use)", pool, len(used))
}

// hostAndSandbox are the first and second addresses of a /30.
func hostAndSandbox(p netip.Prefix) (netip.Addr, netip.Addr) {
	h := p.Addr().Next()
	return h, h.Next()
}
