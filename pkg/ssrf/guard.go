package ssrf

import (
	"fmt"
	"net/netip"
	"slices"
)

// Reason says why Guard denied a destination. The proxy puts
// Reason.String() in its 403 body and in events.
type Reason uint8

// Deny reasons.
const (
	ReasonNone              Reason = iota // not denied
	ReasonInvalidAddress                  // zero address or an IPv6 zone
	ReasonInvalidPort                     // port 0
	ReasonUnspecified                     // 0.0.0.0/8, ::
	ReasonLoopback                        // 127/8, ::1
	ReasonLinkLocal                       // 169.254/16, fe80::/10
	ReasonMetadata                        // cloud metadata addresses
	ReasonMulticast                       // 224/4, ff00::/8
	ReasonBroadcast                       // 255.255.255.255
	ReasonReserved                        // 240/4 and other reserved space
	ReasonCGNAT                           // 100.64/10
	ReasonBenchmarking                    // 198.18/15, 2001:2::/48
	ReasonEmbeddedIPv4                    // IPv4-mapped/compatible, NAT64, 6to4, Teredo
	ReasonSelf                            // one of the proxy's own addresses
	ReasonControlPlanePort                // a control-plane port (etcd, kube-apiserver, kubelet)
	ReasonPrivateNotAllowed               // RFC 1918 / ULA for a wildcard host, outside allowed_ips
	ReasonNotInAllowedIPs                 // a hostless (allowed_ips-only) endpoint, address outside them
)

var reasonNames = [...]string{
	ReasonNone:              "none",
	ReasonInvalidAddress:    "invalid_address",
	ReasonInvalidPort:       "invalid_port",
	ReasonUnspecified:       "unspecified",
	ReasonLoopback:          "loopback",
	ReasonLinkLocal:         "link_local",
	ReasonMetadata:          "metadata",
	ReasonMulticast:         "multicast",
	ReasonBroadcast:         "broadcast",
	ReasonReserved:          "reserved",
	ReasonCGNAT:             "cgnat",
	ReasonBenchmarking:      "benchmarking",
	ReasonEmbeddedIPv4:      "embedded_ipv4",
	ReasonSelf:              "self",
	ReasonControlPlanePort:  "control_plane_port",
	ReasonPrivateNotAllowed: "private_not_allowed",
	ReasonNotInAllowedIPs:   "not_in_allowed_ips",
}

// String returns the reason's snake_case name.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// alwaysDenied maps the classes no policy can re-allow to their reason.
var alwaysDenied = map[Class]Reason{
	ClassInvalid:        ReasonInvalidAddress,
	ClassUnspecified:    ReasonUnspecified,
	ClassLoopback:       ReasonLoopback,
	ClassLinkLocal:      ReasonLinkLocal,
	ClassMetadata:       ReasonMetadata,
	ClassMulticast:      ReasonMulticast,
	ClassBroadcast:      ReasonBroadcast,
	ClassReserved:       ReasonReserved,
	ClassCGNAT:          ReasonCGNAT,
	ClassBenchmarking:   ReasonBenchmarking,
	ClassIPv4Mapped:     ReasonEmbeddedIPv4,
	ClassIPv4Compatible: ReasonEmbeddedIPv4,
	ClassNAT64:          ReasonEmbeddedIPv4,
	Class6to4:           ReasonEmbeddedIPv4,
	ClassTeredo:         ReasonEmbeddedIPv4,
}

// DenyError is the error Guard and Dialer return for a denied destination.
type DenyError struct {
	Reason Reason
	Addr   netip.AddrPort
	Class  Class
	// Embedded is the IPv4 address an embedding form carries (see
	// EmbeddedIPv4); invalid otherwise.
	Embedded netip.Addr
}

func (e *DenyError) Error() string {
	msg := fmt.Sprintf("ssrf: destination %s denied: %s", e.Addr, e.Reason)
	if e.Class.String() != e.Reason.String() {
		msg += fmt.Sprintf(" (address class %s", e.Class)
		if e.Embedded.IsValid() {
			msg += fmt.Sprintf(", embeds %s, class %s", e.Embedded, Classify(e.Embedded))
		}
		msg += ")"
	}
	return msg
}

