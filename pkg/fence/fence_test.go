package fence

import (
	"net/netip"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	good := Config{Sandbox: "sbx-1", NetnsPath: "/proc/1/ns/net", ProxyPort: 3128, FencePort: 3129}
	if err := good.withDefaults().validate(); err != nil {
		t.Fatalf("good config rejected: %v", err)
	}
	ranged := good
	ranged.DNSPort, ranged.TransparentPort, ranged.TransparentPorts = 3131, 3132, 8
	if err := ranged.withDefaults().validate(); err != nil {
		t.Fatalf("transparent range 3132-3139 rejected: %v", err)
	}
	if d := good.withDefaults(); d.Pool != DefaultPool || d.StateDir != DefaultStateDir {
		t.Fatalf("defaults not applied: %+v", d)
	}
	cases := []struct {
		field string
		mod   func(*Config)
	}{
		{"Sandbox", func(c *Config) { c.Sandbox = "" }},
		{"Sandbox", func(c *Config) { c.Sandbox = "../etc" }},
		{"Sandbox", func(c *Config) { c.Sandbox = "UPPER" }},
		{"NetnsPath", func(c *Config) { c.NetnsPath = "" }},
		{"Pool", func(c *Config) { c.Pool = netip.MustParsePrefix("2001:db8::/64") }},
		{"Pool", func(c *Config) { c.Pool = netip.MustParsePrefix("10.0.0.0/31") }},
		{"Pool", func(c *Config) { c.Pool = netip.MustParsePrefix("10.0.0.1/16") }},
		{"ProxyPort", func(c *Config) { c.ProxyPort = 0 }},
		{"FencePort", func(c *Config) { c.FencePort = 0 }},
		{"FencePort", func(c *Config) { c.FencePort = c.ProxyPort }},
		{"StateDir", func(c *Config) { c.StateDir = "relative/dir" }},
		{"TransparentPorts", func(c *Config) { c.TransparentPorts = 8 }},
		{"TransparentPorts", func(c *Config) { c.TransparentPort, c.TransparentPorts = 3132, MaxTransparentPorts+1 }},
		{"TransparentPorts", func(c *Config) { c.TransparentPort, c.TransparentPorts = 65530, 8 }},
		{"TransparentPort", func(c *Config) { c.TransparentPort = c.FencePort }},
		{"TransparentPort", func(c *Config) { c.TransparentPort, c.TransparentPorts = 3120, 9 }},
		{"TransparentPort", func(c *Config) { c.TransparentPort, c.TransparentPorts = 3125, 8 }},
		{"DNSPort", func(c *Config) { c.TransparentPort, c.TransparentPorts, c.DNSPort = 3130, 8, 3137 }},
	}
	for _, tc := range cases {
		c := good
		tc.mod(&c)
		err := c.withDefaults().validate()
		if err == nil {
			t.Errorf("%s: bad value accepted: %+v", tc.field, c)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error does not name the field: %v", tc.field, err)
		}
	}
}

func TestNames(t *testing.T) {
	a, b := HostIfName("sbx-a"), HostIfName("sbx-b")
	if a == b {
		t.Fatal("different sandboxes share a link name")
	}
	if a != HostIfName("sbx-a") {
		t.Fatal("link name not deterministic")
	}
	long := HostIfName(strings.Repeat("x", 63))
	for _, n := range []string{a, b, long} {
		if len(n) > 15 || !strings.HasPrefix(n, "pal") || !strings.HasSuffix(n, "h") || len(n) != 12 {
			t.Errorf("link name %q: want pal<8 hex>h within IFNAMSIZ", n)
		}
	}
	if TableName("sbx-a") != "palisade-sbx-a" {
		t.Fatalf("table name %q", TableName("sbx-a"))
	}
}

func TestAllocate(t *testing.T) {
	pool := netip.MustParsePrefix("10.200.0.0/16")
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	cases := []struct {
		used []netip.Prefix
		want string
	}{
		{nil, "10.200.0.0/30"},
		{[]netip.Prefix{p("10.200.0.0/30")}, "10.200.0.4/30"},
		{[]netip.Prefix{p("10.200.0.0/30"), p("10.200.0.8/30")}, "10.200.0.4/30"},
		// A host address (or route) anywhere inside a /30 blocks it.
		{[]netip.Prefix{p("10.200.0.2/32"), p("10.200.0.5/32")}, "10.200.0.8/30"},
		// A host network overlapping the pool blocks all of its /30s.
		{[]netip.Prefix{p("10.200.0.0/24")}, "10.200.1.0/30"},
		{[]netip.Prefix{p("10.0.0.0/8")}, ""},
	}
	for _, tc := range cases {
		got, err := allocate(pool, tc.used)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), "exhausted") {
				t.Errorf("used %v: got %v, %v; want exhausted", tc.used, got, err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("used %v: got %v, %v; want %s", tc.used, got, err, tc.want)
		}
	}
	// Fill a /28 completely: 4 distinct /30s, then exhaustion.
	small := p("10.9.0.0/28")
	var used []netip.Prefix
	for i := 0; i < 4; i++ {
		got, err := allocate(small, used)
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		for _, u := range used {
			if u.Overlaps(got) {
				t.Fatalf("allocation %d: %s overlaps %s", i, got, u)
			}
		}
		used = append(used, got)
	}
	if _, err := allocate(small, used); err == nil {
		t.Fatal("a full pool allocated a fifth /30")
	}
	// The top of the address space does not wrap around.
	top := p("255.255.255.252/30")
	if got, err := allocate(top, nil); err != nil || got != top {
		t.Fatalf("top /30: %v %v", got, err)
	}
	if _, err := allocate(top, []netip.Prefix{top}); err == nil {
		t.Fatal("full top /30 allocated again")
	}
	h, s := hostAndSandbox(p("10.200.0.4/30"))
	if h.String() != "10.200.0.5" || s.String() != "10.200.0.6" {
		t.Fatalf("host %s sandbox %s", h, s)
	}
}
