package seccomp

import (
	"errors"
	"fmt"
)

// ErrNoNewPrivs is returned by Install when no_new_privs is not set on the
// calling thread. The caller sets it (prctl(PR_SET_NO_NEW_PRIVS, 1)) as
// part of its privilege drop, on the same locked OS thread.
var ErrNoNewPrivs = errors.New("no_new_privs is not set on the calling thread: call prctl(PR_SET_NO_NEW_PRIVS, 1) on this locked OS thread before installing the filter")

// TSYNCError reports that the kernel could not apply the filter to every
// thread (SECCOMP_FILTER_FLAG_TSYNC): thread TID already runs under a
// filter that is not an ancestor of the caller's. Nothing was installed.
type TSYNCError struct {
	TID int // 0 when the kernel could not name the thread (ESRCH)
}

func (e *TSYNCError) Error() string {
	if e.TID == 0 {
		return "seccomp: TSYNC failed: a thread of this process could not be synchronised; no filter installed"
	}
	return fmt.Sprintf("seccomp: TSYNC failed: thread %d could not be synchronised; no filter installed", e.TID)
}
