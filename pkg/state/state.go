// Package state keeps the supervisor's record of every sandbox: one
// root-only directory per sandbox under a state root (default
// /run/palisade/sandboxes), holding NAME/labels.json with who created the
// sandbox, why, from which process, under which policy, and what the
// supervisor later learned about it (init pid, cgroup, netns, exit status).
//
// Directory creation is the name reservation: Create fails with "sandbox
// name %q is taken" when the directory exists. labels.json is always
// written with fsutil.ReplaceFile (atomic rename, mode 0600; not fsynced:
// runtime state does not outlive a reboot), and read-modify-write
// updates hold an flock on the sandbox directory, so readers never see a
// half-written file and concurrent updates are not lost.
//
// Plan and Apply implement seed 000's sandbox-gc: a sandbox is collected
// only when it is older than the stale age (default 24 h,
// MAC_OPENSHELL_STALE_AFTER_SECONDS), its creator process is gone (pid
// absent, or present with a different start time, so a recycled pid does
// not keep it alive) and keep is false. Every decision carries the reason.
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// DefaultRoot is where sandbox state lives unless the caller says otherwise
// (sandbox-supervisor --state-dir).
const DefaultRoot = "/run/palisade/sandboxes"

// LabelsFile is the name of the labels file inside a sandbox directory.
const LabelsFile = "labels.json"

// Kind is the lifecycle kind of a sandbox (seed 000 labels).
type Kind string

// The lifecycle kinds.
const (
	KindTask   Kind = "task"
	KindVerify Kind = "verify"
	KindProbe  Kind = "probe"
	KindAdhoc  Kind = "adhoc"
)

// ParseKind validates a kind given on a command line or in labels.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case KindTask, KindVerify, KindProbe, KindAdhoc:
		return k, nil
	}
	return "", fmt.Errorf("kind %q: want one of task, verify, probe, adhoc", s)
}

// Status is the run state the supervisor records.
type Status string

// Run states.
const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusExited  Status = "exited"
	// StatusOrphaned is never recorded: list and status show it for a
	// created or running sandbox whose creator is gone (Store.Observed).
	StatusOrphaned Status = "orphaned"
)

// Labels is the content of labels.json. The first block is set at
// creation; the second is filled in by the supervisor as the sandbox comes
// up and ends. Later layers put their own keys in Extra rather than adding
// fields here.
type Labels struct {
	Name string `json:"name"`
	// ID is the sandbox's immutable identity, drawn at creation: a name
	// can be reused after a delete, an ID never is (delete --expect-id).
	ID               string    `json:"id,omitempty"`
	Owner            string    `json:"owner"`
	Kind             Kind      `json:"kind"`
	CreatorPID       int       `json:"creator_pid"`
	CreatorStartTime uint64    `json:"creator_start_time"` // /proc/<pid>/stat field 22, clock ticks since boot
	Keep             bool      `json:"keep"`
	Created          time.Time `json:"created"` // UTC, whole seconds
	AgentID          string    `json:"agent_id,omitempty"`
	PolicySHA256     string    `json:"policy_sha256,omitempty"`
	PolicySource     string    `json:"policy_source,omitempty"`
	// EventsFile is where the sandbox's OCSF events are appended (for
	// `logs`), when they go to a file.
	EventsFile string `json:"events_file,omitempty"`

	Status         Status    `json:"status,omitempty"`
	InitPID        int       `json:"init_pid,omitempty"`
	InitStartTime  uint64    `json:"init_start_time,omitempty"`
	Cgroup         string    `json:"cgroup,omitempty"`
	NetnsPath      string    `json:"netns_path,omitempty"`
	ProxyPID       int       `json:"proxy_pid,omitempty"`
	ProxyStartTime uint64    `json:"proxy_start_time,omitempty"`
	ExitCode       *int      `json:"exit_code,omitempty"`
	Exited         time.Time `json:"exited,omitzero"`
	// Outcome and Reason are the main process's final state, recorded
	// the moment it ends (seed 004 "Failure Behavior"): completed /
	// main_process_completed for exit 0, failed / main_process_failed for
	// a nonzero or signal exit, error / a distinct reason when the
	// sandbox's own infrastructure failed (no process result then).
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// NoMain is set for a sandbox started without a main command (run
	// --detach with no CMD): it stays up for exec, and attach has no
	// process to follow.
	NoMain bool `json:"no_main,omitempty"`

	Extra map[string]string `json:"extra,omitempty"`
}

