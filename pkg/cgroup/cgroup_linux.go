//go:build linux

package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// Minimum kernels for the controllers, for feature probe messages.
var controllerKernels = map[string]string{
	Pids:   "4.3",
	Memory: "2.6.29",
	CPU:    "3.2",
}

func init() {
	for _, c := range []string{Pids, Memory, CPU} {
		c := c
		feature.Register(&feature.Probe{
			Name:        "cgroup:" + c,
			MinKernel:   controllerKernels[c],
			Confinement: true,
			Check:       func() error { return currentLayout().available(c) },
		})
	}
	// Host layouts, for tests that exercise one of them (see
	// docs/development.md): both are supported, neither is a lack.
	feature.Register(&feature.Probe{
		Name: LayoutHybrid, MinKernel: "4.5", HostShape: true,
		Check: func() error { return currentLayout().isHybrid() },
	})
	feature.Register(&feature.Probe{
		Name: LayoutUnified, MinKernel: "4.15", HostShape: true,
		Check: func() error { return currentLayout().isUnified() },
	})
}

// Host-layout probe names.
const (
	// LayoutHybrid: a cgroup2 hierarchy mounted beside v1 hierarchies that
	// hold at least one of the pids, memory and cpu controllers.
	LayoutHybrid = "cgroup-layout:hybrid"
	// LayoutUnified: pure cgroup v2, the pids, memory and cpu controllers
	// all in the cgroup2 hierarchy.
	LayoutUnified = "cgroup-layout:unified"
)

// haveUnified says why there is no usable cgroup2 hierarchy, or nil.
func (l *layout) haveUnified() error {
	if l.err != nil {
		return l.err
	}
	if l.unified == "" {
		return errors.New("no cgroup2 hierarchy is mounted")
	}
	return nil
}

func (l *layout) isHybrid() error {
	if err := l.haveUnified(); err != nil {
		return err
	}
	for _, c := range []string{Pids, Memory, CPU} {
		if !l.v2[c] && l.v1[c] != "" {
			return nil
		}
	}
	return errors.New("no v1 hierarchy holds the pids, memory or cpu controller")
}

func (l *layout) isUnified() error {
	if err := l.haveUnified(); err != nil {
		return err
	}
	for _, c := range []string{Pids, Memory, CPU} {
		if !l.v2[c] {
			where := "no hierarchy"
			if l.v1[c] != "" {
				where = "a v1 hierarchy at " + l.v1[c]
			}
			return fmt.Errorf("the %s controller is in %s, not in the cgroup2 hierarchy %s", c, where, l.unified)
		}
	}
	return nil
}

// Supported reports whether this host can create sandbox groups at all:
// nil when the pids controller (the one limit every sandbox gets) is
// available, else a *feature.MissingError.
func Supported() error { return feature.Check("cgroup:" + Pids) }

// layout is where the cgroup hierarchies are mounted.
type layout struct {
	unified string            // cgroup2 mount point, "" if none
	v2      map[string]bool   // controllers the v2 root offers
	v1      map[string]string // v1 controller -> mount point
	err     error             // reading /proc/self/mountinfo failed
}

var currentLayout = sync.OnceValue(func() *layout {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return &layout{err: fmt.Errorf("cgroup: read mount table: %w", err)}
	}
	l := parseMountinfo(b)
	if l.unified != "" {
		if c, err := os.ReadFile(filepath.Join(l.unified, "cgroup.controllers")); err == nil {
			for _, f := range strings.Fields(string(c)) {
				l.v2[f] = true
			}
		}
	}
	return l
})

// v1Controllers are the v1 controllers Palisade uses.
var v1Controllers = map[string]bool{Pids: true, Memory: true, CPU: true, Freezer: true}

// parseMountinfo finds the cgroup mounts in /proc/self/mountinfo text.
// Only mounts of a hierarchy's root are used; the first one wins.
func parseMountinfo(b []byte) *layout {
	l := &layout{v2: map[string]bool{}, v1: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+4 || f[3] != "/" {
			continue
		}
		mnt := unescapeMount(f[4])
		switch f[sep+1] {
		case "cgroup2":
			if l.unified == "" {
				l.unified = mnt
			}
		case "cgroup":
			for _, o := range strings.Split(f[sep+3], ",") {
				if v1Controllers[o] {
					if _, seen := l.v1[o]; !seen {
						l.v1[o] = mnt
					}
				}
			}
		}
	}
	return l
}

