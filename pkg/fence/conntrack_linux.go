//go:build linux

package fence

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ctnetlink's dump filter (linux/netfilter/nfnetlink_conntrack.h: CTA_FILTER
// and its attributes; the flag is CTA_FILTER_F_CTA_IP_SRC of the kernel's
// nf_internals.h, Linux 5.8 and later).
const (
	ctaFilter           = 25
	ctaFilterOrigFlags  = 1
	ctaFilterReplyFlags = 2
	ctaFilterFlagIPSrc  = 1 << 0
)

// conntrackDumpTries bounds the dumps flushConntrack repeats when the
// table changed while it was read (the kernel then marks the dump
// interrupted: entries may have been missed).
const conntrackDumpTries = 3

// flushConntrack deletes, in the host namespace, the connection-tracking
// entries of connections that came from addr: what an earlier sandbox
// that had the same address left behind (a closed connection's entry
// lingers, in TIME_WAIT for two minutes). Setup calls it once the prefix
// is taken (its host address is in use) and before the sandbox side has
// its address, so no entry of the new sandbox can be among them. The
// kernel filters the dump: only the entries from addr cross netlink. It
// still walks its whole hash table, shared by every namespace (262,144
// buckets here): 6-9 ms (median 8) on the 2-CPU VM, whether the
// namespace holds 9,000 entries or none.
//
// Without it, a connection of the new sandbox from a client port an
// earlier one used, to another synthetic address, is redirected to the
// same transparent port as the lingering entry: the two share a reply
// tuple, and the kernel's NAT gives the new one another source port. The
// proxy then sees a client port no socket in the sandbox has, cannot
// attribute the connection and refuses it (attribution_failed).
func flushConntrack(hostNs netns.NsHandle, addr netip.Addr) error {
	return inNetns(hostNs, func() error {
		var err error
		for range conntrackDumpTries {
			var entries [][]byte
			entries, err = dumpConntrackFrom(addr)
			if err != nil && !errors.Is(err, nl.ErrDumpInterrupted) {
				return fmt.Errorf("list conntrack entries from %s: %w", addr, err)
			}
			for _, e := range entries {
				// A kernel without the dump filter (before 5.8) ignores
				// it and lists every entry: each is checked here.
				if src, ok := conntrackOrigSrc(e); !ok || src != addr {
					continue
				}
				if derr := deleteConntrack(e); derr != nil && !errors.Is(derr, unix.ENOENT) {
					return fmt.Errorf("delete conntrack entry from %s: %w", addr, derr)
				}
			}
			if err == nil {
				return nil
			}
		}
		// Every entry the dumps saw is gone; a table this busy is left
		// as it is rather than failing the sandbox (a clash costs a
		// refused connection, never an allowed one).
		return nil
	})
}

// dumpConntrackFrom lists the IPv4 entries whose original source is addr.
func dumpConntrackFrom(addr netip.Addr) ([][]byte, error) {
	req := conntrackRequest(nl.IPCTNL_MSG_CT_GET, unix.NLM_F_DUMP)
	orig := nl.NewRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_ORIG, nil)
	ip := orig.AddRtAttr(unix.NLA_F_NESTED|nl.CTA_TUPLE_IP, nil)
	ip.AddRtAttr(nl.CTA_IP_V4_SRC, addr.AsSlice())
	req.AddData(orig)
	filter := nl.NewRtAttr(unix.NLA_F_NESTED|ctaFilter, nil)
	filter.AddRtAttr(ctaFilterOrigFlags, nl.Uint32Attr(ctaFilterFlagIPSrc))
	filter.AddRtAttr(ctaFilterReplyFlags, nl.Uint32Attr(0))
	req.AddData(filter)
	return req.Execute(unix.NETLINK_NETFILTER, 0)
}

// conntrackOrigSrc is the original source address of a dumped IPv4
// entry (false when it has none).
func conntrackOrigSrc(entry []byte) (netip.Addr, bool) {
	if len(entry) < 4 {
		return netip.Addr{}, false
	}
	attrs, err := nl.ParseRouteAttrAsMap(entry[4:])
	if err != nil {
		return netip.Addr{}, false
	}
	orig, ok := attrs[unix.NLA_F_NESTED|nl.CTA_TUPLE_ORIG]
	if !ok {
		return netip.Addr{}, false
	}
	tuple, err := nl.ParseRouteAttrAsMap(orig.Value)
	if err != nil {
		return netip.Addr{}, false
	}
	ip, ok := tuple[unix.NLA_F_NESTED|nl.CTA_TUPLE_IP]
	if !ok {
		return netip.Addr{}, false
	}
	addrs, err := nl.ParseRouteAttrAsMap(ip.Value)
	if err != nil {
		return netip.Addr{}, false
	}
	src, ok := addrs[nl.CTA_IP_V4_SRC]
	if !ok {
		return netip.Addr{}, false
	}
	return netip.AddrFromSlice(src.Value)
}

// deleteConntrack deletes the entry a dump returned (its attributes name
// it: the original tuple and its id).
func deleteConntrack(entry []byte) error {
	if len(entry) < 4 {
		return nil
	}
	req := conntrackRequest(nl.IPCTNL_MSG_CT_DELETE, unix.NLM_F_ACK)
	req.AddRawData(entry[4:]) // past the nfgenmsg header the request has
	_, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	return err
}

func conntrackRequest(op, flags int) *nl.NetlinkRequest {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|op, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_INET, Version: nl.NFNETLINK_V0})
	return req
}
