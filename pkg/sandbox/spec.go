package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Default sizes of the sandbox's private filesystems.
const (
	DefaultTmpSize   = "2g"
	DefaultShmSize   = "64m"
	DefaultRunSize   = "16m"
	DefaultPidsLimit = 2048
)

// Bounded-tmpfs profile (seed 000 "Verifier resources").
const (
	ProfileDefault      = "default"
	ProfileBoundedTmpfs = "bounded-tmpfs"
	BoundedStoragePath  = "/tmp/mac-test-storage"
	BoundedStorageSize  = "8g"
	BoundedCPUs         = 12
	BoundedMemory       = 32 << 30
	BoundedJobs         = "8"
)

// Annotation keys Palisade puts on the spec.
const (
	AnnotationName       = "io.palisade.sandbox.name"
	AnnotationKind       = "io.palisade.sandbox.kind"
	AnnotationPolicySHA  = "io.palisade.policy.sha256"
	AnnotationCompat     = "io.palisade.landlock.compatibility"
	AnnotationProfile    = "io.palisade.profile"
	AnnotationStorageDir = "io.palisade.profile.storage"
)

// SpecInput is everything the spec is built from.
type SpecInput struct {
	Name string
	Kind string
	Args []string
	// KeepAlive: no main command (Args empty); the sandbox stays up for
	// execs until it is deleted.
	KeepAlive bool
	Env       []string // final environment, already scrubbed and rebuilt
	Workdir   string   // absolute; bound read-write at the same path
	// Home is HOME in the sandbox and HomeSource the host directory bound
	// there (read-write); both empty: no HOME mount (Home equal to Workdir
	// needs none either).
	Home, HomeSource string
	UID, GID         uint32
	TTY              bool
	Hostname         string
	PolicySHA        string
	Compat           string // best_effort | hard_requirement
	Profile          string
	PidsLimit        int64
	MemoryBytes      int64   // 0: no limit
	CPUs             float64 // 0: no limit
	HidePaths        []string
	TmpSize          string
}

