//go:build linux

package sandbox

import "github.com/palisade-sandbox/palisade/pkg/landlockaudit"

// FileDenied implements DenialEvents: a File System Activity (1001)
// event naming the path, the blocking rights, the process and the policy.
func (e *OCSFEvents) FileDenied(d landlockaudit.Denial) {
	e.send(d.Event(e.src, e.policy))
}

// DenialLogging implements DenialEvents: a Device Config State Change
// (5019) "Denial Logging", emitted when denials cannot be reported.
func (e *OCSFEvents) DenialLogging(enabled bool, detail string) {
	e.send(e.src.DenialLogging(enabled, detail))
}
