//go:build linux

package sandbox

import "github.com/palisade-sandbox/palisade/pkg/seccomp"

// installSeccomp compiles and installs the default profile. It runs last
// on the spawning thread, after the capability drop and Landlock; TSYNC
// extends it to the init's other threads, and the command inherits it.
func installSeccomp() (int, error) {
	p := seccomp.DefaultProfile()
	filter, err := p.Build()
	if err != nil {
		return 0, err
	}
	if err := seccomp.Install(filter); err != nil {
		return 0, err
	}
	return p.Count(), nil
}
