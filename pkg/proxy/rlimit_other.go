//go:build !linux

package proxy

// FDsPerTunnel is what one open tunnel costs the proxy in descriptors.
const FDsPerTunnel = 6

// CheckFDLimit does not check anything off Linux.
func CheckFDLimit(int) error { return nil }

// FitFDLimit changes nothing off Linux.
func FitFDLimit(maxConns int, explicit bool) (int, string, error) { return maxConns, "", nil }
