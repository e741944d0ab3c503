//go:build linux

package fence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/palisade-sandbox/palisade/pkg/nsthread"
	"golang.org/x/sys/unix"
)

// Setup builds the fence for one sandbox (see the package comment) and
// returns it. The sandbox namespace must be fresh (only lo), the sandbox
// name must have no leftover fence (see Collect), and the caller must be
// root in the host namespace. On any error everything Setup created is
// removed again and the error names the step that failed.
func Setup(ctx context.Context, cfg Config) (_ *Fence, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	wrap := func(step string, err error) error {
		return fmt.Errorf("fence: sandbox %q: %s: %w", cfg.Sandbox, step, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, wrap("setup", err)
	}
	hostNs, err := openHostNs(cfg.HostNetns)
	if err != nil {
		return nil, wrap("open host netns", err)
	}
	keepHostNs := false
	defer func() {
		if !keepHostNs {
			hostNs.Close()
		}
	}()
	sbxNs, err := netns.GetFromPath(cfg.NetnsPath)
	if err != nil {
		return nil, wrap("NetnsPath "+cfg.NetnsPath, err)
	}
	defer sbxNs.Close()
	if sbxNs.Equal(hostNs) {
		return nil, wrap("NetnsPath "+cfg.NetnsPath, errors.New("is the host network namespace; refusing to fence the host"))
	}
	hostH, err := netlink.NewHandleAt(hostNs)
	if err != nil {
		return nil, wrap("netlink handle in host netns", err)
	}
	defer hostH.Delete()
	sbxH, err := netlink.NewHandleAt(sbxNs)
	if err != nil {
		return nil, wrap("netlink handle in sandbox netns", err)
	}
	defer sbxH.Delete()

	f := &Fence{
		Sandbox:   cfg.Sandbox,
		HostIf:    HostIfName(cfg.Sandbox),
		Table:     TableName(cfg.Sandbox),
		ProxyPort: cfg.ProxyPort,
		FencePort: cfg.FencePort,
		cfg:       cfg,
	}

	var undo []func() error
	defer func() {
		if err == nil {
			return
		}
		var uerrs []error
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				uerrs = append(uerrs, uerr)
			}
		}
		if len(uerrs) > 0 {
			err = fmt.Errorf("%w; rollback incomplete (run sandbox-supervisor gc): %w", err, errors.Join(uerrs...))
		}
	}()

	// Sandbox namespace first: sysctls (IPv6 off by default before eth0
	// exists, so it is born without IPv6), then the ruleset. Nothing can
	// leave before the veth exists.
	if err := writeSysctls(sbxNs, sandboxSysctls()); err != nil {
		return nil, wrap("sandbox sysctls", err)
	}

	unlock, err := lockAlloc(ctx, cfg.StateDir)
	if err != nil {
		return nil, wrap("allocation lock", err)
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	used, err := usedPrefixes(hostH, cfg.Pool)
	if err != nil {
		return nil, wrap("scan host addresses", err)
	}
	f.Prefix, err = allocate(cfg.Pool, used)
	if err != nil {
		return nil, wrap("allocate", err)
	}
	f.HostAddr, f.SandboxAddr = hostAndSandbox(f.Prefix)

	if err := applyNft(sbxNs, func(c *nftables.Conn) {
		_ = addSandboxRules(c, sandboxSpec{hostAddr: f.HostAddr, proxyPort: cfg.ProxyPort, dns: cfg.DNSPort != 0})
	}); err != nil {
		return nil, wrap("sandbox nftables table inet "+SandboxTable, err)
	}
	undo = append(undo, func() error { return ignoreNotExist(deleteTable(sbxNs, SandboxTable)) })

	if err := applyNft(hostNs, func(c *nftables.Conn) {
		_ = addHostRules(c, hostSpec{table: f.Table, hostIf: f.HostIf, hostAddr: f.HostAddr,
			proxyPort: cfg.ProxyPort, fencePort: cfg.FencePort,
			dnsPort: cfg.DNSPort, transparentPort: cfg.TransparentPort, transparentLast: cfg.transparentLast(),
			synthetic: SyntheticRange})
	}); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w (leftover of an earlier sandbox of this name: run sandbox-supervisor gc)", err)
		}
		return nil, wrap("host nftables table inet "+f.Table, err)
	}
	undo = append(undo, func() error { return ignoreNotExist(deleteTable(hostNs, f.Table)) })

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: f.HostIf},
		PeerName:      SandboxIf,
		PeerNamespace: netlink.NsFd(int(sbxNs)),
	}
	if err := hostH.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%w (a link %s or %s in the sandbox already exists: leftover, name collision, or a namespace that is not fresh)", err, f.HostIf, SandboxIf)
		}
		return nil, wrap("create veth "+f.HostIf, err)
	}
	hostLink, err := hostH.LinkByName(f.HostIf)
	if err != nil {
		// Created but not found: delete by name.
		undo = append(undo, func() error { return deleteHostLink(hostH, f.HostIf, 0) })
		return nil, wrap("find veth "+f.HostIf, err)
	}
	f.hostIndex = hostLink.Attrs().Index
	undo = append(undo, func() error { return deleteHostLink(hostH, f.HostIf, f.hostIndex) })

	if err := writeSysctls(hostNs, hostSysctls(f.HostIf)); err != nil {
		return nil, wrap("host sysctls on "+f.HostIf, err)
	}
	if err := hostH.AddrAdd(hostLink, &netlink.Addr{IPNet: ipnet(f.HostAddr, 30)}); err != nil {
		return nil, wrap("address "+f.HostAddr.String()+"/30 on "+f.HostIf, err)
	}
	if err := hostH.LinkSetUp(hostLink); err != nil {
		return nil, wrap("set "+f.HostIf+" up", err)
	}
	if err := writeRecord(cfg.StateDir, f); err != nil {
		return nil, wrap("allocation record", err)
	}
	undo = append(undo, func() error { return removeRecord(cfg.StateDir, cfg.Sandbox) })
	unlock()
	locked = false

	if err := ctx.Err(); err != nil {
		return nil, wrap("setup", err)
	}
	// The prefix is this sandbox's now (its host address is in use), and
	// nothing can come from the sandbox address until the sandbox side
	// has it: what an earlier holder left in conntrack goes first.
	if err := flushConntrack(hostNs, f.SandboxAddr); err != nil {
		return nil, wrap("connection tracking", err)
	}
	// The sandbox side.
	if err := writeSysctls(sbxNs, []sysctl{{path: "net/ipv6/conf/" + SandboxIf + "/disable_ipv6", value: "1", optional: true}}); err != nil {
		return nil, wrap("sandbox sysctls on "+SandboxIf, err)
	}
	eth, err := sbxH.LinkByName(SandboxIf)
	if err != nil {
		return nil, wrap("find "+SandboxIf+" in sandbox", err)
	}
	if err := sbxH.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(f.SandboxAddr, 30)}); err != nil {
		return nil, wrap("address "+f.SandboxAddr.String()+"/30 on sandbox "+SandboxIf, err)
	}
	if err := sbxH.LinkSetUp(eth); err != nil {
		return nil, wrap("set sandbox "+SandboxIf+" up", err)
	}
	lo, err := sbxH.LinkByName("lo")
	if err != nil {
		return nil, wrap("find lo in sandbox", err)
	}
	if err := sbxH.LinkSetUp(lo); err != nil {
		return nil, wrap("set sandbox lo up", err)
	}
	if err := sbxH.RouteAdd(&netlink.Route{
		LinkIndex: eth.Attrs().Index,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
		Gw:        net.IP(f.HostAddr.AsSlice()),
	}); err != nil {
		return nil, wrap("default route via "+f.HostAddr.String()+" in sandbox", err)
	}

	// Until the kernel has seen the carrier (link watch, asynchronous) the
	// veth drops what it is given; wait, so the sandbox's first SYN is
	// not lost to a one-second retransmit.
	for _, l := range []struct {
		h    *netlink.Handle
		name string
	}{{hostH, f.HostIf}, {sbxH, SandboxIf}} {
		if err := waitOperUp(ctx, l.h, l.name); err != nil {
			return nil, wrap("wait for "+l.name+" to come up", err)
		}
	}

	keepHostNs = true
	f.hostNs = hostNs
	f.live = true
	return f, nil
}

