// Package policy is Palisade's sandbox policy engine: the OpenShell version-1
// policy schema (the subset Palisade enforces), a strict YAML loader that
// reports every problem with its field path and line, validation rules at
// least as strict as OpenShell's, a canonical form and checksum, the
// resolution order of seed 000 (--policy, MAC_OPENSHELL_POLICY,
// ~/.mac/openshell-policy.yaml, bundled default), operator-template
// rendering, and the host and binary pattern matchers the egress proxy
// reuses.
//
// A *Policy returned by Parse, LoadFile, Default or Resolve is valid and
// normalised: defaults are materialised (enforcement "enforce", landlock
// compatibility "hard_requirement", run_as_user/run_as_group "sandbox",
// endpoint name = map key), paths are cleaned, hosts lower-cased, ports
// collected into Ports, and lists whose order has no meaning are sorted.
// Consumers read its exported fields directly.
//
// The package does not log; it returns errors. Validation failures are an
// Errors value listing every FieldError.
package policy
