//go:build linux

package sandboxnet

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
)

// wantsTCPSubstrate reports whether the policy the sandbox starts with
// has a `protocol: tcp` endpoint: then its proxy serves the policy DNS
// and transparent TCP, and the fence admits DNS to it and redirects the
// synthetic range. Without one, neither exists for the sandbox's life (a
// reload that adds the first tcp endpoint is rejected by the proxy). A
// policy that does not load gets no substrate: the proxy, which loads it
// next, refuses to start and says why.
func wantsTCPSubstrate(path string) bool {
	pol, err := policy.LoadFile(path)
	if err != nil {
		return false
	}
	return len(policydns.TCPNames(pol)) > 0
}

// writeResolv writes the sandbox's resolv.conf (nameserver: the host
// side of the veth) next to the trust bundle, when the substrate is on.
func (p *proxyProc) writeResolv() error {
	if !p.tcp {
		return nil
	}
	p.resolv = filepath.Join(p.dir, ResolvName)
	if err := os.WriteFile(p.resolv, policydns.ResolvConf(p.fence.HostAddr.String()), 0o644); err != nil {
		return fmt.Errorf("sandboxnet: %s: %w", p.resolv, err)
	}
	return nil
}

// ResolvConf implements sandbox.ResolvSource: the host path of the named
// sandbox's resolv.conf, "" when its policy has no protocol: tcp
// endpoint.
func (a *Attacher) ResolvConf(sandbox string) string {
	if p := a.proxy(sandbox); p != nil {
		return p.resolv
	}
	return ""
}
