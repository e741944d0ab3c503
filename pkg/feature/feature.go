// Package feature probes the kernel features Palisade's confinement rests
// on. Each probe runs once per process and returns nil or a *MissingError
// that names the feature, the minimum kernel and the reason, so the
// supervisor's fail-closed logic, `sandbox-supervisor preflight`,
// confinement-probe and the test helpers all read the same answer.
//
// Probes are registered by name; later layers add their own (for example
// eBPF program types) with Register.
package feature

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// ErrNotSupported is returned by kernel packages on platforms where the
// feature cannot exist at all (non-Linux builds).
var ErrNotSupported = errors.New("not supported on this platform")

// MissingError says that a kernel feature is absent or unusable.
type MissingError struct {
	Feature   string // e.g. "landlock"
	MinKernel string // e.g. "5.13"
	Reason    string // what the probe saw
}

func (e *MissingError) Error() string {
	s := fmt.Sprintf("kernel feature %q unavailable", e.Feature)
	if e.MinKernel != "" {
		s += fmt.Sprintf(" (needs Linux >= %s)", e.MinKernel)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Probe describes one feature check.
type Probe struct {
	Name      string
	MinKernel string
	// Confinement is true for features whose absence weakens the sandbox
	// (as opposed to optional accelerations such as eBPF attribution).
	Confinement bool
	// HostShape marks a probe that tells which of several supported host
	// layouts this is (for example a hybrid cgroup host as opposed to a
	// pure cgroup v2 one), not a capability the host lacks. A test that
	// needs one layout has nothing to test on a host of another, so the
	// test helpers skip it even where every other missing feature fails.
	HostShape bool
	Check     func() error // nil: present; otherwise why not

	once sync.Once
	err  error
}

var (
	mu     sync.Mutex
	probes = map[string]*Probe{}
)

// Register adds a probe. Registering a name twice panics: names are API.
func Register(p *Probe) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := probes[p.Name]; dup {
		panic("feature: duplicate probe " + p.Name)
	}
	probes[p.Name] = p
}

// Lookup returns the probe registered under name.
func Lookup(name string) (*Probe, bool) {
	mu.Lock()
	defer mu.Unlock()
	p, ok := probes[name]
	return p, ok
}

// Names lists the registered probes in sorted order.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(probes))
	for n := range probes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Check runs the named probe once and returns its cached result. An
// unknown name is itself an error.
func Check(name string) error {
	p, ok := Lookup(name)
	if !ok {
		return fmt.Errorf("feature: no probe named %q", name)
	}
	return p.Result()
}

// Result runs the probe once and caches the answer. A probe error that is
// not already a *MissingError is wrapped into one.
func (p *Probe) Result() error {
	p.once.Do(func() {
		err := p.Check()
		if err == nil {
			return
		}
		var m *MissingError
		if !errors.As(err, &m) {
			err = &MissingError{Feature: p.Name, MinKernel: p.MinKernel, Reason: err.Error()}
		}
		p.err = err
	})
	return p.err
}
