//go:build unix

package ocsf

import "syscall"

// openFlags refuses a symlink at the events path and keeps the fd out of
// children.
const openFlags = syscall.O_NOFOLLOW | syscall.O_CLOEXEC
