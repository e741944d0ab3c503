package ssrf

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestGuardCheck(t *testing.T) {
	g := &Guard{Self: []netip.Addr{netip.MustParseAddr("10.200.0.1"), netip.MustParseAddr("2001:db8::53")}}
	everything := pfx("0.0.0.0/0", "::/0")
	tests := []struct {
		name    string
		addr    string
		exact   bool
		allowed []netip.Prefix
		only    bool
		want    Reason
	}{
		// Public, TEST-NET included, for any host.
		{"public wildcard", "198.51.100.7:443", false, nil, false, ReasonNone},
		{"public v6 wildcard", "[2001:db8::1]:443", false, nil, false, ReasonNone},
		{"testnet1", "192.0.2.1:80", false, nil, false, ReasonNone},
		{"testnet3", "203.0.113.9:80", false, nil, false, ReasonNone},
		// Always denied, even for exact hosts with allowed_ips 0/0.
		{"unspecified", "0.0.0.0:80", true, everything, false, ReasonUnspecified},
		{"this network", "0.1.2.3:80", true, everything, false, ReasonUnspecified},
		{"unspecified v6", "[::]:80", true, everything, false, ReasonUnspecified},
		{"loopback", "127.0.0.1:80", true, everything, false, ReasonLoopback},
		{"loopback high", "127.9.9.9:80", true, everything, false, ReasonLoopback},
		{"loopback v6", "[::1]:80", true, everything, false, ReasonLoopback},
		{"link-local", "169.254.10.10:80", true, everything, false, ReasonLinkLocal},
		{"link-local v6", "[fe80::1]:80", true, everything, false, ReasonLinkLocal},
		{"metadata aws", "169.254.169.254:80", true, everything, false, ReasonMetadata},
		{"metadata aws v6", "[fd00:ec2::254]:80", true, everything, false, ReasonMetadata},
		{"metadata alibaba", "100.100.100.200:80", true, everything, false, ReasonMetadata},
		{"multicast", "224.0.0.251:5353", true, everything, false, ReasonMulticast},
		{"multicast v6", "[ff02::fb]:5353", true, everything, false, ReasonMulticast},
		{"broadcast", "255.255.255.255:80", true, everything, false, ReasonBroadcast},
		{"reserved", "240.1.2.3:80", true, everything, false, ReasonReserved},
		{"cgnat", "100.64.1.1:80", true, everything, false, ReasonCGNAT},
		{"benchmarking", "198.18.0.1:80", true, everything, false, ReasonBenchmarking},
		{"benchmarking v6", "[2001:2::1]:80", true, everything, false, ReasonBenchmarking},
		{"mapped loopback", "[::ffff:127.0.0.1]:80", true, everything, false, ReasonEmbeddedIPv4},
		{"mapped public", "[::ffff:198.51.100.7]:80", true, everything, false, ReasonEmbeddedIPv4},
		{"compatible", "[::198.51.100.7]:80", true, everything, false, ReasonEmbeddedIPv4},
		{"nat64 metadata", "[64:ff9b::a9fe:a9fe]:80", true, everything, false, ReasonEmbeddedIPv4},
		{"nat64 local-use", "[64:ff9b:1::a00:1]:80", true, everything, false, ReasonEmbeddedIPv4},
		{"6to4 loopback", "[2002:7f00:1::1]:80", true, everything, false, ReasonEmbeddedIPv4},
		{"teredo", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", true, everything, false, ReasonEmbeddedIPv4},
		{"self", "10.200.0.1:3128", true, everything, false, ReasonSelf},
		{"self v6", "[2001:db8::53]:443", false, nil, false, ReasonSelf},
		{"etcd", "198.51.100.7:2379", true, everything, false, ReasonControlPlanePort},
		{"etcd peer", "198.51.100.7:2380", true, nil, false, ReasonControlPlanePort},
		{"apiserver", "198.51.100.7:6443", false, nil, false, ReasonControlPlanePort},
		{"kubelet", "[2001:db8::1]:10250", false, nil, false, ReasonControlPlanePort},
		{"kubelet ro", "198.51.100.7:10255", false, nil, false, ReasonControlPlanePort},
		{"port 0", "198.51.100.7:0", false, nil, false, ReasonInvalidPort},
		{"zone", "[2001:db8::1%eth0]:80", true, everything, false, ReasonInvalidAddress},
		// Private and ULA: exact host, or inside allowed_ips.
		{"private exact", "10.1.2.3:443", true, nil, false, ReasonNone},
		{"private wildcard", "10.1.2.3:443", false, nil, false, ReasonPrivateNotAllowed},
		{"private wildcard allowed", "10.1.2.3:443", false, pfx("10.0.0.0/8"), false, ReasonNone},
		{"private wildcard other allowed", "10.1.2.3:443", false, pfx("192.168.0.0/16", "10.1.2.4/32"), false, ReasonPrivateNotAllowed},
		{"172.16 wildcard", "172.20.0.1:443", false, nil, false, ReasonPrivateNotAllowed},
		{"192.168 wildcard", "192.168.0.10:443", false, nil, false, ReasonPrivateNotAllowed},
		{"ula exact", "[fd12::1]:443", true, nil, false, ReasonNone},
		{"ula wildcard", "[fd12::1]:443", false, nil, false, ReasonPrivateNotAllowed},
		{"ula wildcard allowed", "[fd12::1]:443", false, pfx("fd12::/16"), false, ReasonNone},
		// Hostless endpoints: only allowed_ips.
		{"only allowed inside", "10.1.2.3:443", false, pfx("10.1.0.0/16"), true, ReasonNone},
		{"only allowed public inside", "198.51.100.7:443", false, pfx("198.51.100.0/24"), true, ReasonNone},
		{"only allowed public outside", "203.0.113.9:443", false, pfx("198.51.100.0/24"), true, ReasonNotInAllowedIPs},
		{"only allowed never loopback", "127.0.0.1:443", false, pfx("127.0.0.0/8"), true, ReasonLoopback},
		{"only allowed never cgnat", "100.64.0.1:443", false, pfx("100.64.0.0/10"), true, ReasonCGNAT},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ap := netip.MustParseAddrPort(tc.addr)
			err := g.CheckScope(ap, Scope{ExactHost: tc.exact, AllowedIPs: tc.allowed, OnlyAllowedIPs: tc.only})
			if tc.want == ReasonNone {
				if err != nil {
					t.Fatalf("CheckScope(%s) = %v; want allowed", ap, err)
				}
				return
			}
			var de *DenyError
			if !errors.As(err, &de) {
				t.Fatalf("CheckScope(%s) = %v; want *DenyError %s", ap, err, tc.want)
			}
			if de.Reason != tc.want || de.Addr != ap {
				t.Fatalf("CheckScope(%s) = reason %s addr %s; want %s", ap, de.Reason, de.Addr, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want.String()) || !strings.Contains(err.Error(), ap.String()) {
				t.Fatalf("error %q does not name the reason and address", err)
			}
			if !tc.only {
				// Check is CheckScope without OnlyAllowedIPs.
				if err2 := g.Check(ap, tc.exact, tc.allowed); err2 == nil || err2.Error() != err.Error() {
					t.Fatalf("Check = %v; CheckScope = %v", err2, err)
				}
			}
		})
	}
}

