//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

var (
	collectorsMu sync.Mutex
	collectors   []func(state.Labels) error
)

// RegisterCollector adds a teardown step that gc runs for every collected
// sandbox, after its processes and cgroup are gone. The network layer
// registers the removal of its links and nftables tables here.
func RegisterCollector(fn func(state.Labels) error) {
	collectorsMu.Lock()
	collectors = append(collectors, fn)
	collectorsMu.Unlock()
}

// Collect tears down what a dead sandbox left outside its state
// directory: any process still in its cgroup (its init is killed only if
// the recorded start time proves the pid was not recycled), the cgroup
// itself, then every registered collector. It is the remove hook of
// `sandbox-supervisor gc --apply`.
func Collect(l state.Labels) error {
	var errs []error
	if l.InitPID > 0 && l.InitStartTime != 0 {
		if st, err := state.ProcStartTime(l.InitPID); err == nil && st == l.InitStartTime {
			unix.Kill(l.InitPID, unix.SIGKILL)
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				if st2, err := state.ProcStartTime(l.InitPID); err != nil || st2 != st {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	cg, err := cgroup.Open(l.Name)
	switch {
	case err == nil:
		if err := cg.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
		}
	case !errors.Is(err, fs.ErrNotExist):
		errs = append(errs, fmt.Errorf("cgroup: %w", err))
	}
	collectorsMu.Lock()
	cs := append([]func(state.Labels) error(nil), collectors...)
	collectorsMu.Unlock()
	for _, c := range cs {
		if err := c(l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
