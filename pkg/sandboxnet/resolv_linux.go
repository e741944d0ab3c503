//go:build linux

package sandboxnet

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/palisade-sandbox/palisade/pkg/policydns"
)

// writeResolv writes the sandbox's resolv.conf (nameserver: the host
// side of the veth, where the policy DNS answers) and its hosts file
// (loopback names and the sandbox's own hostname only), next to the
// trust bundle: every name the sandbox resolves goes to the policy DNS,
// none is answered from the host's /etc/hosts behind its back.
func (p *proxyProc) writeResolv() error {
	p.resolv = filepath.Join(p.dir, ResolvName)
	if err := os.WriteFile(p.resolv, policydns.ResolvConf(p.fence.HostAddr.String()), 0o644); err != nil {
		return fmt.Errorf("sandboxnet: %s: %w", p.resolv, err)
	}
	p.hosts = filepath.Join(p.dir, HostsName)
	if err := os.WriteFile(p.hosts, policydns.Hosts(p.name), 0o644); err != nil {
		return fmt.Errorf("sandboxnet: %s: %w", p.hosts, err)
	}
	return nil
}

// ResolvConf implements sandbox.ResolvSource: the host path of the named
// sandbox's resolv.conf, "" when it has no proxy.
func (a *Attacher) ResolvConf(sandbox string) string {
	if p := a.proxy(sandbox); p != nil {
		return p.resolv
	}
	return ""
}

// Hosts implements sandbox.ResolvSource: the host path of the named
// sandbox's /etc/hosts, "" when it has no proxy.
func (a *Attacher) Hosts(sandbox string) string {
	if p := a.proxy(sandbox); p != nil {
		return p.hosts
	}
	return ""
}
