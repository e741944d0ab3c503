//go:build !unix

package ocsf

// openFlags has no symlink guard where the platform has no O_NOFOLLOW;
// Palisade runs on Linux only, this keeps `go vet` working elsewhere.
const openFlags = 0
