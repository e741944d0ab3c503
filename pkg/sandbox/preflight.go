package sandbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/feature"
	"github.com/palisade-sandbox/palisade/pkg/landlock"
	"github.com/palisade-sandbox/palisade/pkg/landlockaudit"
)

// PreflightFeatures are the probes `sandbox-supervisor preflight` reports,
// in display order.
var PreflightFeatures = []string{
	"root", "landlock", "seccomp",
	"ns:mnt", "ns:pid", "ns:ipc", "ns:uts", "ns:net", "ns:cgroup",
	"cgroup", "nftables",
	"bpf:cgroup_sock_addr", "bpf:cgroup_sock", "bpf:sock_ops", "bpf:tracepoint", "bpf:sk_msg",
	"audit",
}

// FeatureResult is one typed preflight result.
type FeatureResult struct {
	Name        string `json:"name"`
	OK          bool   `json:"ok"`
	MinKernel   string `json:"min_kernel,omitempty"`
	Detail      string `json:"detail,omitempty"`
	Confinement bool   `json:"confinement"` // missing it weakens the sandbox
}

// Preflight is the outcome of probing every feature.
type Preflight struct {
	Results     []FeatureResult `json:"features"`
	LandlockABI int             `json:"landlock_abi"`
	// Landlock is what a sandbox's ruleset enforces on this kernel: the
	// ABI in use, the handled filesystem rights, the IPC scopes and the
	// denial-logging flag (full preflight only).
	Landlock *landlock.Result `json:"landlock,omitempty"`
	// Audit says how refused accesses reach the supervisor's events
	// (full preflight only).
	Audit string `json:"audit,omitempty"`
}

// Prober checks one named feature; nil means present. feature.Check is
// the real one; tests substitute their own to simulate a missing feature.
type Prober func(name string) error

// RunFeatures are the probes a sandbox start needs (eBPF is optional and
// nftables matters only with network policies): fewer probes, faster start.
var RunFeatures = []string{
	"root", "landlock", "seccomp",
	"ns:mnt", "ns:pid", "ns:ipc", "ns:uts", "ns:net", "ns:cgroup", "cgroup",
}

// RunPreflight probes the named features (nil: every one in
// PreflightFeatures).
func RunPreflight(probe Prober, names ...string) Preflight {
	if probe == nil {
		probe = feature.Check
	}
	full := len(names) == 0
	if full {
		names = PreflightFeatures
	}
	var pf Preflight
	for _, name := range names {
		r := FeatureResult{Name: name, OK: true}
		if p, ok := feature.Lookup(name); ok {
			r.MinKernel, r.Confinement = p.MinKernel, p.Confinement
		}
		if err := probe(name); err != nil {
			r.OK = false
			var m *feature.MissingError
			if errors.As(err, &m) {
				r.Detail = m.Reason
				if m.MinKernel != "" {
					r.MinKernel = m.MinKernel
				}
			} else {
				r.Detail = err.Error()
			}
		}
		pf.Results = append(pf.Results, r)
	}
	if pf.ok("landlock") {
		if abi, err := feature.LandlockABI(); err == nil {
			pf.LandlockABI = abi
		}
	}
	if full {
		if o := landlock.Offer(); o.ABI > 0 {
			pf.Landlock = &o
		}
		pf.Audit = landlockaudit.Describe()
		if r := pf.result("audit"); !r.OK {
			pf.Audit = "unavailable: " + r.Detail
		}
		if pf.Landlock != nil && pf.Landlock.ABI < landlock.MinLogABI {
			pf.Audit = fmt.Sprintf("unavailable: Landlock ABI %d logs no denials (needs ABI >= %d)", pf.Landlock.ABI, landlock.MinLogABI)
		}
	}
	return pf
}

func (pf Preflight) ok(name string) bool {
	for _, r := range pf.Results {
		if r.Name == name {
			return r.OK
		}
	}
	return false
}

func (pf Preflight) result(name string) FeatureResult {
	for _, r := range pf.Results {
		if r.Name == name {
			return r
		}
	}
	return FeatureResult{Name: name}
}

// Plan is what the sandbox will enforce given the preflight and the
// operator's choices.
type Plan struct {
	Landlock bool
	Seccomp  bool
	Degraded []Degradation
}

// Degradation is one weakened layer and who allowed it.
type Degradation struct {
	Feature string
	Detail  string
	OptIn   string // "landlock.compatibility: best_effort" or "--allow-degraded"
}

// Decide applies the fail-closed rules:
//
//   - root, every namespace and cgroups are always required:
//     --allow-degraded does not drop them; nftables is required (and not
//     degradable) when the policy has network entries (the fence needs it);
//   - Landlock is required under hard_requirement or when required is
//     set (MAC_OPENSHELL_REQUIRED); best_effort runs without it and says so;
//   - seccomp is required unless --allow-degraded (the only layer that
//     flag can drop), and never degradable under hard_requirement or
//     required;
//   - under hard_requirement or required, --allow-degraded changes
//     nothing: every missing feature aborts the run.
func Decide(pf Preflight, hard, required, allowDegraded bool, needNetwork bool) (Plan, error) {
	strict := hard || required
	why := "landlock.compatibility: hard_requirement"
	if !hard {
		why = "MAC_OPENSHELL_REQUIRED"
	}
	plan := Plan{Landlock: true, Seccomp: true}
	var missing []string
	need := func(name string, degradable bool, onDegrade func()) {
		r := pf.result(name)
		if r.OK {
			return
		}
		desc := fmt.Sprintf("%s (%s)", name, r.Detail)
		if r.MinKernel != "" {
			desc = fmt.Sprintf("%s (needs Linux >= %s: %s)", name, r.MinKernel, r.Detail)
		}
		if degradable && allowDegraded && !strict {
			plan.Degraded = append(plan.Degraded, Degradation{Feature: name, Detail: r.Detail, OptIn: "--allow-degraded"})
			if onDegrade != nil {
				onDegrade()
			}
			return
		}
		missing = append(missing, desc)
	}
	need("root", false, nil)
	for _, ns := range []string{"ns:mnt", "ns:pid", "ns:ipc", "ns:uts", "ns:net", "ns:cgroup"} {
		need(ns, false, nil)
	}
	need("cgroup", false, nil)
	need("seccomp", true, func() { plan.Seccomp = false })
	if needNetwork {
		need("nftables", false, nil)
	}
	if r := pf.result("landlock"); !r.OK || pf.LandlockABI < 3 && strict {
		switch {
		case strict && r.OK:
			missing = append(missing, fmt.Sprintf("landlock (needs ABI >= 3, Linux >= 5.19; kernel offers ABI %d)", pf.LandlockABI))
		case strict:
			missing = append(missing, fmt.Sprintf("landlock (needs Linux >= %s: %s)", r.MinKernel, r.Detail))
		default:
			plan.Landlock = false
			plan.Degraded = append(plan.Degraded, Degradation{Feature: "landlock", Detail: r.Detail, OptIn: "landlock.compatibility: best_effort"})
		}
	}
	if len(missing) > 0 {
		mode := ""
		if strict {
			mode = " (" + why + ")"
		}
		return plan, fmt.Errorf("required kernel features missing%s: %s", mode, strings.Join(missing, "; "))
	}
	return plan, nil
}
