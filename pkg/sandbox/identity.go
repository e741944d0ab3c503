package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// SandboxID is the uid and gid used for `run_as_user: sandbox` /
// `run_as_group: sandbox` when the host has no passwd/group entry named
// sandbox.
const SandboxID = 10001

// ResolveIdentity maps the policy's run_as_user and run_as_group to
// numeric ids. "sandbox" (or empty) means the host's passwd/group entry
// named sandbox if it exists, else 10001; a number is used as is. Root
// (0) is refused whatever the spelling.
func ResolveIdentity(user, group string) (uid, gid uint32, err error) {
	uid, err = resolveID(user, "/etc/passwd", "run_as_user")
	if err != nil {
		return 0, 0, err
	}
	gid, err = resolveID(group, "/etc/group", "run_as_group")
	if err != nil {
		return 0, 0, err
	}
	return uid, gid, nil
}

func resolveID(v, db, field string) (uint32, error) {
	if v == "" || v == "sandbox" {
		id, ok, err := lookupName(db, "sandbox")
		if err != nil {
			return 0, fmt.Errorf("%s: %w", field, err)
		}
		if !ok {
			return SandboxID, nil
		}
		if id == 0 {
			return 0, fmt.Errorf("%s: the host's sandbox entry in %s is id 0; refusing to run as root", field, db)
		}
		return id, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is neither \"sandbox\" nor a numeric id", field, v)
	}
	if n == 0 || n > 4294967294 {
		return 0, fmt.Errorf("%s: %d is outside 1..4294967294 (never root)", field, n)
	}
	return uint32(n), nil
}

// lookupName finds name in a passwd- or group-format file.
func lookupName(path, name string) (uint32, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	defer f.Close()
	return scanIDs(f, name)
}

func scanIDs(r io.Reader, name string) (uint32, bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || f[0] != name {
			continue
		}
		n, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("entry %q has a bad id %q", name, f[2])
		}
		return uint32(n), true, nil
	}
	return 0, false, sc.Err()
}