func TestDenyErrorEmbedded(t *testing.T) {
	err := (&Guard{}).Check(netip.MustParseAddrPort("[2002:7f00:1::1]:80"), true, nil)
	var de *DenyError
	if !errors.As(err, &de) || de.Class != Class6to4 || de.Embedded != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("got %#v", err)
	}
	if !strings.Contains(err.Error(), "embeds 127.0.0.1, class loopback") {
		t.Fatalf("error %q does not name the embedded address", err)
	}
}

func TestGuardControlPlanePorts(t *testing.T) {
	ap := netip.MustParseAddrPort("198.51.100.7:6443")
	var nilGuard *Guard
	if err := nilGuard.Check(ap, true, nil); err == nil {
		t.Error("nil Guard allowed port 6443")
	}
	if err := (&Guard{ControlPlanePorts: []int{}}).Check(ap, true, nil); err != nil {
		t.Errorf("empty ControlPlanePorts still denied: %v", err)
	}
	custom := &Guard{ControlPlanePorts: []int{8443}}
	if err := custom.Check(netip.MustParseAddrPort("198.51.100.7:8443"), true, nil); err == nil {
		t.Error("custom control-plane port allowed")
	}
	if err := custom.Check(ap, true, nil); err != nil {
		t.Errorf("custom list still denies 6443: %v", err)
	}
	if err := (&Guard{ControlPlanePorts: []int{}}).Check(netip.MustParseAddrPort("127.0.0.1:6443"), true, nil); err == nil {
		t.Error("empty ControlPlanePorts re-allowed loopback")
	}
}

// The proxy's own IPv4 address is denied in its IPv4-mapped spelling too
// (by the embedding rule) and Self given in mapped form matches plain IPv4.
func TestGuardSelfMapped(t *testing.T) {
	g := &Guard{Self: []netip.Addr{netip.MustParseAddr("::ffff:198.51.100.1")}}
	err := g.Check(netip.MustParseAddrPort("198.51.100.1:443"), true, nil)
	var de *DenyError
	if !errors.As(err, &de) || de.Reason != ReasonSelf {
		t.Fatalf("got %v; want self", err)
	}
}
