package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/binaries"
	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// DecideRequest is what the policy engine decides on: the canonical host
// (or canonical IP literal), the port, and the calling binary with its
// ancestors (nearest first). Binary is empty when the caller could not be
// attributed.
type DecideRequest struct {
	Host      string
	Port      int
	Binary    string
	Ancestors []string
}

// Scope is what the matched endpoint lets the SSRF dialer reach beyond
// public addresses: RFC 1918 / ULA destinations only for an exact
// (non-wildcard) host or inside AllowedIPs; with OnlyAllowedIPs (a
// hostless endpoint) nothing outside AllowedIPs.
type Scope struct {
	ExactHost      bool
	AllowedIPs     []netip.Prefix
	OnlyAllowedIPs bool
}

// Verdict is the engine's answer; Scope describes the matched endpoint
// when Allowed.
type Verdict struct {
	Allowed bool
	Entry   string // matched network_policies entry ("" when none)
	Reason  string // machine-readable reason (the engine's Reason.String())
	Audit   bool   // the endpoint's enforcement is audit (L7 violations logged, not blocked)
	Scope   Scope
	// L7Rules is set when the matched endpoint carries L7 rules
	// (protocol rest, access, rules or deny_rules). Forwarded http://
	// requests and every request of an inspected CONNECT tunnel are
	// checked against them (Inspector).
	L7Rules bool
	// Endpoint is the matched endpoint when Allowed (nil for fakes that
	// carry no L7 constraints).
	Endpoint *policy.Endpoint
	// EndpointID names the endpoint the decision rests on,
	// "ENTRY.endpoints[I]", refusals included when the engine names one
	// (a binary not allowed to reach it); "" when none. Endpoint status
	// is kept by it.
	EndpointID string
	// Inspector is the endpoint's protocol inspector when L7Rules, built
	// once for the generation; nil makes the proxy build one for the
	// request.
	Inspector l7.Inspector
}

// Decider is one compiled policy generation. Decide must be safe for
// concurrent use, must not block and must never resolve names.
type Decider interface {
	Decide(DecideRequest) Verdict
}

// Namer is implemented by a Decider that knows what its policy says
// about a DNS name, whatever the binary (CompileDecision's): the ports of
// the endpoints whose host selects the name (an exact host or a wildcard
// pattern) and the widest scope they give its addresses. Policy DNS
// answers exactly these names; a Decider without it names none.
type Namer interface {
	Name(name string) (ports []int, sc Scope, ok bool)
}

// CompileFunc compiles a validated policy into generation gen.
type CompileFunc func(p *policy.Policy, gen int64) (Decider, error)

// Dialer resolves host (unless it is a literal), classifies every
// address for the scope, and dials exactly a checked one within ctx. It
// returns the address it connected to. An SSRF refusal is a *DenyError.
type Dialer interface {
	DialContext(ctx context.Context, host string, port int, scope Scope) (net.Conn, netip.AddrPort, error)
}

// TunnelDialer is implemented by a Dialer that can chain CONNECT tunnels
// through an operator's upstream (corporate) proxy. The proxy dials every
// CONNECT tunnel through DialTunnel, and every transparent connection
// (which is what a CONNECT to its name would be) through DialPinned, when
// its Dialer has them; plain-HTTP forwarding always uses DialContext
// (direct).
type TunnelDialer interface {
	// DialTunnel resolves and checks host as DialContext does, then
	// connects directly or through the upstream proxy, and says which in
	// the Route. An SSRF refusal is a *DenyError, a failure of the
	// upstream proxy an *UpstreamProxyError.
	DialTunnel(ctx context.Context, host string, port int, scope Scope) (net.Conn, Route, error)
	// DialPinned is DialTunnel to addresses resolved before (a policy
	// DNS mapping's), each checked again for the scope; host is their
	// name (NO_PROXY matching, a CONNECT target by name).
	DialPinned(ctx context.Context, host string, port int, scope Scope, pinned []netip.Addr) (net.Conn, Route, error)
	// Redial opens another connection along a Route DialTunnel returned
	// for host (the same checked address, the same way): an inspected
	// tunnel's extra upstream connections.
	Redial(ctx context.Context, host string, r Route) (net.Conn, error)
}