// validName is ^[a-z0-9][a-z0-9._-]{0,62}$ without a regexp (compiling
// one at package init costs every supervisor and init start ~0.2 ms).
func validName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ValidateName checks a user-given sandbox name: 1 to 63 characters of
// [a-z0-9._-], starting with a letter or digit (so never ".", ".." or a
// hidden file, and never a path).
func ValidateName(name string) error {
	if name == "" {
		return errors.New("sandbox name: empty")
	}
	if !validName(name) {
		return fmt.Errorf("sandbox name %q: want 1-63 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit", name)
	}
	return nil
}

// GenerateName returns a fresh name of the form sbx-<12 hex digits>.
func GenerateName() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("state: crypto/rand: " + err.Error())
	}
	return "sbx-" + hex.EncodeToString(b[:])
}

// InvokingUser names the human behind this process: $SUDO_USER when set
// (root via sudo), else the user name of the real uid, else the uid.
func InvokingUser() string {
	if u := os.Getenv("SUDO_USER"); u != "" {
		return u
	}
	uid := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(uid); err == nil && u.Username != "" {
		return u.Username
	}
	return uid
}

// InvokingUID is the uid of the human behind this process: $SUDO_UID
// when set (root via sudo), else the real uid.
func InvokingUID() uint32 {
	if n, err := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32); err == nil {
		return uint32(n)
	}
	return uint32(os.Getuid())
}

// ProcStartTime returns field 22 of /proc/<pid>/stat: the time the process
// started, in clock ticks after boot. Together with the pid it identifies a
// process across pid reuse. A missing process, or one that has ended and
// waits to be reaped (a zombie), yields an error satisfying
// errors.Is(err, fs.ErrNotExist).
func ProcStartTime(pid int) (uint64, error) {
	return procStartTime("/proc", pid)
}

func procStartTime(procRoot string, pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("pid %d: not a process id", pid)
	}
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("read start time of pid %d: %w", pid, err)
	}
	if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return 0, fmt.Errorf("pid %d has ended (not reaped yet): %w", pid, fs.ErrNotExist)
	}
	return parseStatStartTime(string(b))
}

// parseStatStartTime extracts field 22 from a /proc/<pid>/stat line. The
// command name (field 2) is in parentheses and may itself contain spaces
// and parentheses, so fields are counted after the last ')'.
func parseStatStartTime(s string) (uint64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 20", len(f))
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc stat: start time %q: %w", f[19], err)
	}
	return v, nil
}

// Store is a state root. The zero value is not usable; call Open.
type Store struct {
	root string
	// procRoot is /proc; tests point it elsewhere only to fake process
	// tables.
	procRoot string
}