// unescapeMount undoes the octal escapes (\040 for space, ...) of
// mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (l *layout) available(c string) error {
	if l.err != nil {
		return &feature.MissingError{Feature: "cgroup:" + c, MinKernel: controllerKernels[c], Reason: l.err.Error()}
	}
	if l.v2[c] || l.v1[c] != "" {
		return nil
	}
	return &feature.MissingError{
		Feature:   "cgroup:" + c,
		MinKernel: controllerKernels[c],
		Reason:    fmt.Sprintf("neither a cgroup v2 hierarchy offering %q nor a v1 %s hierarchy is mounted", c, c),
	}
}

// hier is one hierarchy a group lives in.
type hier struct {
	name  string   // Unified or the v1 controller name
	mount string   // hierarchy mount point
	dir   string   // mount/palisade/<group>
	v2    bool     // a cgroup2 hierarchy
	ctrls []string // controllers enforced here
}

func (h *hier) has(c string) bool {
	for _, x := range h.ctrls {
		if x == c {
			return true
		}
	}
	return false
}

// Kill methods, best first.
const (
	killCgroup = "cgroup.kill"
	killFreeze = "freeze+sigkill"
	killSignal = "sigkill"
)

// Group is one sandbox's control group across every hierarchy it spans.
// Its methods are safe for concurrent use.
type Group struct {
	name   string
	hiers  []*hier
	limits Limits
	kill   string
	// freezer is the hierarchy whose freezer Kill uses for the
	// freeze+sigkill method (nil otherwise).
	freezer *hier

	// Procs keeps the primary cgroup.procs and its directory open and
	// re-reads them with pread: three syscalls instead of a path walk,
	// open, read and close per call.
	mu      sync.Mutex
	procsFD int // -1 when not open
	dirFD   int // O_PATH, for the link count (2 + child groups)
	buf     []byte
}

// plan lists the hierarchies a group called name uses: the unified one
// whenever mounted, with the controllers it offers, and the v1 hierarchy
// of every wanted controller it lacks. withFreezer adds the v1 freezer.
func (l *layout) plan(name string, want []string, withFreezer bool) []*hier {
	var hs []*hier
	byMount := map[string]*hier{}
	if l.unified != "" {
		h := &hier{name: Unified, mount: l.unified, v2: true}
		for _, c := range want {
			if l.v2[c] {
				h.ctrls = append(h.ctrls, c)
			}
		}
		hs = append(hs, h)
		byMount[l.unified] = h
	}
	if withFreezer {
		want = append(want, Freezer)
	}
	for _, c := range want {
		if l.v2[c] {
			continue
		}
		m := l.v1[c]
		if m == "" {
			continue
		}
		if h := byMount[m]; h != nil { // co-mounted, e.g. cpu,cpuacct
			h.ctrls = append(h.ctrls, c)
			continue
		}
		h := &hier{name: c, mount: m, ctrls: []string{c}}
		hs = append(hs, h)
		byMount[m] = h
	}
	for _, h := range hs {
		h.dir = filepath.Join(h.mount, ParentName, name)
	}
	return hs
}

// New creates the sandbox group name in every hierarchy it needs and
// applies lim. A group of that name must not exist yet. Pids are always
// limited (DefaultPids unless lim.Pids says otherwise); a requested limit
// whose controller is missing is an error, never silently dropped. The
// memory controller, when present, is used even without a memory limit so
// that Stats can report usage. On error nothing is left behind.
func New(name string, lim Limits) (*Group, error) {
	return newGroup(name, lim, false)
}

