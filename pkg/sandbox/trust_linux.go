//go:build linux

package sandbox

import specs "github.com/opencontainers/runtime-spec/specs-go"

// addTrust puts the bundle into a sandbox's spec: mounts, variables, and
// a Landlock read grant for TrustBundlePath (the system paths are
// readable when the policy grants them, as before).
func addTrust(spec *specs.Spec, cfg *InitConfig, bundle string) {
	spec.Mounts = append(spec.Mounts, TrustMounts(bundle)...)
	spec.Process.Env = mergeEnv(spec.Process.Env, TrustEnv())
	if cfg.Landlock != nil {
		cfg.Landlock.ReadOnly = append(cfg.Landlock.ReadOnly, TrustBundlePath)
	}
}

// addResolv puts the policy DNS's resolv.conf and hosts file into a
// sandbox's spec, with Landlock read grants for them.
func addResolv(spec *specs.Spec, cfg *InitConfig, resolv, hosts string) {
	var m []specs.Mount
	if resolv != "" {
		m = append(m, ResolvMounts(resolv)...)
	}
	if hosts != "" {
		m = append(m, HostsMounts(hosts)...)
	}
	spec.Mounts = append(spec.Mounts, m...)
	if cfg.Landlock != nil {
		for _, x := range m {
			cfg.Landlock.ReadOnly = append(cfg.Landlock.ReadOnly, x.Destination)
		}
	}
}
