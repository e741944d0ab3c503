//go:build linux

package sandbox

import (
	"errors"

	"golang.org/x/net/bpf"

	"github.com/palisade-sandbox/palisade/pkg/seccomp"
)

// compileSeccomp compiles the default profile; the supervisor does it
// while the init boots and sends the program in the InitConfig.
func compileSeccomp() ([]bpf.RawInstruction, int, error) {
	p := seccomp.DefaultProfile()
	filter, err := p.Build()
	if err != nil {
		return nil, 0, err
	}
	return filter, p.Count(), nil
}

// installSeccomp installs the compiled filter. It runs last on the
// spawning thread, after the capability drop and Landlock; TSYNC extends
// it to the init's other threads, and the command inherits it. An empty
// program is refused: seccomp was asked for.
func installSeccomp(filter []bpf.RawInstruction) error {
	if len(filter) == 0 {
		return errors.New("seccomp requested but the configuration carries no filter")
	}
	return seccomp.Install(filter)
}