// newGroup is New; forceFreezer makes Kill use the freezer rather than
// cgroup.kill, so tests can exercise that path on kernels that have both.
func newGroup(name string, lim Limits, forceFreezer bool) (*Group, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	lim, err := lim.normalize()
	if err != nil {
		return nil, err
	}
	l := currentLayout()
	want := []string{Pids}
	if err := l.available(Pids); err != nil {
		return nil, fmt.Errorf("cgroup: pids limit: %w", err)
	}
	if lim.MemoryBytes > 0 {
		if err := l.available(Memory); err != nil {
			return nil, fmt.Errorf("cgroup: memory limit: %w", err)
		}
	}
	if l.available(Memory) == nil {
		want = append(want, Memory)
	}
	if lim.CPUs > 0 {
		if err := l.available(CPU); err != nil {
			return nil, fmt.Errorf("cgroup: cpu limit: %w", err)
		}
		want = append(want, CPU)
	}

	// cgroup.kill (5.14) beats freezing; the unified parent tells us
	// whether the kernel has it once it exists.
	useKill := false
	if l.unified != "" && !forceFreezer {
		has, err := l.hasCgroupKill()
		if err != nil {
			return nil, err
		}
		useKill = has
	}
	// The v1 freezer is needed when the unified hierarchy can neither
	// kill nor freeze (before Linux 5.2), or is absent.
	withFreezer := !useKill && l.v1[Freezer] != "" &&
		(forceFreezer || l.unified == "" || !exists(filepath.Join(l.unified, ParentName, "cgroup.freeze")))
	g := &Group{name: name, limits: lim, hiers: l.plan(name, want, withFreezer), procsFD: -1, dirFD: -1}

	var created []*hier
	fail := func(err error) (*Group, error) {
		for i := len(created) - 1; i >= 0; i-- {
			unix.Rmdir(created[i].dir)
		}
		return nil, err
	}
	for _, h := range g.hiers {
		if err := ensureParent(h, h.ctrls); err != nil {
			return fail(err)
		}
		if err := os.Mkdir(h.dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fail(fmt.Errorf("cgroup: group %q already exists (%s): %w", name, h.dir, ErrExists))
			}
			return fail(fmt.Errorf("cgroup: create %s: %w", h.dir, err))
		}
		created = append(created, h)
		if err := applyLimits(h, lim); err != nil {
			return fail(err)
		}
	}
	g.chooseKill(forceFreezer)
	return g, nil
}

var (
	cgroupKillOnce sync.Once
	cgroupKillHas  bool
	cgroupKillErr  error
)

// hasCgroupKill reports, once per process, whether the kernel offers
// cgroup.kill in the unified hierarchy (Linux 5.14); only non-root groups
// have the file, so the palisade parent is created to look.
func (l *layout) hasCgroupKill() (bool, error) {
	cgroupKillOnce.Do(func() {
		if cgroupKillErr = ensureParent(&hier{mount: l.unified, v2: true}, nil); cgroupKillErr == nil {
			cgroupKillHas = exists(filepath.Join(l.unified, ParentName, "cgroup.kill"))
		}
	})
	return cgroupKillHas, cgroupKillErr
}

// ensureParent creates the palisade parent in h's hierarchy and, on v2,
// enables ctrls for its children.
func ensureParent(h *hier, ctrls []string) error {
	parent := filepath.Join(h.mount, ParentName)
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroup: create %s: %w", parent, err)
	}
	if !h.v2 || len(ctrls) == 0 {
		return nil
	}
	var en []string
	for _, c := range ctrls {
		en = append(en, "+"+c)
	}
	for _, d := range []string{h.mount, parent} {
		if err := writeFile(filepath.Join(d, "cgroup.subtree_control"), strings.Join(en, " ")); err != nil {
			return err
		}
	}
	return nil
}

