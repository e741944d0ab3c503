package sandbox

import (
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ResolvSource is implemented by a NetworkAttacher that serves the
// sandbox a policy DNS: after Attach, ResolvConf and Hosts name the host
// files the sandbox sees read-only as /etc/resolv.conf and /etc/hosts,
// or "" when there are none (no proxy).
type ResolvSource interface {
	ResolvConf(sandbox string) string
	Hosts(sandbox string) string
}

// ResolvConfPath and HostsPath are where resolvers look.
const (
	ResolvConfPath = "/etc/resolv.conf"
	HostsPath      = "/etc/hosts"
)

// ResolvMounts are the read-only bind mounts of file over
// /etc/resolv.conf: at the path itself and, when the host's is a
// symbolic link to a regular file (systemd-resolved's stub), over its
// target too, so the link resolves to the policy DNS either way.
func ResolvMounts(file string) []specs.Mount { return etcMounts(ResolvConfPath, file) }

// HostsMounts are the read-only bind mounts of file over /etc/hosts, as
// ResolvMounts.
func HostsMounts(file string) []specs.Mount { return etcMounts(HostsPath, file) }

func etcMounts(path, file string) []specs.Mount {
	opts := []string{"bind", "ro", "nosuid", "nodev", "noexec"}
	dst := path
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() {
			dst = real
		}
	}
	return []specs.Mount{{Destination: dst, Type: "bind", Source: file, Options: opts}}
}