// Teardown removes the fence: the veth pair (by deleting its host side),
// the host table and the allocation record. It is idempotent: objects
// already gone are not errors, and calls after a successful one do
// nothing. It refuses to delete a host link of the right name that is
// not the one Setup created.
func (f *Fence) Teardown() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live {
		if f.done {
			return nil
		}
		return fmt.Errorf("fence: sandbox %q: Teardown on a Fence not made by Setup", f.Sandbox)
	}
	if err := collect(f.hostNs, f.cfg.StateDir, f.Sandbox, f.hostIndex); err != nil {
		return err
	}
	f.hostNs.Close()
	f.live, f.done = false, true
	return nil
}

// FlushConntrack deletes the host namespace's connection-tracking
// entries of the sandbox's connections (flushConntrack). Call it when
// none of them can be live: the supervisor calls it before it starts the
// sandbox's proxy again, once the old one died with every connection
// through it. The old proxy's connections linger there (TIME_WAIT, two
// minutes), each holding the reply tuple of the transparent port its
// redirect took; the new proxy's names get addresses of a new epoch, so
// a client port the sandbox used for them before is reused for new
// destinations, and with every port of the transparent range held by a
// lingering entry the kernel's NAT moves the new connection's source
// port, which the proxy cannot attribute (attribution_failed).
func (f *Fence) FlushConntrack() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.live {
		return fmt.Errorf("fence: sandbox %q: FlushConntrack on a Fence not set up or torn down", f.Sandbox)
	}
	if err := flushConntrack(f.hostNs, f.SandboxAddr); err != nil {
		return fmt.Errorf("fence: sandbox %q: connection tracking: %w", f.Sandbox, err)
	}
	return nil
}