// Route is how a tunnel's upstream connection was made.
type Route struct {
	// Addr is the checked address the tunnel reaches.
	Addr netip.AddrPort
	// Proxy is the upstream proxy's URL (never with a credential); ""
	// when no upstream proxy is configured.
	Proxy string
	// Target is the CONNECT target sent to the upstream proxy; "" when
	// the connection is direct.
	Target string
	// NoProxy is the NO_PROXY entry that made the connection direct
	// although an upstream proxy is configured ("" otherwise).
	NoProxy string
}

// Chained reports whether the connection goes through the upstream proxy.
func (r Route) Chained() bool { return r.Target != "" }

// UpstreamProxyError is a tunnel the upstream proxy did not open: not
// reachable, its TLS handshake failed, it refused the CONNECT (Status) or
// did not answer in time. Reason is the proxy's machine-readable reason,
// Detail a sentence for the client (no address of the proxy, no
// credential), Err the cause for events.
type UpstreamProxyError struct {
	Reason  string
	Status  int // the upstream proxy's answer; 0 when it gave none
	Timeout bool
	Detail  string
	Err     error
}

func (e *UpstreamProxyError) Error() string { return e.Err.Error() }
func (e *UpstreamProxyError) Unwrap() error { return e.Err }

// DenyError is an SSRF refusal: the destination resolved (or was a
// literal) in a range the guard never allows. Reason is the guard's
// machine-readable reason.
type DenyError struct{ Reason string }

func (e *DenyError) Error() string { return "ssrf: destination denied: " + e.Reason }

// Ancestor is one process above the caller.
type Ancestor struct {
	PID int
	Exe string
	// Code is set when it lost its binary's identity (Identity.Code).
	Code *ForeignCode
}

// ForeignCode says why a process lost its binary's identity: it maps
// executable code from a file the sandbox could have written (Reasons:
// attribution's Code* names), File naming the first such file.
type ForeignCode struct {
	Reasons []string
	File    string
}

// Identity is the process that owns the client socket of a connection.
type Identity struct {
	PID       int
	Exe       string
	SHA256    string     // hex sha256 of the executable
	Ancestors []Ancestor // nearest first
	// Connector is the process recorded when the socket connected, set
	// only when it differs from the holder above (the socket was handed
	// on). Both must be allowed; an empty Exe (no longer nameable)
	// denies.
	Connector *Ancestor
	// Backend names the attribution backend that answered ("proc",
	// "bpf", "bpf/fast"); events carry it.
	Backend string
	// Code is set when the caller lost its binary's identity: its
	// image maps code the sandbox could have written. It is decided as
	// an unknown binary, and what only Exe would have allowed is refused
	// with ReasonForeignCode and a Detection Finding.
	Code *ForeignCode

	// src is what the attributor answered, for its SendGuard.
	src any
}

// ErrAttributionIncomplete is matched (errors.Is) by an Attributor's
// error when it knows the socket's holder but has no record of the
// process that connected it (evicted, never written): the proxy refuses
// with ReasonAttributionIncomplete instead of deciding on the holder
// alone.
var ErrAttributionIncomplete = errors.New("attribution incomplete: no record of the socket's connector")

// IncompleteError is ErrAttributionIncomplete with the socket's holder
// (nil when unknown): events name it, the decision never uses it.
type IncompleteError struct {
	Holder *Identity
	Err    error
}

func (e *IncompleteError) Error() string { return e.Err.Error() }

// Is makes errors.Is(err, ErrAttributionIncomplete) true.
func (e *IncompleteError) Is(target error) bool { return target == ErrAttributionIncomplete }

// Attributor maps an accepted connection to the process that opened it.
// client is the peer address the proxy saw, local the address the client
// connected to (the proxy listener, or for the fence the original
// destination).
type Attributor interface {
	Lookup(ctx context.Context, client, local netip.AddrPort) (*Identity, error)
}

