//go:build linux

package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchDebounce folds the burst of events one write makes (create,
// close-write, rename) into one reload.
const watchDebounce = 100 * time.Millisecond

// Watch reloads the policy (and the credentials, Config.CredentialsPath)
// whenever its file changes, until ctx is done.
// It watches the file's directory, not the file, so an atomic
// write-then-rename (the only safe way to replace a policy) is seen: the
// new inode arrives as IN_MOVED_TO under the watched name. In-place
// writes (IN_CLOSE_WRITE) and new links (IN_CREATE) count too. Bursts
// within 100 ms make one reload; an unchanged checksum makes none. Once
// the watch is in place the file is checked once, so a change made
// between New's load (or a reload) and the watch's start is not missed.
// Watch returns nil when ctx ends and an error if the directory cannot be
// watched or disappears.
func (p *Proxy) Watch(ctx context.Context) error {
	var timer *time.Timer
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
	}()
	trigger := func() {
		mu.Lock()
		defer mu.Unlock()
		if timer == nil {
			timer = time.AfterFunc(watchDebounce, func() { p.Reload("inotify") })
			return
		}
		timer.Reset(watchDebounce)
	}
	if p.cfg.Credentials == nil || p.cfg.CredentialsPath == "" {
		return p.watchFile(ctx, p.cfg.PolicyPath, "policy", trigger)
	}
	// The credentials file is watched the same way: a change reloads
	// both (an unchanged policy or credentials file does nothing).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- p.watchFile(ctx, p.cfg.CredentialsPath, "credentials", trigger) }()
	go func() { errc <- p.watchFile(ctx, p.cfg.PolicyPath, "policy", trigger) }()
	err := <-errc
	cancel()
	<-errc
	return err
}

// watchFile calls trigger whenever the file at path changes, until ctx is
// done (Watch). what names the file in errors.
func (p *Proxy) watchFile(ctx context.Context, path, what string, trigger func()) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("proxy: watch %s: inotify_init1: %w", what, err)
	}
	const mask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return fmt.Errorf("proxy: watch %s directory %s: %w", what, dir, err)
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: Read parks on the poller
	// A change written before the watch existed made no event: check
	// the file once now (an unchanged checksum does nothing).
	p.Reload("inotify")
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	defer f.Close()

	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("proxy: watch %s: read inotify: %w", what, err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				trigger() // events were lost; the checksum tells whether anything changed
			case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
				return fmt.Errorf("proxy: watch %s: directory %s was removed or moved; reloads now need SIGHUP or POST /reload", what, dir)
			case string(bytes.TrimRight(nameBytes, "\x00")) == name:
				trigger()
			}
		}
	}
}
