// Package probe is confinement-probe's engine: the checks that prove, from
// inside a sandbox, that its filesystem, egress, privilege, seccomp,
// user-namespace and raw-socket boundaries hold (Run, Linux only), the
// catalogue of checks every run must report (Catalog), the verdict over
// what a run reported (Evaluate), and the launcher that starts a
// throwaway sandbox through sandbox-supervisor with the policy a real
// sandbox would get and runs the checks in it (Launch).
//
// Seed 000: bootstrap "runs live-confinement-probe.sh inside a second
// throwaway sandbox and fails closed unless the runtime proves the
// expected filesystem, egress, privilege, seccomp, user-namespace, and
// raw-socket boundaries"; the log "ends with CONFINEMENT_PROBE_OK". The
// verdict lines are OKLine and FailedLine.
package probe
