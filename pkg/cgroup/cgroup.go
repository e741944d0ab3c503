// Package cgroup gives each sandbox its own control group with a pids
// limit (always), and memory and CPU limits when asked, on cgroup v2, v1,
// or a hybrid of both.
//
// A controller is used through the unified (v2) hierarchy when that
// hierarchy offers it, and through its v1 hierarchy otherwise. Whenever a
// v2 hierarchy is mounted — even an empty one such as
// /sys/fs/cgroup/unified on a hybrid host — the sandbox gets a group there
// too, so that processes are grouped in one place (cheap Procs, atomic
// cgroup.kill) and later eBPF layers can attach cgroup programs to it.
// Every sandbox group lives under a "palisade" parent in each hierarchy:
// for example /sys/fs/cgroup/pids/palisade/<name> and
// /sys/fs/cgroup/unified/palisade/<name>.
//
// Memory limits are made real: swap is capped (v1 memory.memsw equal to
// the limit, v2 memory.swap.max 0), the OOM killer stays enabled, and on
// v2 memory.oom.group=1 makes an OOM kill take the whole sandbox. v1 has
// no group OOM kill; Stats reports the OOM kill count so the supervisor
// can Kill the rest.
//
// The package registers the feature probes "cgroup:pids",
// "cgroup:memory" and "cgroup:cpu" in package feature.
package cgroup

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrExists is wrapped by New's error when a group of that name exists.
var ErrExists = errors.New("cgroup exists")

// DefaultPids is the pids limit a sandbox gets when Limits.Pids is 0.
const DefaultPids = 2048

// ParentName is the group under which every sandbox group is created in
// each hierarchy.
const ParentName = "palisade"

// Hierarchy names accepted by Path. Controller names select the hierarchy
// that enforces that controller (which is Unified on a pure v2 host).
const (
	Unified = "unified"
	Pids    = "pids"
	Memory  = "memory"
	CPU     = "cpu"
	Freezer = "freezer"
)

// cpuPeriodUS is the CFS period used for CPU quotas: 100 ms.
const cpuPeriodUS = 100000

// Limits are the resource limits of one sandbox.
type Limits struct {
	// Pids caps the number of tasks (processes and threads). 0 means
	// DefaultPids; there is always a limit.
	Pids int64 `json:"pids"`
	// MemoryBytes caps memory (and memory plus swap). 0 means no limit.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// CPUs caps CPU time in CPUs' worth (1.5 = one and a half CPUs), as a
	// CFS quota over a 100 ms period. 0 means no limit.
	CPUs float64 `json:"cpus,omitempty"`
}

// normalize validates l and fills in defaults. Errors name the field.
func (l Limits) normalize() (Limits, error) {
	switch {
	case l.Pids < 0:
		return l, fmt.Errorf("cgroup: Limits.Pids %d: must not be negative", l.Pids)
	case l.Pids == 0:
		l.Pids = DefaultPids
	}
	if l.MemoryBytes < 0 {
		return l, fmt.Errorf("cgroup: Limits.MemoryBytes %d: must not be negative", l.MemoryBytes)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 1<<20 {
		return l, fmt.Errorf("cgroup: Limits.MemoryBytes %d: below the 1 MiB minimum", l.MemoryBytes)
	}
	if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0 {
		return l, fmt.Errorf("cgroup: Limits.CPUs %v: must be a non-negative number", l.CPUs)
	}
	if l.CPUs > 0 && l.cpuQuotaUS() < 1000 {
		return l, fmt.Errorf("cgroup: Limits.CPUs %v: below the minimum of 0.01", l.CPUs)
	}
	if l.CPUs > 1<<20 {
		return l, fmt.Errorf("cgroup: Limits.CPUs %v: implausibly large", l.CPUs)
	}
	return l, nil
}

func (l Limits) cpuQuotaUS() int64 { return int64(math.Round(l.CPUs * cpuPeriodUS)) }

// ValidateName checks a group name: non-empty, at most 255 bytes, no '/',
// no control characters or spaces, and not made only of dots.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("cgroup: name: empty")
	}
	if len(name) > 255 {
		return fmt.Errorf("cgroup: name %.20q...: longer than 255 bytes", name)
	}
	if strings.Trim(name, ".") == "" {
		return fmt.Errorf("cgroup: name %q: made only of dots", name)
	}
	for _, r := range name {
		if r == '/' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("cgroup: name %q: contains %q", name, r)
		}
	}
	return nil
}

// Stats is a snapshot of a group's usage. A field is -1 when this host
// cannot report it (for example no memory controller).
type Stats struct {
	MemoryCurrent int64 `json:"memory_current_bytes"`
	MemoryPeak    int64 `json:"memory_peak_bytes"`
	PidsCurrent   int64 `json:"pids_current"`
	PidsPeak      int64 `json:"pids_peak"`
	// PidsLimitHits counts fork/clone calls refused by the pids limit.
	PidsLimitHits int64 `json:"pids_limit_hits"`
	// OOMKills counts processes the OOM killer killed in the group.
	OOMKills int64 `json:"oom_kills"`
}

// Description says where a group lives and what limits it, for events
// and status output.
type Description struct {
	Name string `json:"name"`
	// Mode is "v2" (every controller through the unified hierarchy), "v1"
	// (no unified hierarchy) or "hybrid".
	Mode string `json:"mode"`
	// Paths maps each hierarchy the group is in (Unified or a v1
	// controller name) to its directory.
	Paths map[string]string `json:"paths"`
	// Controllers maps each limited controller to the hierarchy that
	// enforces it ("unified" or its v1 name).
	Controllers map[string]string `json:"controllers"`
	Limits      Limits            `json:"limits"`
	// KillMethod is "cgroup.kill", "freeze+sigkill" or "sigkill".
	KillMethod string `json:"kill_method"`
}
