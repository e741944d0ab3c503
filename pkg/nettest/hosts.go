package nettest

import (
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// FormatHosts renders names (host name -> IP address) in /etc/hosts
// format, one "address<TAB>name" line per name, sorted by name. Names are
// lowercased; a name must be non-empty and free of whitespace and '#',
// and an address must parse as an IPv4 or IPv6 address.
func FormatHosts(names map[string]string) ([]byte, error) {
	lower := make(map[string]netip.Addr, len(names))
	keys := make([]string, 0, len(names))
	for n, addr := range names {
		if n == "" || strings.ContainsAny(n, " \t\r\n#") {
			return nil, fmt.Errorf("nettest: hosts: name %q: want a host name without spaces or '#'", n)
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return nil, fmt.Errorf("nettest: hosts: %s: address %q: %w", n, addr, err)
		}
		l := strings.ToLower(n)
		if _, dup := lower[l]; dup {
			return nil, fmt.Errorf("nettest: hosts: name %q given twice (names are case-insensitive)", l)
		}
		lower[l] = a.Unmap()
		keys = append(keys, l)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by palisade nettest\n")
	for _, n := range keys {
		fmt.Fprintf(&b, "%s\t%s\n", lower[n], n)
	}
	return []byte(b.String()), nil
}

// WriteHostsFile writes names in /etc/hosts format to path atomically.
func WriteHostsFile(path string, names map[string]string) error {
	b, err := FormatHosts(names)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, b, 0o644)
}

// tempHostsFile writes names to a new file in dir and returns its path.
func tempHostsFile(dir string, names map[string]string) (string, error) {
	f, err := os.CreateTemp(dir, "hosts-*")
	if err != nil {
		return "", err
	}
	p := f.Name()
	f.Close()
	if err := WriteHostsFile(p, names); err != nil {
		os.Remove(p)
		return "", err
	}
	return p, nil
}
