package attribution

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// formatHexAddrPort writes ap the way the kernel's tcp tables do, for
// order (the reverse of parseHexAddrPort). v6 forces the tcp6 form.
func formatHexAddrPort(ap netip.AddrPort, v6 bool, order binary.ByteOrder) string {
	var sb strings.Builder
	if !v6 && ap.Addr().Is4() {
		a := ap.Addr().As4()
		fmt.Fprintf(&sb, "%08X", order.Uint32(a[:]))
	} else {
		a := ap.Addr().As16()
		for k := 0; k < 4; k++ {
			fmt.Fprintf(&sb, "%08X", order.Uint32(a[k*4:]))
		}
	}
	fmt.Fprintf(&sb, ":%04X", ap.Port())
	return sb.String()
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseSockLineGolden(t *testing.T) {
	le := binary.LittleEndian
	type want struct {
		local, remote string
		state         uint8
		uid           uint32
		inode         uint64
	}
	cases := map[string][]want{
		"tcp.golden": {
			{"127.0.0.1:9090", "0.0.0.0:0", 0x0A, 0, 893513},
			{"127.0.0.1:9090", "127.0.0.1:46658", 1, 0, 0},
			{"127.0.0.1:46658", "127.0.0.1:9090", 1, 0, 893514},
			{"198.51.100.2:40000", "198.51.100.1:3128", 1, 1000, 900001},
			{"198.51.100.2:40001", "198.51.100.1:3128", 6, 0, 0},
		},
		"tcp6.golden": {
			{"[::]:8080", "[::]:0", 0x0A, 0, 893510},
			// Dual-stack socket: IPv4-mapped addresses come back unmapped.
			{"127.0.0.1:45498", "127.0.0.1:8080", 1, 0, 893511},
			{"[2001:db8::1]:41328", "[2001:db8::1]:8080", 1, 0, 893512},
			{"[2001:db8::1]:8080", "[2001:db8::1]:41328", 1, 0, 0},
			{"127.0.0.1:8080", "127.0.0.1:45498", 1, 0, 0},
		},
	}
	for file, wants := range cases {
		lines := strings.Split(strings.TrimRight(string(readGolden(t, file)), "\n"), "\n")
		if _, err := parseSockLine([]byte(lines[0]), le); err != errHeader {
			t.Errorf("%s header: err %v, want errHeader", file, err)
		}
		if len(lines)-1 != len(wants) {
			t.Fatalf("%s: %d rows, test expects %d", file, len(lines)-1, len(wants))
		}
		for i, w := range wants {
			e, err := parseSockLine([]byte(lines[i+1]), le)
			if err != nil {
				t.Errorf("%s row %d: %v", file, i, err)
				continue
			}
			got := want{e.Local.String(), e.Remote.String(), e.State, e.UID, e.Inode}
			if got != w {
				t.Errorf("%s row %d:\n got %+v\nwant %+v", file, i, got, w)
			}
		}
	}
}

func TestFindSocket(t *testing.T) {
	le := binary.LittleEndian
	tcp, tcp6 := readGolden(t, "tcp.golden"), readGolden(t, "tcp6.golden")
	ap := netip.MustParseAddrPort
	cases := []struct {
		name          string
		table         []byte
		client, proxy string
		inode         uint64
		found         bool
	}{
		{"v4 established", tcp, "198.51.100.2:40000", "198.51.100.1:3128", 900001, true},
		{"v4 loopback client side", tcp, "127.0.0.1:46658", "127.0.0.1:9090", 893514, true},
		// The server side of the same connection is (9090 -> 46658): the
		// client tuple must not match it, nor the listener.
		{"direction matters", tcp, "127.0.0.1:9090", "127.0.0.1:46658", 0, true},
		{"time-wait has no inode", tcp, "198.51.100.2:40001", "198.51.100.1:3128", 0, true},
		{"wrong port", tcp, "198.51.100.2:40002", "198.51.100.1:3128", 0, false},
		{"wrong proxy", tcp, "198.51.100.2:40000", "198.51.100.9:3128", 0, false},
		{"v4-mapped in tcp6", tcp6, "127.0.0.1:45498", "127.0.0.1:8080", 893511, true},
		{"v6", tcp6, "[2001:db8::1]:41328", "[2001:db8::1]:8080", 893512, true},
		{"v6 absent", tcp6, "[2001:db8::2]:41328", "[2001:db8::1]:8080", 0, false},
	}
	for _, c := range cases {
		inode, found, err := findSocket(c.table, ap(c.client), ap(c.proxy), le)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if inode != c.inode || found != c.found {
			t.Errorf("%s: inode %d found %v, want %d %v", c.name, inode, found, c.inode, c.found)
		}
	}
}

func TestFindSocketRejectsMalformedRows(t *testing.T) {
	le := binary.LittleEndian
	good := "   0: 026433C6:9C40 016433C6:0C38 01 00000000:00000000 00:00000000 00000000  1000        0 900001 2 0 20 0 0 10 -1"
	bad := map[string]string{
		"short row":       "   0: 026433C6:9C40 016433C6:0C38 01",
		"odd address":     strings.Replace(good, "026433C6:", "026433C:", 1),
		"5-digit port":    strings.Replace(good, ":9C40", ":9C400", 1),
		"non-hex address": strings.Replace(good, "026433C6", "0264ZZC6", 1),
		"no colon":        strings.Replace(good, "026433C6:9C40", "026433C69C40", 1),
		"non-decimal ino": strings.Replace(good, " 900001 ", " 9x0001 ", 1),
		"huge inode":      strings.Replace(good, " 900001 ", " 999999999999999999999 ", 1),
		"uid > 32 bits":   strings.Replace(good, "  1000 ", "  4294967296 ", 1),
		"bad slot":        strings.Replace(good, "0:", "0", 1),
	}
	client, proxy := netip.MustParseAddrPort("198.51.100.2:40000"), netip.MustParseAddrPort("198.51.100.1:3128")
	if inode, _, err := findSocket([]byte(good+"\n"), client, proxy, le); err != nil || inode != 900001 {
		t.Fatalf("good row: inode %d err %v", inode, err)
	}
	for name, row := range bad {
		_, _, err := findSocket([]byte("  sl  local_address\n"+row+"\n"), client, proxy, le)
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: err %v, want an error naming line 2", name, err)
		}
	}
}