func applyLimits(h *hier, lim Limits) error {
	set := func(file, val string) error { return writeFile(filepath.Join(h.dir, file), val) }
	setIfPresent := func(file, val string) error {
		err := set(file, val)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if h.has(Pids) {
		if err := set("pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
	}
	if h.has(Memory) {
		if h.v2 {
			if lim.MemoryBytes > 0 {
				if err := set("memory.max", strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
					return err
				}
				// Swap would let the sandbox exceed its limit.
				if err := setIfPresent("memory.swap.max", "0"); err != nil {
					return err
				}
			}
			if err := set("memory.oom.group", "1"); err != nil {
				return err
			}
		} else {
			if lim.MemoryBytes > 0 {
				v := strconv.FormatInt(lim.MemoryBytes, 10)
				// memsw may never be below the memory limit, so the
				// memory limit goes first.
				if err := set("memory.limit_in_bytes", v); err != nil {
					return err
				}
				if err := setIfPresent("memory.memsw.limit_in_bytes", v); err != nil {
					return err
				}
			}
			// The OOM killer must act rather than pause the group.
			if err := setIfPresent("memory.oom_control", "0"); err != nil {
				return err
			}
		}
	}
	if h.has(CPU) && lim.CPUs > 0 {
		q := strconv.FormatInt(lim.cpuQuotaUS(), 10)
		if h.v2 {
			if err := set("cpu.max", q+" "+strconv.Itoa(cpuPeriodUS)); err != nil {
				return err
			}
		} else {
			if err := set("cpu.cfs_period_us", strconv.Itoa(cpuPeriodUS)); err != nil {
				return err
			}
			if err := set("cpu.cfs_quota_us", q); err != nil {
				return err
			}
		}
	}
	return nil
}

// chooseKill picks how Kill empties the group.
func (g *Group) chooseKill(forceFreezer bool) {
	u := g.hier(Unified)
	if u != nil && !forceFreezer && exists(filepath.Join(u.dir, "cgroup.kill")) {
		g.kill = killCgroup
		return
	}
	if f := g.hier(Freezer); f != nil {
		g.kill, g.freezer = killFreeze, f
		return
	}
	if u != nil && !forceFreezer && exists(filepath.Join(u.dir, "cgroup.freeze")) {
		g.kill, g.freezer = killFreeze, u
		return
	}
	g.kill = killSignal
}

// Open re-opens an existing group (for gc and status): every hierarchy in
// which a directory of that name exists under the palisade parent. Limits
// are read back from the kernel. A group that exists nowhere gives an error
// satisfying errors.Is(err, fs.ErrNotExist).
func Open(name string) (*Group, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	l := currentLayout()
	if l.err != nil {
		return nil, l.err
	}
	g := &Group{name: name, procsFD: -1, dirFD: -1}
	for _, h := range l.plan(name, []string{Pids, Memory, CPU}, true) {
		if !exists(h.dir) {
			continue
		}
		g.hiers = append(g.hiers, h)
	}
	if len(g.hiers) == 0 {
		return nil, fmt.Errorf("cgroup: group %q not found under any %s parent: %w", name, ParentName, fs.ErrNotExist)
	}
	g.limits = g.readLimits()
	g.chooseKill(false)
	return g, nil
}

func (g *Group) readLimits() Limits {
	var lim Limits
	if h := g.ctrlHier(Pids); h != nil {
		lim.Pids, _ = readLimit(filepath.Join(h.dir, "pids.max"))
	}
	if h := g.ctrlHier(Memory); h != nil {
		f := "memory.limit_in_bytes"
		if h.v2 {
			f = "memory.max"
		}
		if v, ok := readLimit(filepath.Join(h.dir, f)); ok && v < 1<<62 { // v1 "unlimited" is a huge number
			lim.MemoryBytes = v
		}
	}
	if h := g.ctrlHier(CPU); h != nil {
		var q, p int64
		var ok bool
		if h.v2 {
			b, err := os.ReadFile(filepath.Join(h.dir, "cpu.max"))
			if f := strings.Fields(string(b)); err == nil && len(f) == 2 && f[0] != "max" {
				q, _ = strconv.ParseInt(f[0], 10, 64)
				p, _ = strconv.ParseInt(f[1], 10, 64)
				ok = true
			}
		} else {
			q, ok = readLimit(filepath.Join(h.dir, "cpu.cfs_quota_us"))
			p, _ = readLimit(filepath.Join(h.dir, "cpu.cfs_period_us"))
		}
		if ok && q > 0 && p > 0 {
			lim.CPUs = float64(q) / float64(p)
		}
	}
	return lim
}

// readLimit reads a single-number file; "max" and -1 read as no limit.
func readLimit(p string) (int64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Limits returns the limits the group was created with (or, after Open,
// read back from the kernel).
func (g *Group) Limits() Limits { return g.limits }

func (g *Group) hier(name string) *hier {
	for _, h := range g.hiers {
		if h.name == name {
			return h
		}
	}
	return nil
}

// ctrlHier returns the hierarchy enforcing controller c. After Open,
// controllers are known by hierarchy name (v1) or by the v2 root's list.
func (g *Group) ctrlHier(c string) *hier {
	for _, h := range g.hiers {
		if h.has(c) {
			return h
		}
	}
	return nil
}

// Path returns the group's directory in the named hierarchy: Unified, or
// a controller name (Pids, Memory, CPU, Freezer) for the hierarchy that
// enforces it. It returns "" when the group is not in such a hierarchy.
func (g *Group) Path(hierarchy string) string {
	if h := g.hier(hierarchy); h != nil {
		return h.dir
	}
	if h := g.ctrlHier(hierarchy); h != nil {
		return h.dir
	}
	return ""
}

// AddPID moves the process pid (all its threads) into the group in every
// hierarchy. Add the sandbox's first process before it can fork: its
// children inherit the group, while processes it started before are left
// behind.
func (g *Group) AddPID(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: add pid %d: not a process id", pid)
	}
	for _, h := range g.hiers {
		if err := writeFile(filepath.Join(h.dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: add pid %d to group %q: %w", pid, g.name, err)
		}
	}
	return nil
}

// primary is the hierarchy Procs reads: unified when present (it holds
// every process however the controllers are split), else pids.
func (g *Group) primary() *hier {
	if h := g.hier(Unified); h != nil {
		return h
	}
	if h := g.ctrlHier(Pids); h != nil {
		return h
	}
	return g.hiers[0]
}

// Procs lists every process in the group (including any nested groups),
// from the unified hierarchy when there is one, otherwise from the pids
// hierarchy. It is cheap enough to call per connection: the first call
// opens the group's cgroup.procs and keeps it open (Close or Destroy
// releases it); later calls cost a pread and an fstat while the group has
// no child groups. A destroyed group has no processes.
func (g *Group) Procs() ([]int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.primary()
	if g.procsFD < 0 {
		if !exists(h.dir) {
			return nil, nil // destroyed
		}
		fd, err := unix.Open(filepath.Join(h.dir, "cgroup.procs"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("cgroup: procs of group %q: open %s/cgroup.procs: %w", g.name, h.dir, err)
		}
		dfd, err := unix.Open(h.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("cgroup: procs of group %q: open %s: %w", g.name, h.dir, err)
		}
		g.procsFD, g.dirFD = fd, dfd
		if g.buf == nil {
			g.buf = make([]byte, 4096)
		}
	}
	n := 0
	for {
		if n == len(g.buf) {
			g.buf = append(g.buf, make([]byte, len(g.buf))...)
		}
		m, err := unix.Pread(g.procsFD, g.buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err == unix.ENODEV || err == unix.ENOENT {
			return nil, nil // removed while open
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: procs of group %q: read %s/cgroup.procs: %w", g.name, h.dir, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	out, err := parsePids(g.buf[:n])
	if err != nil {
		return nil, fmt.Errorf("cgroup: procs of group %q: %s/cgroup.procs: %w", g.name, h.dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(g.dirFD, &st); err == nil && st.Nlink <= 2 {
		return out, nil // no child groups
	}
	// Child groups exist (or the link count is unknown): walk them.
	ents, err := os.ReadDir(h.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cgroup: procs of group %q: %w", g.name, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := readProcs(filepath.Join(h.dir, e.Name()), &out); err != nil {
				return nil, fmt.Errorf("cgroup: procs of group %q: %w", g.name, err)
			}
		}
	}
	return out, nil
}

// Close releases the descriptors Procs keeps open. The group itself is
// untouched and Procs reopens them if called again.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.procsFD >= 0 {
		unix.Close(g.procsFD)
		unix.Close(g.dirFD)
		g.procsFD, g.dirFD = -1, -1
	}
	return nil
}

func parsePids(b []byte) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("bad pid %q", f)
		}
		out = append(out, pid)
	}
	return out, nil
}

// readProcs appends the pids of dir and its descendants. A directory that
// vanished is empty.
func readProcs(dir string, out *[]int) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		return err
	}
	pids, err := parsePids(b)
	if err != nil {
		return fmt.Errorf("%s/cgroup.procs: %w", dir, err)
	}
	*out = append(*out, pids...)
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := readProcs(filepath.Join(dir, e.Name()), out); err != nil {
				return err
			}
		}
	}
	return nil
}

