package sandbox

// Network describes what the network layer needs from the supervisor for
// one sandbox. It is filled by the CLI and passed to the NetworkAttacher
// constructor of the network package.
type Network struct {
	// PolicyPath is the policy file the egress proxy loads and watches for
	// reloads; empty for the bundled default (which never needs a proxy:
	// its network_policies is empty).
	PolicyPath string
	// HostsFile gives the proxy static name resolution (tests, air-gapped
	// sites); empty means the system resolver.
	HostsFile string
	// Events is the --events destination the proxy appends to ("" none,
	// "-" the supervisor's stdout).
	Events string
}
