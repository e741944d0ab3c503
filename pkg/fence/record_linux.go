//go:build linux

package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// lockFile is the allocation lock inside the state dir.
const lockFile = "alloc.lock"

// record is what the state dir keeps about one fenced sandbox. The
// kernel's addresses are the truth for allocation; the record lets an
// operator (and Leftovers) see what a sandbox was given.
type record struct {
	Sandbox     string    `json:"sandbox"`
	HostIf      string    `json:"host_if"`
	Table       string    `json:"table"`
	Prefix      string    `json:"prefix"`
	HostAddr    string    `json:"host_addr"`
	SandboxAddr string    `json:"sandbox_addr"`
	ProxyPort   uint16    `json:"proxy_port"`
	FencePort   uint16    `json:"fence_port"`
	Netns       string    `json:"netns"`
	Created     time.Time `json:"created"`
}

// lockAlloc takes the state dir's allocation lock (an flock, released
// by the kernel if the process dies), waiting until ctx is done.
func lockAlloc(ctx context.Context, dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("StateDir %s: %w", dir, err)
	}
	p := filepath.Join(dir, lockFile)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	for delay := time.Millisecond; ; {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			unix.Close(fd)
			return nil, fmt.Errorf("flock %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			unix.Close(fd)
			return nil, fmt.Errorf("waiting for %s: %w", p, ctx.Err())
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

func recordPath(dir, sandbox string) string { return filepath.Join(dir, sandbox+".json") }

func writeRecord(dir string, f *Fence) error {
	b, err := json.MarshalIndent(record{
		Sandbox:     f.Sandbox,
		HostIf:      f.HostIf,
		Table:       f.Table,
		Prefix:      f.Prefix.String(),
		HostAddr:    f.HostAddr.String(),
		SandboxAddr: f.SandboxAddr.String(),
		ProxyPort:   f.ProxyPort,
		FencePort:   f.FencePort,
		Netns:       f.cfg.NetnsPath,
		Created:     time.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.ReplaceFile(recordPath(dir, f.Sandbox), append(b, '\n'), 0o600)
}

func removeRecord(dir, sandbox string) error {
	if err := os.Remove(recordPath(dir, sandbox)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove record: %w", err)
	}
	return nil
}

// listRecords names the sandboxes with a record in dir.
func listRecords(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fence: StateDir %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && e.Type().IsRegular() && validateName(name) == nil {
			out = append(out, name)
		}
	}
	return out, nil
}