// allProcs is the union of the group's processes over every hierarchy,
// so that Kill also catches a process that joined only some of them.
func (g *Group) allProcs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, h := range g.hiers {
		var ps []int
		if err := readProcs(h.dir, &ps); err != nil {
			return nil, fmt.Errorf("cgroup: procs of group %q: %w", g.name, err)
		}
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}

// killTimeout bounds Kill.
const killTimeout = 5 * time.Second

// Kill SIGKILLs every process in the group and returns once the group is
// empty, or an error after killTimeout. It uses cgroup.kill where the
// kernel has it (atomic: a process forking meanwhile dies too); otherwise
// it freezes the group, signals every process and thaws, until empty.
// The caller must not be in the group. Killing an empty or destroyed
// group succeeds.
func (g *Group) Kill() error {
	deadline := time.Now().Add(killTimeout)
	self := os.Getpid()
	for round := 0; ; round++ {
		pids, err := g.allProcs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup: group %q: %d process(es) survive SIGKILL after %s (%s): %v", g.name, len(pids), killTimeout, g.kill, pids)
		}
		if round%10 == 0 { // re-kill every tenth poll; wait in between
			switch g.kill {
			case killCgroup:
				err = writeFile(filepath.Join(g.hier(Unified).dir, "cgroup.kill"), "1")
				if errors.Is(err, fs.ErrNotExist) {
					// The unified group is gone (Destroy removed it
					// empty) but a process is left elsewhere.
					err = signalAll(pids, self)
				}
			case killFreeze:
				err = g.freezeAndSignal(self, deadline)
			default:
				err = signalAll(pids, self)
			}
			if err != nil {
				return fmt.Errorf("cgroup: kill group %q: %w", g.name, err)
			}
		}
		time.Sleep(time.Duration(min(round+1, 20)) * time.Millisecond)
	}
}

