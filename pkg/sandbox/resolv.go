package sandbox

import (
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ResolvSource is implemented by a NetworkAttacher that serves the
// sandbox a policy DNS: after Attach, ResolvConf names the host file the
// sandbox sees read-only as /etc/resolv.conf, or "" when there is none
// (the policy has no protocol: tcp endpoint; DNS then fails in the
// sandbox, as every other UDP does).
type ResolvSource interface {
	ResolvConf(sandbox string) string
}

// ResolvConfPath is where resolvers look.
const ResolvConfPath = "/etc/resolv.conf"

// ResolvMounts are the read-only bind mounts of file over
// /etc/resolv.conf: at the path itself and, when the host's is a
// symbolic link to a regular file (systemd-resolved's stub), over its
// target too, so the link resolves to the policy DNS either way.
func ResolvMounts(file string) []specs.Mount {
	opts := []string{"bind", "ro", "nosuid", "nodev", "noexec"}
	dst := ResolvConfPath
	if real, err := filepath.EvalSymlinks(ResolvConfPath); err == nil && real != ResolvConfPath {
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() {
			dst = real
		}
	}
	return []specs.Mount{{Destination: dst, Type: "bind", Source: file, Options: opts}}
}
