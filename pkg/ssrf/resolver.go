package ssrf

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Resolver looks up the addresses of a host name.
type Resolver interface {
	LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error)
}

// SystemResolver resolves through net.DefaultResolver (the host's
// resolv.conf and nsswitch). IPv4 answers that Go's resolver returns in
// IPv4-mapped form are unmapped, so they are classified as the IPv4
// addresses a socket would reach.
type SystemResolver struct{}

// LookupNetIP implements Resolver.
func (SystemResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}

// MaxHostsFileSize bounds the hosts file NewHostsResolver reads.
const MaxHostsFileSize = 16 << 20

// HostsResolver answers from a static table in /etc/hosts format, for
// tests and air-gapped sites (--hosts-file). Names not in the table are not
// found; there is no fallback to DNS. Safe for concurrent use.
type HostsResolver struct {
	names map[string][]netip.Addr
}

// NewHostsResolver reads a hosts file: lines of "address name [alias...]",
// '#' starting a comment. Names are matched case-insensitively and without
// a trailing dot; a name listed on several lines gets every address, in
// file order. Any malformed line is an error naming the file and line.
func NewHostsResolver(path string) (*HostsResolver, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ssrf: hosts file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxHostsFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("ssrf: hosts file %s: %w", path, err)
	}
	if len(data) > MaxHostsFileSize {
		return nil, fmt.Errorf("ssrf: hosts file %s is larger than %d bytes", path, MaxHostsFileSize)
	}
	r, err := ParseHosts(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("ssrf: hosts file %s: %w", path, err)
	}
	return r, nil
}

// ParseHosts parses hosts-file text (see NewHostsResolver).
func ParseHosts(r io.Reader) (*HostsResolver, error) {
	h := &HostsResolver{names: map[string][]netip.Addr{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %q is not an IP address", line, fields[0])
		}
		if a.Zone() != "" {
			return nil, fmt.Errorf("line %d: %q: IPv6 zones are not supported", line, fields[0])
		}
		if len(fields) < 2 {
			return nil, fmt.Errorf("line %d: address %s has no host names", line, a)
		}
		for _, name := range fields[1:] {
			key := hostsKey(name)
			if key == "" {
				return nil, fmt.Errorf("line %d: %q is not a host name", line, name)
			}
			if !slices.Contains(h.names[key], a) {
				h.names[key] = append(h.names[key], a)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return h, nil
}

func hostsKey(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// LookupNetIP implements Resolver. A name that is not in the table yields a
// *net.DNSError with IsNotFound set.
func (h *HostsResolver) LookupNetIP(ctx context.Context, host string) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	addrs, ok := h.names[hostsKey(host)]
	if !ok || len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no such host in hosts file", Name: host, IsNotFound: true}
	}
	return slices.Clone(addrs), nil
}

// Len returns the number of names in the table.
func (h *HostsResolver) Len() int { return len(h.names) }