// freezeAndSignal freezes the group (so nothing can fork or exit-and-be-
// replaced while we read pids), SIGKILLs every member and thaws it so the
// signals are delivered.
func (g *Group) freezeAndSignal(self int, deadline time.Time) error {
	f := g.freezer
	if err := setFrozen(f, true); err != nil {
		return err
	}
	// Wait (bounded) until the freezer reports the whole group frozen;
	// if it never does, signal anyway: the loop in Kill retries.
	for time.Now().Before(deadline) {
		frozen, err := isFrozen(f)
		if err != nil || frozen {
			break
		}
		time.Sleep(time.Millisecond)
	}
	pids, err := g.allProcs()
	if err == nil {
		err = signalAll(pids, self)
	}
	if terr := setFrozen(f, false); terr != nil && err == nil {
		err = terr
	}
	return err
}

func setFrozen(h *hier, on bool) error {
	var err error
	if h.v2 {
		v := "0"
		if on {
			v = "1"
		}
		err = writeFile(filepath.Join(h.dir, "cgroup.freeze"), v)
	} else {
		v := "THAWED"
		if on {
			v = "FROZEN"
		}
		err = writeFile(filepath.Join(h.dir, "freezer.state"), v)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func isFrozen(h *hier) (bool, error) {
	if h.v2 {
		b, err := os.ReadFile(filepath.Join(h.dir, "cgroup.events"))
		if err != nil {
			return false, err
		}
		return keyedValue(b, "frozen") == 1, nil
	}
	b, err := os.ReadFile(filepath.Join(h.dir, "freezer.state"))
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == "FROZEN", nil
}

func signalAll(pids []int, self int) error {
	for _, p := range pids {
		if p <= 1 || p == self {
			continue // never the caller or init, whatever the group says
		}
		if err := unix.Kill(p, unix.SIGKILL); err != nil && err != unix.ESRCH {
			return fmt.Errorf("kill pid %d: %w", p, err)
		}
	}
	return nil
}

// Destroy kills every process in the group, waits (bounded) until it is
// empty and removes its directory in every hierarchy. Destroying a group
// that is already gone succeeds.
func (g *Group) Destroy() error {
	g.Close()
	// Fast path, the normal end of a sandbox: every process has exited,
	// so each group is empty and childless and rmdir succeeds at once,
	// with nothing to read or kill. rmdir refuses (EBUSY) a group that
	// still has a process or a child group; then the slow path kills and
	// removes whatever is left.
	left := g.hiers[:0:0]
	for _, h := range g.hiers {
		if err := unix.Rmdir(h.dir); err != nil && err != unix.ENOENT {
			left = append(left, h)
		}
	}
	if len(left) == 0 {
		return nil
	}
	if err := g.Kill(); err != nil {
		return err
	}
	g.Close()
	var errs []error
	for _, h := range left {
		if err := removeTree(h.dir); err != nil {
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", h.dir, err))
		}
	}
	return errors.Join(errs...)
}

// removeTree rmdirs dir's child groups, deepest first, then dir itself,
// retrying EBUSY briefly (a just-killed group can take a moment to
// release its last task).
func removeTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || err == unix.ENOENT:
			return nil
		case err == unix.EBUSY && time.Now().Before(deadline):
			time.Sleep(5 * time.Millisecond)
		default:
			return err
		}
	}
}

