// Package landlockaudit turns the kernel's Landlock audit records into
// per-access filesystem denial events for one sandbox.
//
// From Landlock ABI 7 the kernel writes, for every access a Landlock
// domain refuses, an AUDIT_LANDLOCK_ACCESS record (1423: domain id,
// blocking rights, path) and, with a domain's first denial, an
// AUDIT_LANDLOCK_DOMAIN record (1424: the creating process), followed by
// the syscall record that names the process that tried. The records reach
// the audit netlink read-log multicast group while audit is enabled,
// whether or not an audit daemon runs.
//
// Three parts:
//
//   - Acquire / Lease.Release: careful audit enablement. An audit daemon
//     (AUDIT_GET pid != 0) owns the settings and nothing is changed; audit
//     already on is left alone; audit off with no daemon is turned on,
//     with the kernel's queue raised to Backlog records, while sandboxes
//     run, and both are put back by the last supervisor to finish (a
//     host-wide lease under CoordDir, surviving crashed holders).
//     Without audit the caller is told why; it never fails a sandbox.
//   - Watch: subscribes to the multicast group (CAP_AUDIT_READ), gathers
//     the records of each audit event, keeps the domains whose creator is
//     in the sandbox (Config.Owns checks the cgroup), folds repeated
//     denials like the egress proxy folds network denials (first at once,
//     then a count per window, a bounded number of keys) and hands each
//     Denial to Config.Emit. Other sandboxes' and the host's domains are
//     ignored.
//   - Denial.Event: the OCSF File System Activity (1001) event: path,
//     blocking rights, process (pid, exe, comm), sandbox and policy —
//     never file contents.
package landlockaudit
