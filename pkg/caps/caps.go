// Package caps drops a thread's privileges ahead of the sandboxed exec and
// verifies, from /proc, that a process really ended up unprivileged.
//
// The drop is split the way the kernel splits it. On the calling thread
// (locked, about to fork the child): clear the ambient set, drop every
// capability from the bounding set, empty the inheritable set and set
// no_new_privs. The uid/gid change itself happens in the forked child
// (setgroups([]), setgid, setuid), after which the kernel clears the
// permitted and effective sets; with an empty bounding set and
// no_new_privs nothing can raise them again, not even a setuid-root or
// file-capability binary.
package caps

import (
	"fmt"
	"strconv"
	"strings"
)

// Status is the privilege-relevant part of /proc/<pid>/status.
type Status struct {
	UID        [4]uint32 // real, effective, saved, filesystem
	GID        [4]uint32
	Groups     []uint32
	CapInh     uint64
	CapPrm     uint64
	CapEff     uint64
	CapBnd     uint64
	CapAmb     uint64
	NoNewPrivs int
	Seccomp    int // 0 off, 1 strict, 2 filter
}

// ParseStatus parses the text of /proc/<pid>/status.
func ParseStatus(text string) (Status, error) {
	var s Status
	seen := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		var err error
		switch k {
		case "Uid", "Gid":
			f := strings.Fields(v)
			if len(f) != 4 {
				return s, fmt.Errorf("caps: status %s: %q", k, v)
			}
			dst := &s.UID
			if k == "Gid" {
				dst = &s.GID
			}
			for i, x := range f {
				n, e := strconv.ParseUint(x, 10, 32)
				if e != nil {
					return s, fmt.Errorf("caps: status %s: %w", k, e)
				}
				dst[i] = uint32(n)
			}
		case "Groups":
			for _, x := range strings.Fields(v) {
				n, e := strconv.ParseUint(x, 10, 32)
				if e != nil {
					return s, fmt.Errorf("caps: status Groups: %w", e)
				}
				s.Groups = append(s.Groups, uint32(n))
			}
		case "CapInh":
			s.CapInh, err = strconv.ParseUint(v, 16, 64)
		case "CapPrm":
			s.CapPrm, err = strconv.ParseUint(v, 16, 64)
		case "CapEff":
			s.CapEff, err = strconv.ParseUint(v, 16, 64)
		case "CapBnd":
			s.CapBnd, err = strconv.ParseUint(v, 16, 64)
		case "CapAmb":
			s.CapAmb, err = strconv.ParseUint(v, 16, 64)
		case "NoNewPrivs":
			s.NoNewPrivs, err = strconv.Atoi(v)
		case "Seccomp":
			s.Seccomp, err = strconv.Atoi(v)
		default:
			continue
		}
		if err != nil {
			return s, fmt.Errorf("caps: status %s: %w", k, err)
		}
		seen[k] = true
	}
	for _, k := range []string{"Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"} {
		if !seen[k] {
			return s, fmt.Errorf("caps: status lacks %s", k)
		}
	}
	return s, nil
}

// Expect is what a confined process must look like.
type Expect struct {
	UID, GID uint32
	Seccomp  bool // filter mode required
}

// Verify returns an error naming every way s falls short of e.
func Verify(s Status, e Expect) error {
	var bad []string
	for i, u := range s.UID {
		if u != e.UID {
			bad = append(bad, fmt.Sprintf("uid[%d]=%d want %d", i, u, e.UID))
		}
	}
	for i, g := range s.GID {
		if g != e.GID {
			bad = append(bad, fmt.Sprintf("gid[%d]=%d want %d", i, g, e.GID))
		}
	}
	if len(s.Groups) > 0 {
		bad = append(bad, fmt.Sprintf("supplementary groups %v, want none", s.Groups))
	}
	for name, v := range map[string]uint64{"CapInh": s.CapInh, "CapPrm": s.CapPrm, "CapEff": s.CapEff, "CapBnd": s.CapBnd, "CapAmb": s.CapAmb} {
		if v != 0 {
			bad = append(bad, fmt.Sprintf("%s=%016x want 0", name, v))
		}
	}
	if s.NoNewPrivs != 1 {
		bad = append(bad, fmt.Sprintf("NoNewPrivs=%d want 1", s.NoNewPrivs))
	}
	if e.Seccomp && s.Seccomp != 2 {
		bad = append(bad, fmt.Sprintf("Seccomp=%d want 2", s.Seccomp))
	}
	if e.UID == 0 || e.GID == 0 {
		bad = append(bad, "target identity is root")
	}
	if len(bad) > 0 {
		return fmt.Errorf("caps: privilege drop not in effect: %s", strings.Join(bad, ", "))
	}
	return nil
}
