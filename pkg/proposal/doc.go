// Package proposal turns the denials of real sandbox runs into the
// smallest policy change that would have allowed them, for an operator
// to review and approve.
//
// An Aggregator reads OCSF event lines (the supervisor's and the egress
// proxy's, docs/events.md) and folds their denials by sandbox, kind,
// binary and destination or path, adding up counts (the proxy and the
// supervisor already fold repeats into one event with a count) and
// keeping the first and last time seen. Network denials (CONNECT,
// forwarded and transparent), L7 denials (method and path), policy DNS
// refusals, fence captures and Landlock filesystem denials are kept;
// everything else is ignored.
//
// Propose decides each denial again against the base policy with the
// real decision code (pkg/decision, Endpoint.CheckRequest) and builds a
// Proposal: a list of patch operations (add a read_only or read_write
// path, add a network entry for one binary, add an L7 rule to an
// endpoint), each with the denials it answers, and the denials it does
// not answer with the reason. The rules that keep it minimal are in
// docs/policy.md ("Proposals"): exact hosts, ports and paths only, a
// host pattern only for MinWildcardNames or more distinct names under
// one parent, never a binary under a writable path, never a filesystem
// grant above the denied path (or, for rights on a directory, that
// directory), never anything the ceiling forbids. The output is
// deterministic: the same events and base give the same bytes.
//
// Apply replays a Proposal's operations on the base policy it was made
// for (checked by checksum) and returns the new policy, which must have
// the checksum the proposal recorded.
package proposal