func TestHexAddrPortRoundTrip(t *testing.T) {
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, s := range []string{"198.51.100.2:40000", "0.0.0.0:0", "255.255.255.255:65535", "[2001:db8::1]:443", "[fe80::1:2:3:4]:1", "[::]:0"} {
			ap := netip.MustParseAddrPort(s)
			got, err := parseHexAddrPort([]byte(formatHexAddrPort(ap, false, order)), order)
			if err != nil || got != ap {
				t.Errorf("%v %s: got %v, %v", order, s, got, err)
			}
			if ap.Addr().Is4() {
				mapped := netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
				got, err := parseHexAddrPort([]byte(formatHexAddrPort(mapped, true, order)), order)
				if err != nil || got != ap {
					t.Errorf("%v %s as v4-mapped: got %v, %v", order, s, got, err)
				}
			}
		}
	}
	// Byte order matters: the same text is a different address big-endian.
	le, _ := parseHexAddrPort([]byte("0100007F:0050"), binary.LittleEndian)
	be, _ := parseHexAddrPort([]byte("0100007F:0050"), binary.BigEndian)
	if le.String() != "127.0.0.1:80" || be.String() != "1.0.0.127:80" {
		t.Errorf("little-endian %v, big-endian %v", le, be)
	}
}

func TestParseStatPPid(t *testing.T) {
	cases := map[string]int{
		"1234 (bash) S 1200 1234 1234 0 -1 4194560":      1200,
		"77 (a) b) (c) R 5 77 77 0":                      5,
		"9 (with space ) x) S 0 0 0":                     0,
		"4242 (sleep) Z 1 4242 4242 0 -1 4227084 75 0 0": 1,
	}
	for in, want := range cases {
		got, err := parseStatPPid([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1 (x", "1 (x) S", "1 (x) S -3", "1 (x) S abc"} {
		if _, err := parseStatPPid([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestParseStatStart(t *testing.T) {
	line := "4242 (a) b) S 1 4242 4242 0 -1 4194560 75 0 0 0 0 0 0 0 20 0 1 0 987654 1024 1"
	if got, err := parseStatStart([]byte(line)); err != nil || got != 987654 {
		t.Errorf("%q: %d %v, want 987654", line, got, err)
	}
	for _, in := range []string{"", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 x 1"} {
		if _, err := parseStatStart([]byte(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// FuzzParseSockLine: the parser never panics, and whatever it accepts
// formats back to the same addresses.
func FuzzParseSockLine(f *testing.F) {
	for _, file := range []string{"tcp.golden", "tcp6.golden"} {
		b, err := os.ReadFile("testdata/" + file)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			f.Add(line)
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := parseSockLine(line, binary.LittleEndian)
		if err != nil {
			return
		}
		for _, ap := range []netip.AddrPort{e.Local, e.Remote} {
			if !ap.IsValid() {
				t.Fatalf("accepted %q with invalid address %v", line, ap)
			}
			for _, v6 := range []bool{false, true} {
				back, err := parseHexAddrPort([]byte(formatHexAddrPort(ap, v6, binary.LittleEndian)), binary.LittleEndian)
				if err != nil || back != ap {
					t.Fatalf("%v (v6=%v) round-trips to %v, %v", ap, v6, back, err)
				}
			}
		}
	})
}
