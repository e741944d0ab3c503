package probe

import (
	"os"
	"path/filepath"
	"strings"
)

// Targets are the paths and addresses the checks aim at. The launcher
// derives the paths from the policy the sandbox gets; --inside without
// them uses DefaultTargets (right for the bundled default policy).
type Targets struct {
	// Protected are directories outside the policy that must not be
	// listable (the first is also the symlink-escape target).
	Protected []string
	// WritableOutside is a world-writable directory outside the policy
	// ("" when the host has none): only Landlock stops the write.
	WritableOutside string
	// ReadOnly is a directory the policy grants read-only.
	ReadOnly string
	// Writable is a directory the policy grants read-write ("" means the
	// working directory).
	Writable string
}

// DefaultTargets suit the bundled default policy.
func DefaultTargets() Targets {
	return Targets{Protected: []string{"/root", "/var"}, WritableOutside: "/var/tmp", ReadOnly: "/usr"}
}

// The egress targets: TEST-NET addresses and a reserved name, so a broken
// fence can leak nothing to a real host.
const (
	DirectAddr = "198.51.100.7:443"
	UDPAddr    = "198.51.100.7:9"
	DNSAddr    = "198.51.100.53:53"
	V6Addr     = "[2001:db8::7]:443"
	DeniedHost = "denied.palisade-probe.invalid"
	DeniedIP   = "198.51.100.7"
)

// Args renders t as the --inside flags that carry it.
func (t Targets) Args() []string {
	a := []string{"--protected", strings.Join(t.Protected, ","), "--writable-outside", t.WritableOutside, "--read-only-path", t.ReadOnly}
	if t.Writable != "" {
		a = append(a, "--writable", t.Writable)
	}
	return a
}

// PolicyPaths is the filesystem part of a policy that TargetsFor needs.
type PolicyPaths struct {
	ReadOnly, ReadWrite []string
	IncludeWorkdir      bool
	Workdir             string
}

// covered reports whether p lies at or under one of the granted paths.
func covered(p string, granted []string) bool {
	for _, g := range granted {
		g = filepath.Clean(g)
		if p == g || g == "/" || strings.HasPrefix(p, g+"/") {
			return true
		}
	}
	return false
}

// TargetsFor picks targets on this host for a sandbox with the given
// paths: protected directories that exist and lie outside every granted
// path, a world-writable (sticky) directory outside them, a read-only
// directory the policy grants, and the directory the policy grants
// read-write (the working directory when included).
func TargetsFor(p PolicyPaths) Targets {
	granted := append(append([]string(nil), p.ReadOnly...), p.ReadWrite...)
	if p.IncludeWorkdir && p.Workdir != "" {
		granted = append(granted, p.Workdir)
	}
	// /tmp, /dev and /proc are private to the sandbox, /run is a tmpfs:
	// the host's copies are not what the sandbox sees.
	private := []string{"/tmp", "/dev", "/proc", "/run", "/sys"}
	var t Targets
	for _, c := range []string{"/root", "/var", "/home", "/boot", "/srv", "/opt", "/mnt", "/media"} {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() && !covered(c, granted) {
			t.Protected = append(t.Protected, c)
		}
	}
	for _, c := range []string{"/var/tmp", "/var/crash", "/var/mail"} {
		fi, err := os.Stat(c)
		if err == nil && fi.IsDir() && fi.Mode().Perm()&0o002 != 0 && !covered(c, granted) && !covered(c, private) {
			t.WritableOutside = c
			break
		}
	}
	for _, r := range p.ReadOnly {
		if fi, err := os.Stat(r); err == nil && fi.IsDir() && !covered(r, p.ReadWrite) && !covered(r, private) {
			t.ReadOnly = r
			break
		}
	}
	if p.IncludeWorkdir && p.Workdir != "" {
		t.Writable = p.Workdir
	} else {
		for _, w := range p.ReadWrite {
			if fi, err := os.Stat(w); err == nil && fi.IsDir() {
				t.Writable = w
				break
			}
		}
	}
	return t
}
