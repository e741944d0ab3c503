// Package ceiling holds Palisade's policy ceiling: a root-owned policy
// (/etc/palisade/ceiling.yaml, same schema as a sandbox policy) that no
// policy in force may exceed, and the prover that decides whether one
// policy is contained in another.
//
// Contains(c, p, opts) proves that everything p allows, c allows too, or
// lists the excesses, each naming the field of p and why. The proof is
// sound: it never accepts a policy that allows a request, connection or
// filesystem access the ceiling does not. It is incomplete in the cases
// below, which it refuses (and the message says so):
//
//   - a destination, port set, binary, address range or HTTP request set
//     covered only by the union of several ceiling patterns, not by one
//     (the prover compares one pattern of p with one of c);
//   - pattern inclusions the symbolic test cannot see (a glob of p equal
//     to a union of character classes of c, for example);
//   - rules compared with access presets (a rule matches the method in
//     any letter case, a preset only upper case: GET rules are not within
//     access: read-only, and that is a real difference);
//   - a ceiling deny rule that p does not copy (or cover with a wider deny
//     rule of its own) on an endpoint whose requests may meet it.
//
// The rules themselves (docs/policy.md, "Ceiling"): hosts by the real
// selection of pkg/decision (exact names, "*.", "**." and intra-label
// patterns, IP literals, hostless allowed_ips endpoints); ports by
// membership; binaries by symbolic inclusion of policy.MatchBinary's
// globs; the endpoint that would really decide a request (pkg/decision's
// precedence: an endpoint outranking the covering one decides the
// requests both select) must let through what p's endpoint does: tunnels
// without inspection, tls: skip, protocol tcp, every HTTP request or the
// L7 allow set of access presets and rules less the ceiling's deny rules;
// the SSRF guard's address scope (exact hosts reach private addresses,
// wildcards only inside allowed_ips); filesystem paths by subtree and
// mode; landlock compatibility and the process identity by equality.
//
// Load reads the ceiling file and refuses one that root does not own or
// that group or others may write, or that lies in such a directory.
package ceiling