// Open returns the store rooted at root ("" means DefaultRoot), creating
// it with mode 0700 if needed. An existing root must be a real directory
// owned by this process's effective uid; its mode is tightened to 0700.
//
// Root creates sandboxes' state (labels, sockets, proxy files) below it,
// so the path is resolved once and must stay put: a symbolic link on it
// that belongs to another user is refused (fsutil.ResolveTrusted), and so
// is a directory above it that anyone but root (or this user) could
// change (fsutil.CheckDirsTrusted; a sticky /tmp is fine), since its
// owner could swap what the name leads to. Missing directories are then
// created below directories nobody else can change.
func Open(root string) (*Store, error) {
	if root == "" {
		root = DefaultRoot
	}
	resolved, err := fsutil.ResolveTrusted(root)
	if err != nil {
		return nil, fmt.Errorf("state root %s: %w", root, err)
	}
	if err := fsutil.CheckDirsTrusted(filepath.Dir(resolved)); err != nil {
		return nil, fmt.Errorf("state root %s: %w", root, err)
	}
	root = resolved
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("state root %s: %w", root, err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return nil, fmt.Errorf("state root %s: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("state root %s: not a directory (%s)", root, fi.Mode().Type())
	}
	if uid, ok := fileUID(fi); ok && uid != os.Geteuid() {
		return nil, fmt.Errorf("state root %s: owned by uid %d, want uid %d", root, uid, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(root, 0o700); err != nil {
			return nil, fmt.Errorf("state root %s: chmod 0700: %w", root, err)
		}
	}
	return &Store{root: root, procRoot: "/proc"}, nil
}

// Root returns the store's directory.
func (s *Store) Root() string { return s.root }

// Dir returns the state directory of the named sandbox (which need not
// exist). The name must be valid.
func (s *Store) Dir(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return filepath.Join(s.root, name), nil
}

// Create reserves a sandbox and writes its labels. An empty name gets a
// generated one. Zero fields of l are filled in: Owner (InvokingUser),
// Kind (adhoc), CreatorPID (this process), CreatorStartTime (from /proc),
// Created (now, UTC). Status starts as "created". A taken name is an error
// ("sandbox name %q is taken"); on any error nothing is left behind.
func (s *Store) Create(name string, l Labels) (Labels, error) {
	if err := s.fillDefaults(&l); err != nil {
		return Labels{}, err
	}
	name, err := s.Reserve(name)
	if err != nil {
		return Labels{}, err
	}
	l, err = s.Fill(name, l)
	if err != nil {
		os.RemoveAll(filepath.Join(s.root, name))
		return Labels{}, err
	}
	return l, nil
}

// Reserve creates the state directory of a sandbox, without labels yet,
// and returns its name (a generated one when name is empty). It is the
// first thing a sandbox gets, so that anything made for it afterwards
// (its cgroup) always has a state directory for gc to find; until Fill
// writes the labels, gc protects the directory by its age only. A taken
// name is an error (errors.Is ErrNameTaken).
func (s *Store) Reserve(name string) (string, error) {
	generated := name == ""
	if !generated {
		if err := ValidateName(name); err != nil {
			return "", err
		}
	}
	for attempt := 0; ; attempt++ {
		if generated {
			name = GenerateName()
		}
		dir := filepath.Join(s.root, name)
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			return name, nil
		}
		if errors.Is(err, fs.ErrExist) {
			if generated && attempt < 8 {
				continue
			}
			return "", nameTaken(name)
		}
		return "", fmt.Errorf("create sandbox state %s: %w", dir, err)
	}
}

// Fill writes the labels of a sandbox Reserve made, with Create's
// defaults, and returns them. It does not remove the directory on error.
func (s *Store) Fill(name string, l Labels) (Labels, error) {
	dir, err := s.Dir(name)
	if err != nil {
		return Labels{}, err
	}
	if err := s.fillDefaults(&l); err != nil {
		return Labels{}, err
	}
	l.Name = name
	if err := writeLabels(dir, l); err != nil {
		return Labels{}, err
	}
	return l, nil
}

func (s *Store) fillDefaults(l *Labels) error {
	if l.Kind == "" {
		l.Kind = KindAdhoc
	}
	if _, err := ParseKind(string(l.Kind)); err != nil {
		return err
	}
	if l.Owner == "" {
		l.Owner = InvokingUser()
	}
	if l.CreatorPID == 0 {
		l.CreatorPID = os.Getpid()
	}
	if l.CreatorStartTime == 0 {
		st, err := procStartTime(s.procRoot, l.CreatorPID)
		if err != nil {
			return fmt.Errorf("creator_pid %d: %w", l.CreatorPID, err)
		}
		l.CreatorStartTime = st
	}
	if l.Created.IsZero() {
		l.Created = time.Now()
	}
	if l.ID == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("sandbox id: %w", err)
		}
		l.ID = hex.EncodeToString(b[:])
	}
	l.Created = l.Created.UTC().Truncate(time.Second)
	if l.Status == "" {
		l.Status = StatusCreated
	}
	return nil
}

func writeLabels(dir string, l Labels) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("encode labels of sandbox %q: %w", l.Name, err)
	}
	// Runtime state: atomic, but not fsynced (it dies with the boot).
	return fsutil.ReplaceFile(filepath.Join(dir, LabelsFile), append(b, '\n'), 0o600)
}

// ErrNotFound is wrapped by errors for sandboxes that do not exist.
var ErrNotFound = fs.ErrNotExist

// ErrNameTaken matches (errors.Is) Create's error for a name in use.
var ErrNameTaken = errors.New("sandbox name is taken")

type nameTaken string

func (n nameTaken) Error() string        { return fmt.Sprintf("sandbox name %q is taken", string(n)) }
func (n nameTaken) Is(target error) bool { return target == ErrNameTaken }

// Get reads the labels of one sandbox. A sandbox that does not exist gives
// an error satisfying errors.Is(err, ErrNotFound).
func (s *Store) Get(name string) (Labels, error) {
	dir, err := s.Dir(name)
	if err != nil {
		return Labels{}, err
	}
	return readLabels(dir, name)
}

