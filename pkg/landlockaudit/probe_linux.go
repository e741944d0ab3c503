//go:build linux

package landlockaudit

import (
	"fmt"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

func init() {
	feature.Register(&feature.Probe{Name: "audit", MinKernel: "3.16", Check: probe})
}

// probe checks that the audit status can be read and the read-log
// multicast group joined: what a supervisor needs to report denials.
func probe() error {
	if _, err := GetStatus(); err != nil {
		return err
	}
	r, err := OpenReader()
	if err != nil {
		return err
	}
	return r.Close()
}

// Describe says, without changing anything, how a sandbox started now
// would get its denial records.
func Describe() string {
	st, err := GetStatus()
	if err != nil {
		return "unavailable: " + err.Error()
	}
	switch {
	case st.PID != 0 && st.Enabled == 0:
		return fmt.Sprintf("unavailable: audit daemon pid %d keeps audit disabled (left alone)", st.PID)
	case st.PID != 0:
		return fmt.Sprintf("audit daemon pid %d owns audit: read-only from the multicast group", st.PID)
	case st.Enabled != 0:
		return "audit on, no audit daemon: read-only from the multicast group"
	default:
		return "audit off, no audit daemon: enabled while sandboxes run, then restored"
	}
}
