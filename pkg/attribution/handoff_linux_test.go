//go:build linux

package attribution

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// handOffBackends are the backends every hand-off test runs against.
func handOffBackends(t *testing.T, s *testSandbox) map[string]Backend {
	return map[string]Backend{"proc": s.backend(t, nil)}
}

// waitExe waits until pid runs exe (after an exec).
func waitExe(t *testing.T, pid int, exe string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err == nil && got == exe {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d runs %q (%v), want %s", pid, got, err, exe)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A socket created and connected by one binary and handed to another is
// attributed to the process that holds it when the request arrives (the
// one that sends it), never to the connector alone: by exec (same pid,
// new binary), to a child that outlives the parent's copy, and over
// SCM_RIGHTS to an unrelated process. A socket both the sender and the
// receiver of SCM_RIGHTS still hold is refused.
func TestHandOffsAttributeTheSender(t *testing.T) {
	s := newTestSandbox(t, 128)
	self, _ := os.Executable()
	// The second binary: a copy of the test binary under another name,
	// standing in for an unlisted program.
	other := filepath.Join(t.TempDir(), "other-binary")
	copyFile(t, self, other, nil)
	if err := os.Chmod(other, 0o755); err != nil {
		t.Fatal(err)
	}
	backends := handOffBackends(t, s)
	ctx := context.Background()
	check := func(what string, c *client, wantPID int, wantExe string, wantAncestor int) {
		t.Helper()
		for name, b := range backends {
			id, err := b.Lookup(ctx, c.client, c.proxy)
			if err != nil {
				t.Errorf("%s, %s backend: %v", what, name, err)
				continue
			}
			if id.PID != wantPID || id.Exe != wantExe {
				t.Errorf("%s, %s backend: attributed to pid %d %s, want pid %d %s", what, name, id.PID, id.Exe, wantPID, wantExe)
			}
			if wantAncestor != 0 && (len(id.Ancestors) == 0 || id.Ancestors[0].PID != wantAncestor) {
				t.Errorf("%s, %s backend: ancestors %+v, want %d first", what, name, id.Ancestors, wantAncestor)
			}
			for _, a := range id.Ancestors {
				if wantAncestor == 0 && a.Exe == self {
					t.Errorf("%s, %s backend: the connector %s appears among the sender's ancestors %+v", what, name, self, id.Ancestors)
				}
			}
		}
	}

	t.Run("exec", func(t *testing.T) {
		c := s.spawnArgs(self, "exechand", "4", other)
		waitExe(t, c.pid, other)
		check("fd inherited across exec", c, c.pid, other, 0)
	})
	t.Run("fork", func(t *testing.T) {
		c := s.spawnArgs(self, "forkhand", "4", other)
		check("fd inherited by a child, parent's copy closed", c, c.holders[0], other, c.pid)
	})
	for _, keep := range []string{"close", "keep"} {
		t.Run("scm_rights_"+keep, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.sock")
			tag := testutil.UniqueName("recv")
			if _, err := fmt.Fprintf(s.stdin, "spawn %s recv %s %s\n", other, tag, path); err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(s.waitLine(tag, 20*time.Second))
			recvPID, _ := strconv.Atoi(f[2])
			c := s.spawnArgs(self, "scmsend", "4", path, keep)
			s.waitLine(tag+".got", 20*time.Second)
			if keep == "close" {
				check("fd passed over SCM_RIGHTS, sender's copy closed", c, recvPID, other, 0)
				return
			}
			for name, b := range backends {
				_, err := b.Lookup(ctx, c.client, c.proxy)
				var se *SharedError
				if !errors.As(err, &se) || !sameSet(se.PIDs, []int{c.pid, recvPID}) {
					t.Errorf("fd held by sender and receiver, %s backend: %v, want *SharedError naming %d and %d", name, err, c.pid, recvPID)
				}
			}
		})
	}
}
