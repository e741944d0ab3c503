// Package fence builds the network fence that makes the egress proxy the
// only way out of a sandbox's network namespace, and takes it down again.
//
// One sandbox gets one veth pair and one /30 from a pool (DefaultPool,
// 10.200.0.0/16): the host side (HostIfName, "pal<8 hex>h") keeps the
// first address in the host namespace, the sandbox side is created
// directly inside the sandbox namespace as eth0 with the second address
// and a default route via the host side; lo is brought up for the agent's
// own local servers. The allocation is serialised by a lock file in the
// state directory and checked against every address and route the host
// namespace already has, so concurrent sandboxes never share a /30 and a
// pool that overlaps a host network fails with an error instead of
// shadowing it. A small JSON record per sandbox in the state directory
// names what was built. The lowest free /30 is taken, so a new sandbox
// often gets the addresses of one that just ended: before the sandbox
// side gets its address, the host's connection-tracking entries of
// connections from that address are deleted. A closed connection's
// entry lingers (two minutes in TIME_WAIT), and a redirected connection
// of the new sandbox from the same client port would share its reply
// tuple: the kernel's NAT would move it to another source port, which
// no socket in the sandbox has, and the proxy could not attribute it.
// Within one sandbox the same happens when the kernel gives a new
// connection to another synthetic address a client port used for one
// shortly before: so the synthetic range is redirected to a range of
// transparent ports (Config.TransparentPorts; sandboxnet uses
// 3132-3139), and the NAT takes the first port of the range that makes
// the reply tuple unique instead of moving the client's source port.
// The proxy listens on every port of the range; SO_ORIGINAL_DST still
// gives the synthetic destination.
//
// Inside the sandbox namespace, table "inet palisade" (SandboxTable)
// lets out: loopback; TCP to the proxy (host address, proxy port); any
// other IPv4 TCP, which the host side captures; nothing else. UDP, ICMP,
// IPv6 and every other protocol are rejected on output with ICMP
// administratively-prohibited, so a local sender gets an immediate error
// (sendto and connect fail with EPERM) rather than a timeout. Input admits loopback and replies to connections the
// sandbox opened; forward drops everything. IPv6 is disabled by sysctl
// (net.ipv6.conf.{all,default,lo}.disable_ipv6=1), forwarding is off
// (net.ipv4.ip_forward=0) and MPTCP is off (net.mptcp.enabled=0) in the
// sandbox namespace.
//
// In the host namespace, table "inet palisade-<sandbox>" (TableName)
// matches only packets from the sandbox's veth. Its NAT prerouting chain
// (priority dstnat-1, so it runs before other NAT tables) leaves TCP to
// the proxy port alone, redirects DNS to the host address and TCP to
// the synthetic range to the policy DNS and transparent ports when
// configured, and redirects every other TCP connection to the
// fence port on the host address; the redirect lives on the host so that
// the proxy's fence listener can read the original destination with
// OriginalDst (SO_ORIGINAL_DST) and refuse it with an event. Its input
// chain admits only established traffic, new TCP to the proxy and
// fence ports, and the DNS and transparent ports only for connections a
// redirect sent there (conntrack status DNAT), its forward chain drops everything from or to the veth
// even when the host forwards IPv4, and the host side of the veth has
// IPv6 disabled, IPv4 forwarding off and strict reverse-path filtering.
// Other tables on the host still see the packets: a host firewall that
// drops input on unknown interfaces must admit the proxy and fence ports
// from "pal*" interfaces.
//
// Teardown (and Collect, for sandbox-supervisor gc after a crash) deletes
// the host side of the veth, which destroys both ends, the host table and
// the record. The sandbox namespace's own table dies with the namespace.
// Every step of Setup that fails undoes the steps before it.
//
// All netlink work goes through google/nftables and vishvananda/netlink
// handles bound to the namespace concerned; sysctls are written from a
// locked OS thread that has entered the namespace. Nothing runs the nft or
// ip binaries.
package fence
