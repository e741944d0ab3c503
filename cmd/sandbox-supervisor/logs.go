package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/eventlog"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

const logsUsage = `usage: sandbox-supervisor logs [--since DUR] [--follow] [--json] [--denied] [--state-dir DIR] NAME
       sandbox-supervisor logs --proxy [--since DUR] [--follow] [--state-dir DIR] NAME

Prints the sandbox's events, oldest first (newest last), from the OCSF
file it was created with (--events FILE): its own lines only, from its
creation on. --denied keeps the denials, one line each:

  DENY /usr/bin/curl(4242) -> pastebin.com:443 policy_denied/no_matching_endpoint
  DENY /usr/bin/curl(4242) -> POST files.example.com:80/upload policy_denied
  DENY-FS /usr/bin/cat(4242) read /etc/shadow

--json prints the events as JSON lines, with control, line-separator and
bidi characters inside strings written as \uXXXX escapes (the same values).
Every name in the output may come from the agent: it never reaches the
terminal raw. --follow keeps printing new events until the sandbox ends or
the command is interrupted.

--proxy prints the egress proxy's own log instead (proxy.log in the
sandbox's state directory, and the previous proxy.log.1): its start,
reloads and one line per denied connection. The proxy never writes to
the operator's terminal, which the sandboxed command shares; the
supervisor repeats there only the proxy's warnings and errors.

Examples:
  sudo sandbox-supervisor logs task-42
  sudo sandbox-supervisor logs --denied --follow task-42
  sudo sandbox-supervisor logs --since 10m --json task-42 | jq .status_code
  sudo sandbox-supervisor logs --proxy --follow task-42

Flags:
`

func logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("logs", logsUsage, stderr)
	since := fs.Duration("since", 0, "only events of the last DUR (e.g. 10m)")
	follow := fs.Bool("follow", false, "keep printing new events until the sandbox ends")
	asJSON := fs.Bool("json", false, "print the events as JSON lines")
	denied := fs.Bool("denied", false, "only denials (network, HTTP, filesystem), one human line each")
	proxy := fs.Bool("proxy", false, "the egress proxy's own log instead of the events")
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	name, err := parseName(fs, "logs", args)
	if err != nil {
		return err
	}
	if *since < 0 {
		return cli.Usagef("--since %v: must not be negative", *since)
	}
	store, err := openStoreAsRoot("logs", *dir)
	if err != nil {
		return err
	}
	l, err := store.Get(name)
	if err != nil {
		return cli.Failf("logs: %v", err)
	}
	if *proxy {
		if *asJSON || *denied {
			return cli.Usagef("logs: --proxy prints the proxy's log as it is; --json and --denied are for the events")
		}
		return proxyLogs(ctx, store, name, *since, *follow, stdout)
	}
	if l.EventsFile == "" {
		return cli.Failf("logs: sandbox %s records no events file (create it with --events FILE)", name)
	}
	f := eventlog.Filter{Sandbox: name, Since: l.Created, Denied: *denied}
	if *since > 0 {
		if s := time.Now().Add(-*since); s.After(f.Since) {
			f.Since = s
		}
	}
	file, err := os.Open(l.EventsFile)
	if err != nil {
		return cli.Failf("logs: %v", err)
	}
	defer file.Close()
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	r := bufio.NewReaderSize(file, 64<<10)
	var partial []byte
	for {
		line, err := r.ReadBytes('\n')
		if err == nil {
			line = append(partial, line...)
			partial = nil
			if e, ok := eventlog.Parse(line); ok && f.Match(e) {
				if *asJSON {
					// The events quote names the agent chose: no raw
					// control or bidi rune reaches a terminal (the
					// value is unchanged).
					w.Write(termsafe.JSON(line))
				} else {
					fmt.Fprintln(w, eventlog.Line(e))
				}
			}
			continue
		}
		if !errors.Is(err, io.EOF) {
			return cli.Failf("logs: %s: %v", l.EventsFile, err)
		}
		// An unfinished last line waits for its end.
		partial = append(partial, line...)
		if !*follow {
			return nil
		}
		if err := w.Flush(); err != nil {
			return err
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

// ended reports whether the sandbox no longer runs: deleted, exited, or
// its creator gone.
func ended(store *state.Store, name string) bool {
	l, err := store.Get(name)
	return err != nil || l.Status == state.StatusExited || !store.CreatorAlive(l)
}
