// Package landlockaudit turns the kernel's Landlock audit records into
// per-access filesystem denial events.
package landlockaudit

import "errors"

var errTimeout = errors.New("audit: read timed out")
