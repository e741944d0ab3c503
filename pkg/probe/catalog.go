package probe

import (
	"fmt"
	"runtime"
)

// The verdict lines. OKLine is printed (and logged) only when every check
// of the catalogue was reported and passed.
const (
	OKLine     = "CONFINEMENT_PROBE_OK"
	FailedLine = "CONFINEMENT_PROBE_FAILED"
)

// The check groups, in report order.
const (
	GroupFilesystem    = "filesystem"
	GroupEgress        = "egress"
	GroupPrivilege     = "privilege"
	GroupSeccomp       = "seccomp"
	GroupUserNamespace = "user-namespace"
	GroupRawSocket     = "raw-socket"
)

// Groups lists the groups in report order.
var Groups = []string{GroupFilesystem, GroupEgress, GroupPrivilege, GroupSeccomp, GroupUserNamespace, GroupRawSocket}

// MinChecksPerGroup is how many checks each group has at least (a test
// holds the catalogue to it).
const MinChecksPerGroup = 5

// Result is one check as printed: one JSON object per line.
type Result struct {
	Check    string `json:"check"`
	Group    string `json:"group"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	OK       bool   `json:"ok"`
}

// Spec names one check of the catalogue and what it expects.
type Spec struct {
	Name     string
	Group    string
	Expected string
}

// catalog is the portable part of the catalogue; archSpecs adds the checks
// that exist only on some architectures (foreign-arch and x32 syscalls).
var catalog = []Spec{
	{"write_outside_allowlist", GroupFilesystem, "creating a file in a world-writable directory outside the policy fails with EACCES (Landlock)"},
	{"write_readonly_path", GroupFilesystem, "creating a file under a read_only path fails with EACCES"},
	{"read_protected_path", GroupFilesystem, "listing a directory outside the policy fails with EACCES"},
	{"symlink_escape", GroupFilesystem, "a symlink in the working directory to a protected directory cannot be read through (EACCES)"},
	{"proc_sys_readonly", GroupFilesystem, "writing /proc/sys fails (EROFS or EACCES)"},
	{"no_block_devices", GroupFilesystem, "/dev holds no block device and mknod of one fails with EPERM"},
	{"workdir_writable", GroupFilesystem, "the working directory and /tmp are writable (the allow-list is not empty)"},

	{"direct_tcp_connect", GroupEgress, "a TCP connection around the proxy to 198.51.100.7:443 fails at once (refused, reset or unreachable), no byte exchanged"},
	{"proxy_connect_denied", GroupEgress, `CONNECT to a host outside the policy through the proxy gets 403 {"error":"policy_denied",...} (or there is no proxy and no route out)`},
	{"proxy_forward_denied", GroupEgress, `a plain-HTTP request for a host outside the policy through the proxy gets 403 {"error":"policy_denied",...} (or there is no proxy and no route out)`},
	{"proxy_literal_ip_denied", GroupEgress, `CONNECT to a literal IP outside the policy gets 403 policy_denied (or there is no proxy and no route out)`},
	{"external_dns", GroupEgress, "a DNS query to 198.51.100.53:53 gets no answer"},
	{"udp_egress", GroupEgress, "a UDP datagram to 198.51.100.7:9 is refused (error on send or on the next receive) or unroutable"},
	{"ipv6_connect", GroupEgress, "a TCP connection to [2001:db8::7]:443 fails at once (refused, reset or unreachable)"},

	{"uid_not_root", GroupPrivilege, "real, effective, saved and filesystem uids are all non-zero"},
	{"gid_not_root", GroupPrivilege, "real, effective, saved and filesystem gids are all non-zero, no supplementary groups"},
	{"capabilities_empty", GroupPrivilege, "CapInh, CapPrm, CapEff, CapBnd and CapAmb are all 0"},
	{"no_new_privs", GroupPrivilege, "NoNewPrivs: 1"},
	{"setuid_root_denied", GroupPrivilege, "setuid(0) fails with EPERM"},
	{"signal_init_denied", GroupPrivilege, "signal 0 to the sandbox's PID 1 fails with EPERM"},

	{"seccomp_filter_mode", GroupSeccomp, "Seccomp: 2 (filter mode)"},
	{"process_vm_readv_denied", GroupSeccomp, "process_vm_readv on itself fails with EPERM (the kernel alone would allow it)"},
	{"keyctl_denied", GroupSeccomp, "keyctl fails with EPERM"},
	{"io_uring_denied", GroupSeccomp, "io_uring_setup fails with EPERM"},
	{"tiocsti_high_bits_denied", GroupSeccomp, "ioctl TIOCSTI with junk in the high 32 bits fails with EPERM"},

	{"unshare_user", GroupUserNamespace, "unshare(CLONE_NEWUSER) fails with EPERM"},
	{"clone_newuser", GroupUserNamespace, "clone(CLONE_NEWUSER) fails with EPERM"},
	{"clone3_enosys", GroupUserNamespace, "clone3 fails with ENOSYS (libcs fall back to the inspectable clone)"},
	{"unshare_mount", GroupUserNamespace, "unshare(CLONE_NEWNS) fails with EPERM"},
	{"unshare_net", GroupUserNamespace, "unshare(CLONE_NEWNET) fails with EPERM"},
	{"setns_denied", GroupUserNamespace, "setns into its own network namespace fails with EPERM"},

	{"af_packet", GroupRawSocket, "socket(AF_PACKET) fails with EPERM"},
	{"sock_raw_inet", GroupRawSocket, "socket(AF_INET, SOCK_RAW) fails with EPERM"},
	{"sock_raw_inet6", GroupRawSocket, "socket(AF_INET6, SOCK_RAW) fails with EPERM"},
	{"mptcp", GroupRawSocket, "socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP) fails with EPERM"},
	{"af_alg", GroupRawSocket, "socket(AF_ALG) fails with EPERM"},
	{"af_vsock", GroupRawSocket, "socket(AF_VSOCK) fails with EPERM"},
	{"netlink_audit", GroupRawSocket, "socket(AF_NETLINK, NETLINK_AUDIT) fails with EPERM (only NETLINK_ROUTE is allowed)"},
}

// Catalog returns every check this build runs, grouped in report order.
func Catalog() []Spec {
	all := append(append([]Spec(nil), catalog...), archSpecs(runtime.GOARCH)...)
	out := make([]Spec, 0, len(all))
	for _, g := range Groups {
		for _, s := range all {
			if s.Group == g {
				out = append(out, s)
			}
		}
	}
	return out
}

// archSpecs are the checks that only exist on some architectures.
func archSpecs(goarch string) []Spec {
	if goarch != "amd64" {
		return nil
	}
	return []Spec{
		{"foreign_arch_killed", GroupSeccomp, "an i386 syscall (int 0x80) kills the process with SIGSYS"},
		{"x32_syscall_denied", GroupSeccomp, "an x32 syscall number fails with EPERM"},
	}
}

// Verdict is the outcome of one probe run.
type Verdict struct {
	OK      bool     `json:"ok"`
	Result  string   `json:"result"` // OKLine or FailedLine
	Checks  []Result `json:"checks"`
	Failed  []string `json:"failed,omitempty"`
	Missing []string `json:"missing,omitempty"`
}

// Evaluate holds what a run reported against the catalogue: every check
// must have been reported exactly once and passed. A check the run did not
// report (the probe died, the sandbox never started) fails with why; a
// check outside the catalogue or reported twice fails the run too. why
// describes the run's end for missing checks ("" when it ended normally).
func Evaluate(cat []Spec, reported []Result, why string) Verdict {
	got := map[string][]Result{}
	for _, r := range reported {
		got[r.Check] = append(got[r.Check], r)
	}
	v := Verdict{OK: true}
	known := map[string]bool{}
	for _, s := range cat {
		known[s.Name] = true
		rs := got[s.Name]
		var r Result
		switch {
		case len(rs) == 0:
			obs := "not reported by the in-sandbox probe"
			if why != "" {
				obs += ": " + why
			}
			r = Result{Check: s.Name, Group: s.Group, Expected: s.Expected, Observed: obs}
			v.Missing = append(v.Missing, s.Name)
		case len(rs) > 1:
			r = Result{Check: s.Name, Group: s.Group, Expected: s.Expected, Observed: fmt.Sprintf("reported %d times", len(rs))}
		default:
			r = rs[0]
			if r.Group != s.Group {
				r.OK = false
				r.Observed = fmt.Sprintf("reported in group %q, want %q: %s", r.Group, s.Group, r.Observed)
				r.Group = s.Group
			}
		}
		if !r.OK {
			v.OK = false
			v.Failed = append(v.Failed, s.Name)
		}
		v.Checks = append(v.Checks, r)
	}
	for _, r := range reported {
		if !known[r.Check] {
			v.OK = false
			r.OK = false
			r.Observed = "not in this build's catalogue: " + r.Observed
			v.Checks = append(v.Checks, r)
			v.Failed = append(v.Failed, r.Check)
		}
	}
	if len(cat) == 0 {
		v.OK = false
	}
	v.Result = FailedLine
	if v.OK {
		v.Result = OKLine
	}
	return v
}
