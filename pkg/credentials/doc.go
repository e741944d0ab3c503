// Package credentials keeps the secrets the agent never holds. The
// sandbox's environment carries only placeholders in OpenShell's form,
// openshell:resolve:env:KEY; the egress proxy replaces a placeholder
// with its value in a request it has already admitted (destination and
// L7 rules), and only when the request goes to an endpoint the
// credential is bound to.
//
// The values come from a credentials file only root can read (mode 0600
// or stricter, owned by root; ReadFile refuses anything else, naming the
// file), each inline or named as a variable of the environment of the
// process that starts the proxy. The file groups credentials into
// providers; a provider lists the endpoints (host, ports, optional path
// prefix) its credentials are bound to, or lists none and is bound by a
// policy endpoint's credential_binding.provider.
//
// A Store is immutable: a reload builds a new one and swaps it whole,
// values and bindings together, and a reload that fails leaves a revoked
// Store in force (every placeholder refused) rather than the old values.
// Nothing in this package logs, and no error it returns holds a value.
// See docs/credentials.md.
package credentials