// SandboxPIDer is implemented by an Attributor that can name a host
// process by the pid it has in its own pid namespace (the sandbox's).
// Denials tell the agent that pid, never the host's: a host pid helps
// an agent aim pid reuse at the host pid space attribution keys on. It
// returns 0 when the process is gone.
type SandboxPIDer interface {
	SandboxPID(hostPID int) int
}

// SendGuard holds connections to their decided process after the
// decision. Guard binds the socket id was attributed from to id's
// process: from then on another sender is refused by the kernel, every
// later send on the connection too, and onViolation is called with the
// sender (from another goroutine). release ends the binding. An error
// means this connection cannot be held.
type SendGuard interface {
	Guard(id *Identity, onViolation func(SendViolation)) (release func(), err error)
}

// SendViolation is a send refused on a guarded connection: PID (host)
// and Exe ("" when no longer nameable; Comm then) name the real sender.
// Code is set when the sender is the decided process or its descendant
// but mapped foreign code after the decision (made on clean code).
type SendViolation struct {
	PID  int
	Exe  string
	Comm string
	Code *ForeignCode
}

// UDPAttributor is implemented by an Attributor that can also name the
// holder of a UDP socket (whose local address is client, sending to
// server): the sender of a policy DNS query.
type UDPAttributor interface {
	LookupUDP(ctx context.Context, client, server netip.AddrPort) (*Identity, error)
}

// AttributionCounter is implemented by an Attributor that counts its
// work (how sockets were found, lookups that failed); the counters appear
// in /status under "attribution" and in /metrics.
type AttributionCounter interface {
	AttributionCounters() map[string]uint64
}

// Pinner is the per-sandbox trust-on-first-use store of binary hashes.
// Pin records sha for exe on first use and returns a *MismatchError when a
// different hash was pinned before.
type Pinner interface {
	Pin(exe, sha256 string) error
}

// MismatchError is a trust-on-first-use violation.
type MismatchError struct {
	Exe    string
	Pinned string
	Seen   string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("binary %s: sha256 %s differs from the %s pinned on first use", e.Exe, e.Seen, e.Pinned)
}

// Limits are the per-connection bounds.
type Limits struct {
	// MaxHeadBytes bounds a request head (431 beyond). Default 8 KiB.
	MaxHeadBytes int
	// HeadTimeout bounds reading a request head (408 beyond). Default 10s.
	HeadTimeout time.Duration
	// ConnectTimeout bounds resolving and dialling upstream (504 beyond).
	// Default 10s.
	ConnectTimeout time.Duration
	// IdleTimeout closes a tunnel or forwarded request with no data in
	// either direction for this long. Default 15m.
	IdleTimeout time.Duration
	// MaxConns caps concurrent client connections over all listeners
	// (503 beyond on the explicit listener, RST on the fence). Default 4096.
	MaxConns int
	// DenyWindow is the rate-limit window for repeated denials of the
	// same (host, port, binary): the first is reported at once, later
	// ones at most once per window with a count. Default 10s.
	DenyWindow time.Duration
}

// Defaults.
const (
	DefaultHeadTimeout    = 10 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	DefaultIdleTimeout    = 15 * time.Minute
	DefaultMaxConns       = 4096
	DefaultDenyWindow     = 10 * time.Second
)

