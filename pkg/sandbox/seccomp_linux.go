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
	if rewriteFilterForTest != nil {
		filter = rewriteFilterForTest(filter)
	}
	return filter, p.Count(), nil
}

// rewriteFilterForTest, set only by tests, rewrites the compiled filter
// before the supervisor sends it: TestSyscallAttacksDeniedByTheFilter gives
// the filter's denials an errno no kernel path returns, so that a denial
// by the filter is told from the kernel's own EPERM.
var rewriteFilterForTest func([]bpf.RawInstruction) []bpf.RawInstruction

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