func readLabels(dir, name string) (Labels, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Labels{}, fmt.Errorf("sandbox %q not found: %w", name, ErrNotFound)
		}
		return Labels{}, fmt.Errorf("sandbox %q: %w", name, err)
	}
	if !fi.IsDir() {
		return Labels{}, fmt.Errorf("sandbox %q: %s is not a directory", name, dir)
	}
	p := filepath.Join(dir, LabelsFile)
	b, err := os.ReadFile(p)
	if err != nil {
		// %v, not %w: a missing labels file is "unreadable", not "not found".
		return Labels{}, fmt.Errorf("sandbox %q: read labels: %v", name, err)
	}
	var l Labels
	// Unknown fields are tolerated: a newer supervisor may have written
	// them, and treating its sandboxes as unreadable would let gc ignore
	// their keep flag and live creator.
	if err := json.Unmarshal(b, &l); err != nil {
		return Labels{}, fmt.Errorf("sandbox %q: %s: %w", name, p, err)
	}
	if l.Name != name {
		return Labels{}, fmt.Errorf("sandbox %q: %s: name is %q", name, p, l.Name)
	}
	if _, err := ParseKind(string(l.Kind)); err != nil {
		return Labels{}, fmt.Errorf("sandbox %q: %s: %w", name, p, err)
	}
	return l, nil
}

// Update applies fn to the sandbox's labels under an exclusive lock and
// writes them back atomically. fn must not change Name. It returns the
// labels as written.
func (s *Store) Update(name string, fn func(*Labels)) (Labels, error) {
	dir, err := s.Dir(name)
	if err != nil {
		return Labels{}, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Labels{}, fmt.Errorf("sandbox %q not found: %w", name, ErrNotFound)
		}
		return Labels{}, fmt.Errorf("sandbox %q: lock: %w", name, err)
	}
	defer unlock()
	l, err := readLabels(dir, name)
	if err != nil {
		return Labels{}, err
	}
	fn(&l)
	if l.Name != name {
		return Labels{}, fmt.Errorf("sandbox %q: update may not rename it (to %q)", name, l.Name)
	}
	if _, err := ParseKind(string(l.Kind)); err != nil {
		return Labels{}, fmt.Errorf("sandbox %q: update: %w", name, err)
	}
	if err := writeLabels(dir, l); err != nil {
		return Labels{}, err
	}
	return l, nil
}

// LockLifecycle takes the sandbox's lifecycle lock (an exclusive flock on
// lifecycle.lock in its state directory, apart from the lock Update and
// Remove take, so the owner can still record its exit meanwhile) and
// returns the function that releases it. delete holds it from the check
// of the expected ID to the end of the teardown.
func (s *Store) LockLifecycle(name string) (func(), error) {
	dir, err := s.Dir(name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("sandbox %q not found: %w", name, ErrNotFound)
		}
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: lifecycle lock: %w", name, err)
	}
	return unlock, nil
}

// Remove deletes the sandbox's state directory. Removing a sandbox that
// does not exist is not an error.
func (s *Store) Remove(name string) error {
	dir, err := s.Dir(name)
	if err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("sandbox %q: lock: %w", name, err)
	}
	defer unlock()
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sandbox state %s: %w", dir, err)
	}
	return nil
}

// RemoveID deletes the sandbox's state directory only while NAME still
// names the sandbox with id: under the directory's lock it reads the
// labels, and when the id matches runs before (the teardown of what the
// sandbox left outside its directory) and removes the directory. A name
// that no longer exists, or that a new sandbox with another id has taken
// since the caller resolved it, is left as it is: removed reports false.
func (s *Store) RemoveID(name, id string, before func(Labels) error) (removed bool, err error) {
	dir, err := s.Dir(name)
	if err != nil {
		return false, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("sandbox %q: lock: %w", name, err)
	}
	defer unlock()
	l, err := readLabels(dir, name)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	if id == "" || l.ID != id {
		return false, nil
	}
	if before != nil {
		if err := before(l); err != nil {
			return false, err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove sandbox state %s: %w", dir, err)
	}
	return true, nil
}

// Entry is one sandbox as List sees it. Err is set (and Labels holds only
// Name) when labels.json is missing or unreadable.
type Entry struct {
	Name    string
	Labels  Labels
	Err     error
	ModTime time.Time // of the sandbox directory
}

// List returns every sandbox directory under the root, sorted by name,
// including those whose labels cannot be read (with Err set). Entries that
// are not directories or whose names are not valid sandbox names (for
// example temporary files) are skipped.
func (s *Store) List() ([]Entry, error) {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes in %s: %w", s.root, err)
	}
	var out []Entry
	for _, de := range ents {
		name := de.Name()
		if ValidateName(name) != nil || !de.IsDir() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		e := Entry{Name: name, ModTime: fi.ModTime()}
		e.Labels, e.Err = readLabels(filepath.Join(s.root, name), name)
		if e.Err != nil {
			if errors.Is(e.Err, ErrNotFound) {
				continue // the directory itself vanished
			}
			e.Labels = Labels{Name: name}
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