// Stats reads the group's current usage.
func (g *Group) Stats() (Stats, error) {
	s := Stats{MemoryCurrent: -1, MemoryPeak: -1, PidsCurrent: -1, PidsPeak: -1, PidsLimitHits: -1, OOMKills: -1}
	if h := g.ctrlHier(Pids); h != nil {
		s.PidsCurrent = readInt(filepath.Join(h.dir, "pids.current"))
		s.PidsPeak = readInt(filepath.Join(h.dir, "pids.peak"))
		if b, err := os.ReadFile(filepath.Join(h.dir, "pids.events")); err == nil {
			s.PidsLimitHits = keyedValue(b, "max")
		}
	}
	if h := g.ctrlHier(Memory); h != nil {
		if h.v2 {
			s.MemoryCurrent = readInt(filepath.Join(h.dir, "memory.current"))
			s.MemoryPeak = readInt(filepath.Join(h.dir, "memory.peak"))
			if b, err := os.ReadFile(filepath.Join(h.dir, "memory.events")); err == nil {
				s.OOMKills = keyedValue(b, "oom_kill")
			}
		} else {
			s.MemoryCurrent = readInt(filepath.Join(h.dir, "memory.usage_in_bytes"))
			s.MemoryPeak = readInt(filepath.Join(h.dir, "memory.max_usage_in_bytes"))
			if b, err := os.ReadFile(filepath.Join(h.dir, "memory.oom_control")); err == nil {
				s.OOMKills = keyedValue(b, "oom_kill")
			}
		}
	}
	if s.PidsCurrent < 0 && s.MemoryCurrent < 0 {
		return s, fmt.Errorf("cgroup: stats of group %q: no pids or memory accounting readable (destroyed?)", g.name)
	}
	return s, nil
}

func readInt(p string) int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// keyedValue returns the value of key in a "key value" per line file, or
// -1.
func keyedValue(b []byte, key string) int64 {
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return v
			}
		}
	}
	return -1
}

// Describe says where the group lives and what limits it.
func (g *Group) Describe() Description {
	d := Description{
		Name:        g.name,
		Paths:       map[string]string{},
		Controllers: map[string]string{},
		Limits:      g.limits,
		KillMethod:  g.kill,
	}
	v1, v2 := false, false
	for _, h := range g.hiers {
		d.Paths[h.name] = h.dir
		for _, c := range h.ctrls {
			if c == Freezer {
				continue
			}
			d.Controllers[c] = h.name
			if h.v2 {
				v2 = true
			} else {
				v1 = true
			}
		}
	}
	switch {
	case g.hier(Unified) == nil:
		d.Mode = "v1"
	case v2 && !v1:
		d.Mode = "v2"
	default:
		d.Mode = "hybrid"
	}
	return d
}

func writeFile(p, val string) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", val, p, err)
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", val, p, err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