// DefaultControlPlanePorts are denied on every address: etcd (2379, 2380),
// kube-apiserver (6443), kubelet (10250, 10255).
var DefaultControlPlanePorts = []int{2379, 2380, 6443, 10250, 10255}

// Scope is what a matched policy endpoint lets a connection reach beyond
// public addresses.
type Scope struct {
	// ExactHost is true when the endpoint's host is an exact name or IP
	// (not a wildcard): RFC 1918 and ULA addresses are then allowed.
	ExactHost bool
	// AllowedIPs are the endpoint's allowed_ips: RFC 1918 and ULA
	// addresses inside them are allowed for any host.
	AllowedIPs []netip.Prefix
	// OnlyAllowedIPs restricts every destination to AllowedIPs (an
	// endpoint with allowed_ips and no host).
	OnlyAllowedIPs bool
}

// Guard decides whether the proxy may connect to an address. The zero
// Guard applies the default control-plane ports and knows no own
// addresses. A Guard must not be modified while in use.
type Guard struct {
	// Self are the proxy's own addresses (its listeners' concrete
	// addresses, not 0.0.0.0); connecting to them is always denied.
	Self []netip.Addr
	// ControlPlanePorts are denied on every address. Nil means
	// DefaultControlPlanePorts; an empty non-nil slice denies none.
	ControlPlanePorts []int
}

// Check decides whether the proxy may connect to addr for an endpoint
// whose host is exact (exactHost) or a wildcard, with the endpoint's
// allowed_ips. It returns nil or a *DenyError.
//
// Always denied, whatever the policy says: the classes other than public,
// private and ULA (see Class), the embedding forms whatever they embed, the
// Guard's Self addresses and its control-plane ports. RFC 1918 and ULA
// addresses are allowed only when exactHost is true or the address lies in
// allowedIPs. allowedIPs never re-allow an always-denied address.
func (g *Guard) Check(addr netip.AddrPort, exactHost bool, allowedIPs []netip.Prefix) error {
	return g.CheckScope(addr, Scope{ExactHost: exactHost, AllowedIPs: allowedIPs})
}

// CheckScope is Check with the endpoint's full Scope.
func (g *Guard) CheckScope(addr netip.AddrPort, s Scope) error {
	a := addr.Addr()
	class := Classify(a)
	deny := func(r Reason) error {
		e := &DenyError{Reason: r, Addr: addr, Class: class}
		if class.Embeds() {
			e.Embedded, _ = EmbeddedIPv4(a)
		}
		return e
	}
	if !a.IsValid() || a.Zone() != "" {
		return deny(ReasonInvalidAddress)
	}
	if r, ok := alwaysDenied[class]; ok {
		return deny(r)
	}
	if addr.Port() == 0 {
		return deny(ReasonInvalidPort)
	}
	if g != nil {
		for _, self := range g.Self {
			if self.WithZone("").Unmap() == a.Unmap() {
				return deny(ReasonSelf)
			}
		}
	}
	ports := DefaultControlPlanePorts
	if g != nil && g.ControlPlanePorts != nil {
		ports = g.ControlPlanePorts
	}
	if slices.Contains(ports, int(addr.Port())) {
		return deny(ReasonControlPlanePort)
	}
	inAllowed := false
	for _, p := range s.AllowedIPs {
		if p.Contains(a) {
			inAllowed = true
			break
		}
	}
	if s.OnlyAllowedIPs {
		if !inAllowed {
			return deny(ReasonNotInAllowedIPs)
		}
		return nil
	}
	switch class {
	case ClassPublic:
		return nil
	case ClassPrivate, ClassULA:
		if s.ExactHost || inAllowed {
			return nil
		}
		return deny(ReasonPrivateNotAllowed)
	}
	return deny(ReasonReserved) // unreachable: every class is handled above
}
