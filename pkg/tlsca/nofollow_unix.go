//go:build unix

package tlsca

import "syscall"

const syscallNoFollow = syscall.O_NOFOLLOW
