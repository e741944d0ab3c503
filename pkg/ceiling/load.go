package ceiling

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// DefaultPath is where the ceiling lives. When it does not exist there is
// no ceiling.
const DefaultPath = "/etc/palisade/ceiling.yaml"

// EnvPath names another ceiling file (tests, staging hosts); the
// commands' --ceiling flag wins over it. A file named explicitly must
// exist.
const EnvPath = "PALISADE_CEILING_FILE"

// requiredOwner is the uid that must own the ceiling file and its
// directory. Only this package's tests change it.
var requiredOwner = 0

// Ceiling is a loaded ceiling.
type Ceiling struct {
	Path     string
	Policy   *policy.Policy
	Checksum string
}

// Locate returns the ceiling file to use: flagValue when set, else
// $PALISADE_CEILING_FILE, else DefaultPath; explicit is false only for
// the default.
func Locate(flagValue string, getenv func(string) string) (path string, explicit bool) {
	if flagValue != "" {
		return flagValue, true
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv(EnvPath); v != "" {
		return v, true
	}
	return DefaultPath, false
}

// Find locates and loads the ceiling (see Locate and Load).
func Find(flagValue string, getenv func(string) string) (*Ceiling, error) {
	return Load(Locate(flagValue, getenv))
}

// Load reads the ceiling at path. A missing file is no ceiling (nil, nil)
// unless explicit. The file must be a regular file (not a symlink) owned
// by root and not writable by group or others, in a directory owned by
// root and not writable by group or others, and a valid policy.
func Load(path string, explicit bool) (*Ceiling, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("ceiling %s: is a symlink; name the file itself", path)
		}
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ceiling: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("ceiling %s: not a regular file", path)
	}
	if err := rootOnly(path, st); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	dst, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	if err := rootOnly(dir, dst); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("ceiling: read %s: %w", path, err)
	}
	p, err := policy.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("ceiling %s: %w", path, err)
	}
	return &Ceiling{Path: path, Policy: p, Checksum: p.Checksum()}, nil
}

// rootOnly refuses a file or directory that anyone but root could change.
func rootOnly(name string, st fs.FileInfo) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("ceiling %s: cannot read its owner", name)
	}
	if int(sys.Uid) != requiredOwner {
		return fmt.Errorf("ceiling %s: owned by uid %d, not root; fix with chown root:root %s", name, sys.Uid, name)
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("ceiling %s: writable by group or others (mode %04o); fix with chmod go-w %s", name, perm, name)
	}
	return nil
}

// Error is a policy refused for exceeding the ceiling. Its message names
// the first excess.
type Error struct {
	Ceiling  string // the ceiling file
	Excesses []*Excess
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("policy exceeds the ceiling %s: %s", e.Ceiling, e.Excesses[0])
	if n := len(e.Excesses) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return msg
}

// Check returns nil when p is within the ceiling, else an *Error. A nil
// Ceiling (none configured) admits every policy. Filesystem paths are
// compared as the host resolves them now (ResolvePath).
func (c *Ceiling) Check(p *policy.Policy) error {
	if c == nil {
		return nil
	}
	if xs := Contains(c.Policy, p, Options{Resolve: ResolvePath}); len(xs) > 0 {
		return &Error{Ceiling: c.Path, Excesses: xs}
	}
	return nil
}

// ResolvePath returns the absolute path p with the symlinks of its longest
// existing prefix resolved, the rest as written: what Landlock would grant
// if the sandbox were made now.
func ResolvePath(p string) string {
	p = filepath.Clean(p)
	var rest []string
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
}

// Describe is a one-line summary for logs: the path and checksum, or
// that there is none.
func (c *Ceiling) Describe() string {
	if c == nil {
		return "no ceiling"
	}
	return c.Path + " (sha256 " + strings.TrimSpace(c.Checksum[:12]) + ")"
}

// Checker returns a check that loads the ceiling at path afresh each time
// (so an operator's change to it applies to the next check) and checks a
// policy against it. A ceiling that cannot be loaded fails every check.
func Checker(path string, explicit bool) func(*policy.Policy) error {
	return func(p *policy.Policy) error {
		c, err := Load(path, explicit)
		if err != nil {
			return err
		}
		return c.Check(p)
	}
}
