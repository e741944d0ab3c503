//go:build !unix

package tlsca

const syscallNoFollow = 0
