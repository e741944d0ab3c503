//go:build !linux

package probe

import "github.com/palisade-sandbox/palisade/pkg/feature"

// Run reports every check as failed: the checks exist only on Linux.
func Run(t Targets) []Result {
	var out []Result
	for _, s := range Catalog() {
		out = append(out, Result{Check: s.Name, Group: s.Group, Expected: s.Expected, Observed: feature.ErrNotSupported.Error()})
	}
	return out
}

// HelperCommand is the hidden first argument of helper children.
const HelperCommand = "__palisade_probe_helper"

// RunHelper is unsupported off Linux.
func RunHelper(string) int { return 2 }
