package sandbox

import (
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// TrustSource is implemented by a NetworkAttacher whose proxy inspects
// TLS: after Attach, TrustBundle names the host file holding the combined
// trust bundle (system roots + the proxy's per-sandbox CA certificate;
// never a key), or "" when there is none. The sandbox sees that file
// read-only at TrustBundlePath and at every standard system bundle path
// the host has, and the CA variables (TrustEnv) point at it.
type TrustSource interface {
	TrustBundle(sandbox string) string
}

// TrustBundlePath is where the combined bundle always appears in a
// sandbox (on its private /run).
const TrustBundlePath = "/run/palisade/ca-bundle.pem"

// CAEnvVars are the variables that point TLS clients at the bundle:
// OpenSSL and Go, Python requests, curl, Node, git and pip. They are
// reserved: --env cannot override them.
var CAEnvVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT"}

// TrustEnv is CAEnvVars set to TrustBundlePath.
func TrustEnv() []string {
	out := make([]string, len(CAEnvVars))
	for i, k := range CAEnvVars {
		out[i] = k + "=" + TrustBundlePath
	}
	return out
}

// TrustMounts are the read-only bind mounts of bundle: at TrustBundlePath
// and over each standard system bundle (tlsca.SystemBundlePaths) that
// exists on the host as a regular file (symlinks resolved, each file
// once). A path the host does not have is not created.
func TrustMounts(bundle string) []specs.Mount {
	opts := []string{"bind", "ro", "nosuid", "nodev", "noexec"}
	out := []specs.Mount{{Destination: TrustBundlePath, Type: "bind", Source: bundle, Options: opts}}
	seen := map[string]bool{TrustBundlePath: true}
	for _, p := range tlsca.SystemBundlePaths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		seen[real] = true
		out = append(out, specs.Mount{Destination: real, Type: "bind", Source: bundle, Options: opts})
	}
	return out
}