// BuildSpec builds the OCI runtime spec of one sandbox. It is pure: the
// same input gives the same spec, so `sandbox-supervisor spec` prints
// exactly what `run` would use.
func BuildSpec(in SpecInput) (*specs.Spec, error) {
	if len(in.Args) == 0 && !in.KeepAlive {
		return nil, fmt.Errorf("sandbox: no command given")
	}
	if len(in.Args) != 0 && in.KeepAlive {
		return nil, fmt.Errorf("sandbox: a kept-alive sandbox has no main command")
	}
	if !filepath.IsAbs(in.Workdir) || filepath.Clean(in.Workdir) == "/" {
		return nil, fmt.Errorf("sandbox: workdir %q must be an absolute path other than /", in.Workdir)
	}
	if in.UID == 0 || in.GID == 0 {
		return nil, fmt.Errorf("sandbox: refusing to run as uid %d gid %d: never root", in.UID, in.GID)
	}
	for _, p := range in.HidePaths {
		if under(in.Workdir, p) {
			return nil, fmt.Errorf("sandbox: workdir %s lies inside hidden supervisor state %s", in.Workdir, p)
		}
		if in.Home != "" && in.Home != DefaultHome && (under(in.Home, p) || under(in.HomeSource, p)) {
			return nil, fmt.Errorf("sandbox: --home %s lies inside hidden supervisor state %s", in.Home, p)
		}
	}
	if (in.Home == "") != (in.HomeSource == "") || in.Home != "" && (!filepath.IsAbs(in.Home) || !filepath.IsAbs(in.HomeSource)) {
		return nil, fmt.Errorf("sandbox: home %q from %q: want two absolute paths or none", in.Home, in.HomeSource)
	}
	tmpSize := in.TmpSize
	if tmpSize == "" {
		tmpSize = DefaultTmpSize
	}
	pids := in.PidsLimit
	if pids <= 0 {
		pids = DefaultPidsLimit
	}
	mode := func(m os.FileMode) *os.FileMode { return &m }
	zero := uint32(0)
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: in.Hostname,
		Root:     &specs.Root{Path: "/"},
		Process: &specs.Process{
			Terminal:        in.TTY,
			User:            specs.User{UID: in.UID, GID: in.GID},
			Args:            append([]string(nil), in.Args...),
			Env:             append([]string(nil), in.Env...),
			Cwd:             in.Workdir,
			NoNewPrivileges: true,
			// Every set empty: nothing survives the drop.
			Capabilities: &specs.LinuxCapabilities{
				Bounding: []string{}, Effective: []string{}, Inheritable: []string{},
				Permitted: []string{}, Ambient: []string{},
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_CORE", Hard: 0, Soft: 0}},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "nodev", "noexec", "mode=1777", "size=" + DefaultShmSize}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "nodev", "noexec", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=" + tmpSize}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "noexec", "mode=755", "size=" + DefaultRunSize}},
		},
		Annotations: map[string]string{
			AnnotationName:      in.Name,
			AnnotationKind:      in.Kind,
			AnnotationPolicySHA: in.PolicySHA,
			AnnotationCompat:    in.Compat,
			AnnotationProfile:   orDefault(in.Profile, ProfileDefault),
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.MountNamespace}, {Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.CgroupNamespace},
			},
			CgroupsPath: "/palisade/" + in.Name,
			Resources:   &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &pids}},
			Devices: []specs.LinuxDevice{
				{Path: "/dev/null", Type: "c", Major: 1, Minor: 3, FileMode: mode(0o666), UID: &zero, GID: &zero},
				{Path: "/dev/zero", Type: "c", Major: 1, Minor: 5, FileMode: mode(0o666), UID: &zero, GID: &zero},
				{Path: "/dev/full", Type: "c", Major: 1, Minor: 7, FileMode: mode(0o666), UID: &zero, GID: &zero},
				{Path: "/dev/random", Type: "c", Major: 1, Minor: 8, FileMode: mode(0o666), UID: &zero, GID: &zero},
				{Path: "/dev/urandom", Type: "c", Major: 1, Minor: 9, FileMode: mode(0o666), UID: &zero, GID: &zero},
				{Path: "/dev/tty", Type: "c", Major: 5, Minor: 0, FileMode: mode(0o666), UID: &zero, GID: &zero},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
				"/proc/latency_stats", "/proc/sched_debug", "/proc/scsi", "/proc/timer_list",
				"/proc/timer_stats", "/proc/kallsyms", "/sys/firmware", "/sys/devices/virtual/powercap",
			},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	if in.MemoryBytes > 0 {
		m := in.MemoryBytes
		s.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &m, Swap: &m}
	}
	if in.CPUs > 0 {
		period := uint64(100000)
		quota := int64(in.CPUs * float64(period))
		s.Linux.Resources.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if in.Profile == ProfileBoundedTmpfs {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: BoundedStoragePath, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=1777", "size=" + BoundedStorageSize}})
		s.Annotations[AnnotationStorageDir] = BoundedStoragePath
	}
	// Hide supervisor state and host sockets that are not already under
	// one of the fresh filesystems above.
	hide := append([]string(nil), in.HidePaths...)
	sort.Strings(hide)
	for _, p := range hide {
		if coveredByMount(s.Mounts, p) {
			continue
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: p, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "noexec", "ro", "mode=000", "size=4k"}})
	}
	// HOME and the workdir come last so that they show through /tmp,
	// /run or any other fresh filesystem they lie under; the workdir after
	// HOME, so that a workdir inside HOME shows through it.
	if in.Home != "" && filepath.Clean(in.Home) != filepath.Clean(in.Workdir) {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: filepath.Clean(in.Home), Type: "bind", Source: in.HomeSource,
			Options: []string{"rbind", "nosuid", "nodev"}})
	}
	s.Mounts = append(s.Mounts, specs.Mount{Destination: in.Workdir, Type: "bind", Source: in.Workdir,
		Options: []string{"rbind", "nosuid", "nodev"}})
	return s, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// under reports whether p is dir or lies below it.
func under(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func coveredByMount(ms []specs.Mount, p string) bool {
	for _, m := range ms {
		if m.Type != "bind" && under(p, m.Destination) {
			return true
		}
	}
	return false
}