func (l *Limits) fill() error {
	if l.MaxHeadBytes == 0 {
		l.MaxHeadBytes = DefaultMaxHeadBytes
	}
	if l.HeadTimeout == 0 {
		l.HeadTimeout = DefaultHeadTimeout
	}
	if l.ConnectTimeout == 0 {
		l.ConnectTimeout = DefaultConnectTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.DenyWindow == 0 {
		l.DenyWindow = DefaultDenyWindow
	}
	switch {
	case l.MaxHeadBytes < 512 || l.MaxHeadBytes > 1<<20:
		return fmt.Errorf("proxy: max head bytes %d: want 512..1048576", l.MaxHeadBytes)
	case l.HeadTimeout < 0:
		return fmt.Errorf("proxy: head timeout %v is negative", l.HeadTimeout)
	case l.ConnectTimeout < 0:
		return fmt.Errorf("proxy: connect timeout %v is negative", l.ConnectTimeout)
	case l.IdleTimeout < 0:
		return fmt.Errorf("proxy: idle timeout %v is negative", l.IdleTimeout)
	case l.MaxConns < 1:
		return fmt.Errorf("proxy: max conns %d: want at least 1", l.MaxConns)
	case l.DenyWindow < 0:
		return fmt.Errorf("proxy: deny window %v is negative", l.DenyWindow)
	}
	return nil
}

// Config is what New needs.
type Config struct {
	// PolicyPath is the policy file; it is loaded by New and reloaded on
	// Reload and by Watch.
	PolicyPath string
	// Compile turns a validated policy into a Decider. Required.
	Compile CompileFunc
	// Admit, when set, vets every policy before it is compiled, at start
	// and on each reload (the host's ceiling, pkg/ceiling): an error
	// refuses the policy and keeps the generation in force.
	Admit func(*policy.Policy) error
	// Canonicalize turns a requested host (name or IP literal in any
	// spelling) into the canonical form the engine and dialer use, or
	// rejects it. Required.
	Canonicalize func(host string) (string, error)
	// Dialer is the SSRF-checking dialer. Required.
	Dialer Dialer
	// Attributor identifies callers; nil means standalone mode with every
	// caller unknown (Binary "" in decisions, so binary-scoped entries
	// never match).
	Attributor Attributor
	// Guard, when set, holds each attributed connection to the process
	// it is decided on: only it and its descendants may send on it
	// afterwards (enforced in the kernel). A connection it cannot hold is
	// refused (ReasonAttributionIncomplete). nil: no such enforcement
	// (the attribution backend has none on this host).
	Guard SendGuard
	// Pinner enforces trust on first use; nil disables the check.
	Pinner Pinner
	// OriginalDst recovers the destination of a fence-captured connection
	// (SO_ORIGINAL_DST). Required to serve a fence listener.
	OriginalDst func(*net.TCPConn) (netip.AddrPort, error)
	// Source and Events: where OCSF events go. Events nil means
	// ocsf.Discard; Source nil means a Source for sandbox "host".
	Source *ocsf.Source
	Events ocsf.Emitter
	// Logger receives operational logs (never secrets). nil discards.
	Logger *slog.Logger
	// BinaryNotes, when set, says what a loaded policy's listed binaries
	// really are on this host (egress-proxy wires binaries.Notes): a
	// script whose interpreter is what connects, a symlink, a general
	// interpreter, a missing path. Each note is logged once per proxy,
	// when the generation that brings it is swapped in: at warn when it is
	// Actionable, else at info; with QuietFirstNotes the first
	// generation's all at info (the supervisor that started this proxy for
	// a sandbox has said them already).
	BinaryNotes     func(*policy.Policy) []binaries.Note
	QuietFirstNotes bool
	Limits          Limits
	// CA mints the certificates of terminated TLS connections (tunnels
	// to inspected endpoints); nil refuses TLS on such tunnels.
	CA *tlsca.Authority
	// UpstreamRoots verifies upstream certificates on terminated
	// connections; nil means the system roots.
	UpstreamRoots *x509.CertPool
	// Credentials, when set, loads the credentials whose placeholders
	// the proxy resolves (package credentials), at start and at every
	// reload; an error at start stops New, a later one revokes every
	// credential until a load succeeds. CredentialsPath names the file
	// (events, logs; Watch reloads when it changes).
	Credentials     func() (*credentials.Store, error)
	CredentialsPath string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c *Config) check() error {
	var errs []error
	if c.PolicyPath == "" {
		errs = append(errs, errors.New("proxy: policy path is empty"))
	}
	if c.Compile == nil {
		errs = append(errs, errors.New("proxy: Compile is nil"))
	}
	if c.Canonicalize == nil {
		errs = append(errs, errors.New("proxy: Canonicalize is nil"))
	}
	if c.Dialer == nil {
		errs = append(errs, errors.New("proxy: Dialer is nil"))
	}
	if err := c.Limits.fill(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
