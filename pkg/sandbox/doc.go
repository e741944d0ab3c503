// Package sandbox creates one confined sandbox and runs one command in it.
//
// The supervisor side (Create, (*Sandbox).Run) resolves identity, builds
// an OCI runtime-spec [specs.Spec] describing namespaces, mounts, devices,
// rlimits, identity and cgroup limits, places the sandbox in its cgroup,
// gives the network layer its seam (NetworkAttacher), and starts the
// in-sandbox init: the palisade-init binary (cmd/palisade-init, calling
// RunInit), opened and checked beside the supervisor's own binary and
// executed through that descriptor (InitBinaryName, Options.InitExe).
// The init is PID 1
// of a fresh PID namespace: it applies the mounts from the spec, sets the
// hostname, brings up loopback, makes itself non-dumpable, then on a
// locked OS thread drops the bounding/ambient/inheritable capability sets,
// sets no_new_privs, enforces Landlock and seccomp, and forks the command
// with setgroups([])/setgid/setuid. It verifies the result from
// /proc/<pid>/status, reaps every child, forwards signals and exits with
// the command's status. Supervisor and init talk over one SOCK_SEQPACKET
// socket pair (fd 3 in the init) carrying JSON messages and, for --tty,
// the PTY master.
//
// Everything irreversible happens in the init or the command, never in
// the supervisor process.
package sandbox
