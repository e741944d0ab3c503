package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/sandboxnet"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

// proxyLogs is `logs --proxy`: the egress proxy's own log from the
// sandbox's state directory (the previous file first, when it was
// rotated), lines of the last `since` only when since is set, escaped
// for the terminal (the agent names hosts and binaries in it). With
// follow it keeps printing until the sandbox ends.
func proxyLogs(ctx context.Context, store *state.Store, name string, since time.Duration, follow bool, stdout io.Writer) error {
	dir, err := store.Dir(name)
	if err != nil {
		return cli.Failf("logs: %v", err)
	}
	path := filepath.Join(dir, sandboxnet.ProxyLogName)
	var from time.Time
	if since > 0 {
		from = time.Now().Add(-since)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	emit := func(line string) {
		if t, ok := logLineTime(line); ok && t.Before(from) {
			return
		}
		fmt.Fprintln(w, termsafe.String(line))
	}
	if old, err := os.ReadFile(path + ".1"); err == nil {
		for _, l := range strings.SplitAfter(string(old), "\n") {
			if l = strings.TrimSuffix(l, "\n"); l != "" {
				emit(l)
			}
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return cli.Failf("logs: sandbox %s has no proxy log (%s): its policy allows no egress, so no proxy runs", name, path)
	}
	if err != nil {
		return cli.Failf("logs: %v", err)
	}
	defer func() { f.Close() }()
	r := bufio.NewReaderSize(f, 64<<10)
	var partial string
	for {
		line, err := r.ReadString('\n')
		if err == nil {
			emit(strings.TrimSuffix(partial+line, "\n"))
			partial = ""
			continue
		}
		if !errors.Is(err, io.EOF) {
			return cli.Failf("logs: %s: %v", path, err)
		}
		partial += line
		if !follow {
			return nil
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if rotated(f, path) {
			// The proxy started a new file: the old one is complete.
			if partial != "" {
				emit(partial)
				partial = ""
			}
			nf, err := os.Open(path)
			if err != nil {
				return cli.Failf("logs: %v", err)
			}
			f.Close()
			f = nf
			r.Reset(f)
			continue
		}
		if ended(store, name) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rotated reports whether path now names another file than f.
func rotated(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 == nil && err2 == nil && !os.SameFile(a, b)
}

// logLineTime is the time of an slog record line (text: time=...,
// JSON: {"time":"..."}).
func logLineTime(line string) (time.Time, bool) {
	var v string
	switch {
	case strings.HasPrefix(line, "time="):
		v, _, _ = strings.Cut(line[len("time="):], " ")
	case strings.HasPrefix(line, `{"time":"`):
		v, _, _ = strings.Cut(line[len(`{"time":"`):], `"`)
	default:
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}
