package upstreamproxy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func aps(port int, addrs ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range addrs {
		out = append(out, netip.AddrPortFrom(netip.MustParseAddr(a), uint16(port)))
	}
	return out
}

func TestParseNoProxyErrors(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "must not be empty",
		"a.test,":           `entry 2 "": is empty`,
		",a.test":           `entry 1 "": is empty`,
		"a.test, ,b.test":   `entry 2 "": is empty`,
		"*":                 "every destination",
		"a.test:0":          "port that is not 1-65535",
		"a.test:http":       "port that is not 1-65535",
		"a.test:0443":       "port that is not 1-65535",
		"10.0.0.0/33":       "not an address prefix",
		"10.0.0.0/8:99999":  "port that is not 1-65535",
		"2001:db8::1:443":   "", // a valid bare IPv6 address
		"[2001:db8::1":      "'[' without ']'",
		"[2001:db8::1]443":  "not :PORT",
		"[10.0.0.1]:443":    "not an IPv6 address in brackets",
		"2001:db8::/32:x":   "port that is not 1-65535",
		"0177.0.0.1":        "non-standard spelling",
		"2130706433":        "non-standard spelling",
		"exa mple.test":     "neither a DNS name",
		"a..test":           "neither a DNS name",
		"*.":                "neither a DNS name",
		"a.*.test":          "neither a DNS name",
		"fe80::1%eth0":      "IPv6 zone",
		"a.test:443:1":      "in brackets",
		"[fe80::1%eth0]:22": "not an IPv6 address in brackets",
	} {
		_, err := ParseNoProxy(in)
		if want == "" {
			if err != nil {
				t.Errorf("ParseNoProxy(%q): %v", in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseNoProxy(%q) = %v; want an error containing %q", in, err, want)
		}
	}
}

// TestNoProxyRoute: NO_PROXY is port-aware (an entry with :PORT bypasses
// only that port) and resolution-aware (an address or prefix entry
// matches a name through the addresses it resolved to, and only the
// addresses it contains are dialled directly); loopback is always direct;
// an IP literal never matches a name entry.
func TestNoProxyRoute(t *testing.T) {
	np, err := ParseNoProxy(" corp.test , .sub.test,*.wild.test, svc.test:8443, 198.51.100.7, 203.0.113.0/24:443, [2001:db8::7]:22, 2001:db8:1::/48, ::ffff:192.0.2.9")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		host   string
		addrs  []netip.AddrPort
		direct []netip.AddrPort
		entry  string
	}{
		{"name", "corp.test", aps(443, "198.51.100.1", "198.51.100.2"), aps(443, "198.51.100.1", "198.51.100.2"), "corp.test"},
		{"subdomain of a name", "git.corp.test", aps(443, "198.51.100.1"), aps(443, "198.51.100.1"), "corp.test"},
		{"not a suffix match", "notcorp.test", aps(443, "198.51.100.1"), nil, ""},
		{"dot entry: subdomain", "a.sub.test", aps(443, "198.51.100.1"), aps(443, "198.51.100.1"), ".sub.test"},
		{"dot entry: not the name itself", "sub.test", aps(443, "198.51.100.1"), nil, ""},
		{"star entry: subdomain", "x.wild.test", aps(443, "198.51.100.1"), aps(443, "198.51.100.1"), "*.wild.test"},
		{"star entry: not the name itself", "wild.test", aps(443, "198.51.100.1"), nil, ""},
		{"port-qualified name, its port", "svc.test", aps(8443, "198.51.100.1"), aps(8443, "198.51.100.1"), "svc.test:8443"},
		{"port-qualified name, another port", "svc.test", aps(443, "198.51.100.1"), nil, ""},
		{"address entry, literal", "198.51.100.7", aps(443, "198.51.100.7"), aps(443, "198.51.100.7"), "198.51.100.7"},
		{"address entry through a name", "app.test", aps(443, "198.51.100.7"), aps(443, "198.51.100.7"), "198.51.100.7"},
		{"only the addresses the entry holds", "app.test", aps(443, "198.51.100.8", "198.51.100.7", "203.0.113.5", "198.51.100.9"),
			aps(443, "198.51.100.7", "203.0.113.5"), "198.51.100.7"},
		{"port-qualified prefix, its port", "app.test", aps(443, "203.0.113.5"), aps(443, "203.0.113.5"), "203.0.113.0/24:443"},
		{"port-qualified prefix, another port", "app.test", aps(80, "203.0.113.5"), nil, ""},
		{"bracketed IPv6 with port", "2001:db8::7", aps(22, "2001:db8::7"), aps(22, "2001:db8::7"), "[2001:db8::7]:22"},
		{"bracketed IPv6, another port", "2001:db8::7", aps(443, "2001:db8::7"), nil, ""},
		{"IPv6 prefix through a name", "v6.test", aps(443, "2001:db8:1::5", "2001:db8:2::5"), aps(443, "2001:db8:1::5"), "2001:db8:1::/48"},
		{"mapped entry matches the IPv4 address", "m.test", aps(443, "192.0.2.9"), aps(443, "192.0.2.9"), "::ffff:192.0.2.9"},
		{"IP literal never matches a name entry", "198.51.100.1", aps(443, "198.51.100.1"), nil, ""},
		{"nothing matches", "example.test", aps(443, "198.51.100.1"), nil, ""},
		{"loopback address", "lo.test", aps(443, "127.0.0.5", "198.51.100.1"), aps(443, "127.0.0.5"), "127.0.0.0/8"},
		{"loopback v6", "::1", aps(443, "::1"), aps(443, "::1"), "::1"},
		{"localhost", "localhost", aps(443, "198.51.100.1"), aps(443, "198.51.100.1"), "localhost"},
		{"no addresses", "corp.test", nil, nil, ""},
	} {
		direct, entry := np.Route(c.host, c.addrs)
		if !slices.Equal(direct, c.direct) || entry != c.entry {
			t.Errorf("%s: Route(%s, %v) = %v %q; want %v %q", c.name, c.host, c.addrs, direct, entry, c.direct, c.entry)
		}
	}
	// Without a list only loopback is direct.
	var none *NoProxy
	if d, _ := none.Route("corp.test", aps(443, "198.51.100.1")); d != nil {
		t.Errorf("no list: %v direct", d)
	}
	if d, e := none.Route("x.test", aps(443, "127.0.0.1")); len(d) != 1 || e != "127.0.0.0/8" {
		t.Errorf("no list, loopback: %v %q", d, e)
	}
}
