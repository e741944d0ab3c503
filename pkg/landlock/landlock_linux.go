//go:build linux

package landlock

import (
	"errors"
	"fmt"
	"os"

	ll "github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/feature"
)

// presets indexed by ABI version; index 0 is unused.
var presets = []ll.Config{{}, ll.V1, ll.V2, ll.V3, ll.V4, ll.V5, ll.V6, ll.V7, ll.V8, ll.V9, ll.V10, ll.V11}

// Ruleset is a built, not yet enforced, Landlock ruleset.
type Ruleset struct {
	fd     int
	flags  uint32
	result Result
}

// Build opens every path and creates the ruleset. It does not restrict
// anything yet. A nil Ruleset with a nil error means Landlock is
// unavailable and the rules are best-effort: the caller must report the
// degraded run.
func Build(r Rules) (*Ruleset, error) {
	cfg, use, logging, err := config(r.HardRequirement)
	if err != nil || use == 0 {
		return nil, err
	}
	res := Result{ABI: use, Scopes: cfg.Scoped.String(), Handled: cfg.HandledAccessFS.String(), Logging: logging}
	var rules []ll.Rule
	add := func(path, access string) error {
		p := path
		if fd, ok := r.Descriptors[path]; ok {
			p = fmt.Sprintf("/proc/self/fd/%d", fd)
		}
		fi, err := os.Stat(p)
		if err != nil {
			// A path that does not exist grants nothing: skipping it never
			// widens access, so it is reported, not fatal.
			if errors.Is(err, os.ErrNotExist) {
				res.Skipped = append(res.Skipped, Skip{Path: path, Access: access, Reason: "does not exist"})
				return nil
			}
			return fmt.Errorf("landlock: %s path %s: %w", access, path, err)
		}
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("landlock: open %s path %s: %w", access, path, err)
		}
		unix.Close(fd)
		var rule ll.FSRule
		switch {
		case access == "read_only" && fi.IsDir():
			rule = ll.RODirs(p)
		case access == "read_only":
			rule = ll.ROFiles(p)
		case fi.IsDir():
			rule = ll.RWDirs(p).WithRefer().WithIoctlDev()
			res.ReadWrite++
		default:
			rule = ll.RWFiles(p).WithIoctlDev()
			res.ReadWrite++
		}
		if access == "read_only" {
			res.ReadOnly++
		}
		rules = append(rules, rule)
		return nil
	}
	for _, p := range r.ReadOnly {
		if err := add(p, "read_only"); err != nil {
			if r.HardRequirement {
				return nil, err
			}
			res.Skipped = append(res.Skipped, Skip{Path: p, Access: "read_only", Reason: err.Error()})
		}
	}
	for _, p := range r.ReadWrite {
		if err := add(p, "read_write"); err != nil {
			if r.HardRequirement {
				return nil, err
			}
			res.Skipped = append(res.Skipped, Skip{Path: p, Access: "read_write", Reason: err.Error()})
		}
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return nil, fmt.Errorf("landlock: create ruleset (ABI %d): %w", use, err)
	}
	if fd < 0 {
		return nil, fmt.Errorf("landlock: ruleset handles nothing at ABI %d", use)
	}
	return &Ruleset{fd: fd, flags: flags, result: res}, nil
}

// config is the go-landlock configuration Build uses on this kernel: the
// highest ABI both offer, without network rights, with denial logging
// from ABI 7. use 0 with a nil error: Landlock unavailable, best effort.
func config(hard bool) (cfg ll.Config, use int, logging string, err error) {
	abi, err := feature.LandlockABI()
	if err != nil || abi < 1 {
		if hard {
			return cfg, 0, "", fmt.Errorf("landlock: hard_requirement but Landlock is unavailable: %v", err)
		}
		return cfg, 0, "", nil
	}
	if hard && abi < MinHardABI {
		return cfg, 0, "", fmt.Errorf("landlock: hard_requirement needs ABI >= %d, kernel offers %d", MinHardABI, abi)
	}
	use = abi
	if use >= len(presets) {
		use = len(presets) - 1
	}
	cfg = presets[use]
	// Never handle network rights: the network namespace and proxy own them.
	cfg.HandledAccessNet = 0
	if use >= MinLogABI {
		// Denials are logged by default only until the first execve; the
		// command is a new executable, so ask for its denials and its
		// descendants' (nested domains stay logged: the default).
		cfg = cfg.EnableLoggingForSubprocesses()
		logging = "new_exec_on"
	}
	return cfg, use, logging, nil
}

// Offer reports what a ruleset built now would enforce, without building
// one: the ABI in use, the handled rights, the scopes and the logging
// flag (Enforced false, no rule counts). ABI 0: Landlock unavailable.
func Offer() Result {
	cfg, use, logging, err := config(false)
	if err != nil || use == 0 {
		return Result{}
	}
	return Result{ABI: use, Scopes: cfg.Scoped.String(), Handled: cfg.HandledAccessFS.String(), Logging: logging}
}

// Result reports what the ruleset grants.
func (rs *Ruleset) Result() Result { return rs.result }

// Close releases the ruleset fd without enforcing it.
func (rs *Ruleset) Close() error {
	if rs.fd < 0 {
		return nil
	}
	err := unix.Close(rs.fd)
	rs.fd = -1
	return err
}

// Enforce restricts the calling OS thread (and every process it forks from
// then on). The caller must have locked the goroutine to its thread and
// set no_new_privs. The ruleset fd is closed.
func (rs *Ruleset) Enforce() (Result, error) {
	defer rs.Close()
	if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || nnp != 1 {
		return Result{}, fmt.Errorf("landlock: no_new_privs is not set on this thread")
	}
	if err := llsys.LandlockRestrictSelf(rs.fd, rs.flags); err != nil {
		return Result{}, fmt.Errorf("landlock: restrict self: %w", err)
	}
	rs.result.Enforced = true
	return rs.result, nil
}
