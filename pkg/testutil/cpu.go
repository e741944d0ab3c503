package testutil

import (
	"testing"
	"time"
)

// CPUPerOp starts measuring the process's CPU time (user and system, the
// garbage collector's workers included) for benchmark b; the function it
// returns reports it per operation as "cpu-ns/op". On a machine shared
// with other work, wall time per operation follows the load; CPU time
// per operation moves much less, and it charges allocation its
// collection. Call it after set-up and the returned function after the
// b.N loop.
func CPUPerOp(b *testing.B) func() {
	start := ProcessCPU()
	return func() {
		if d := ProcessCPU() - start; d > 0 && b.N > 0 {
			b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// ProcessCPU is the CPU time (user and system) the process has used so
// far (0 where the platform does not say).
func ProcessCPU() time.Duration { return processCPU() }