// Collect removes whatever fence objects the named sandbox left in the
// host namespace (link, table, record) with the default state dir. It is
// what sandbox-supervisor gc calls once the sandbox is gone; objects that
// do not exist are not errors.
func Collect(sandbox string) error { return Config{Sandbox: sandbox}.Collect() }

// Collect is the package-level Collect for c.Sandbox, honouring
// c.StateDir and c.HostNetns; other fields are ignored.
func (c Config) Collect() error {
	c = c.withDefaults()
	if err := validateName(c.Sandbox); err != nil {
		return err
	}
	hostNs, err := openHostNs(c.HostNetns)
	if err != nil {
		return fmt.Errorf("fence: collect %q: open host netns: %w", c.Sandbox, err)
	}
	defer hostNs.Close()
	return collect(hostNs, c.StateDir, c.Sandbox, 0)
}

// Leftovers names the sandboxes that have fence objects in the host
// namespace (a host table) or an allocation record in the state dir,
// honouring c.StateDir and c.HostNetns. sandbox-supervisor gc can
// compare it with the sandboxes it knows.
func (c Config) Leftovers() ([]string, error) {
	c = c.withDefaults()
	hostNs, err := openHostNs(c.HostNetns)
	if err != nil {
		return nil, fmt.Errorf("fence: leftovers: open host netns: %w", err)
	}
	defer hostNs.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(hostNs)))
	if err != nil {
		return nil, fmt.Errorf("fence: leftovers: nftables: %w", err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("fence: leftovers: list tables: %w", err)
	}
	seen := map[string]bool{}
	for _, t := range tables {
		if name, ok := strings.CutPrefix(t.Name, TablePrefix); ok && validateName(name) == nil {
			seen[name] = true
		}
	}
	recs, err := listRecords(c.StateDir)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		seen[r] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// CollectOrphans finds the sandboxes whose allocation record is in
// c.StateDir but whose host link is gone: the veth dies with the
// sandbox's network namespace, so nothing can use their table or /30
// any more (Setup writes the record only after the link exists). It
// skips the names for which owned returns true (their owner, a known
// sandbox's state, collects them) and, with apply, collects the others
// (link, table, record). It holds the allocation lock throughout, so a
// Setup of the same name cannot start between the check and the
// collection. It returns the orphans found (collected, with apply);
// with apply, an error says which were not collected.
func (c Config) CollectOrphans(ctx context.Context, owned func(sandbox string) bool, apply bool) ([]string, error) {
	c = c.withDefaults()
	recs, err := listRecords(c.StateDir)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	unlock, err := lockAlloc(ctx, c.StateDir)
	if err != nil {
		return nil, fmt.Errorf("fence: orphans: %w", err)
	}
	defer unlock()
	hostNs, err := openHostNs(c.HostNetns)
	if err != nil {
		return nil, fmt.Errorf("fence: orphans: open host netns: %w", err)
	}
	defer hostNs.Close()
	h, err := netlink.NewHandleAt(hostNs)
	if err != nil {
		return nil, fmt.Errorf("fence: orphans: netlink handle: %w", err)
	}
	defer h.Delete()
	if recs, err = listRecords(c.StateDir); err != nil { // again, under the lock
		return nil, err
	}
	var found []string
	var errs []error
	for _, name := range recs {
		if owned != nil && owned(name) {
			continue
		}
		_, err := h.LinkByName(HostIfName(name))
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			if err != nil {
				errs = append(errs, fmt.Errorf("fence: orphans: link %s of %s: %w", HostIfName(name), name, err))
			}
			continue // alive (or unknown): never collected
		}
		found = append(found, name)
		if apply {
			if err := collect(hostNs, c.StateDir, name, 0); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return found, errors.Join(errs...)
}

// collect deletes the host link (only if its index is wantIndex, when
// that is not 0), the host table and the record.
func collect(hostNs netns.NsHandle, stateDir, sandbox string, wantIndex int) error {
	h, err := netlink.NewHandleAt(hostNs)
	if err != nil {
		return fmt.Errorf("fence: teardown %q: netlink handle: %w", sandbox, err)
	}
	defer h.Delete()
	var errs []error
	if err := deleteHostLink(h, HostIfName(sandbox), wantIndex); err != nil {
		errs = append(errs, err)
		// A link of our name that is not ours means the names were
		// reused: leave that sandbox's table alone too.
		if errors.Is(err, errNotOurs) {
			return fmt.Errorf("fence: teardown %q: %w", sandbox, err)
		}
	}
	if err := ignoreNotExist(deleteTable(hostNs, TableName(sandbox))); err != nil {
		errs = append(errs, fmt.Errorf("delete table inet %s: %w", TableName(sandbox), err))
	}
	if err := removeRecord(stateDir, sandbox); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("fence: teardown %q: %w", sandbox, errors.Join(errs...))
	}
	return nil
}

var errNotOurs = errors.New("belongs to another fence")

// deleteHostLink deletes the named veth; a missing link is fine.
func deleteHostLink(h *netlink.Handle, name string, wantIndex int) error {
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("find link %s: %w", name, err)
	}
	if l.Type() != "veth" {
		return fmt.Errorf("link %s is a %s, not a veth: %w", name, l.Type(), errNotOurs)
	}
	if wantIndex != 0 && l.Attrs().Index != wantIndex {
		return fmt.Errorf("link %s has index %d, not %d: %w", name, l.Attrs().Index, wantIndex, errNotOurs)
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

// waitOperUp polls until the link's operational state is up, for at
// most linkUpTimeout.
func waitOperUp(ctx context.Context, h *netlink.Handle, name string) error {
	ctx, cancel := context.WithTimeout(ctx, linkUpTimeout)
	defer cancel()
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("operational state still %s: %w", l.Attrs().OperState, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

const linkUpTimeout = 3 * time.Second

func openHostNs(path string) (netns.NsHandle, error) {
	if path == "" {
		return netns.Get()
	}
	return netns.GetFromPath(path)
}

// applyNft runs build on a fresh nftables connection in ns and flushes
// the batch (one atomic transaction).
func applyNft(ns netns.NsHandle, build func(*nftables.Conn)) error {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	build(c)
	return c.Flush()
}

func deleteTable(ns netns.NsHandle, name string) error {
	return applyNft(ns, func(c *nftables.Conn) {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	})
}

func ignoreNotExist(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

// usedPrefixes lists every IPv4 address and route in the host namespace
// (all routing tables) that overlaps pool.
func usedPrefixes(h *netlink.Handle, pool netip.Prefix) ([]netip.Prefix, error) {
	var used []netip.Prefix
	add := func(ipn *net.IPNet) {
		if ipn == nil {
			return
		}
		a, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			return
		}
		ones, _ := ipn.Mask.Size()
		p := netip.PrefixFrom(a.Unmap(), ones).Masked()
		if p.Bits() > 0 && p.Overlaps(pool) {
			used = append(used, p)
		}
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		add(a.IPNet)
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		add(r.Dst)
	}
	return used, nil
}

// A sysctl is one /proc/sys/<path> setting. Optional ones are skipped
// when the file does not exist (the kernel lacks the feature, so there
// is nothing to turn off).
type sysctl struct {
	path     string
	value    string
	optional bool
}

func sandboxSysctls() []sysctl {
	return []sysctl{
		{path: "net/ipv6/conf/all/disable_ipv6", value: "1", optional: true},
		{path: "net/ipv6/conf/default/disable_ipv6", value: "1", optional: true},
		{path: "net/ipv6/conf/lo/disable_ipv6", value: "1", optional: true},
		{path: "net/ipv4/ip_forward", value: "0"},
		{path: "net/mptcp/enabled", value: "0", optional: true},
	}
}

func hostSysctls(hostIf string) []sysctl {
	return []sysctl{
		{path: "net/ipv6/conf/" + hostIf + "/disable_ipv6", value: "1", optional: true},
		{path: "net/ipv4/conf/" + hostIf + "/forwarding", value: "0"},
		{path: "net/ipv4/conf/" + hostIf + "/rp_filter", value: "1"},
	}
}

// writeSysctls writes and reads back each setting from a thread inside
// ns (/proc/sys/net shows the namespace of the thread that opens it).
func writeSysctls(ns netns.NsHandle, list []sysctl) error {
	return inNetns(ns, func() error {
		for _, s := range list {
			p := filepath.Join("/proc/sys", s.path)
			fh, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				if s.optional && errors.Is(err, os.ErrNotExist) {
					continue
				}
				return fmt.Errorf("open %s: %w", p, err)
			}
			_, err = fh.WriteString(s.value + "\n")
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s=%s: %w", strings.ReplaceAll(s.path, "/", "."), s.value, err)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read back %s: %w", p, err)
			}
			if strings.TrimSpace(string(got)) != s.value {
				return fmt.Errorf("%s is %q after writing %q", strings.ReplaceAll(s.path, "/", "."), strings.TrimSpace(string(got)), s.value)
			}
		}
		return nil
	})
}

// inNetns runs fn on a locked OS thread that has entered ns, then moves
// the thread back. If it cannot move back, the thread stays locked and
// the runtime discards it when the goroutine ends.
func inNetns(ns netns.NsHandle, fn func() error) error { return nsthread.Run(ns, fn) }
