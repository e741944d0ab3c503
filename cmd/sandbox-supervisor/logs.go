package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/eventlog"
	"github.com/palisade-sandbox/palisade/pkg/proposal"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

const logsUsage = `usage: sandbox-supervisor logs [--since DUR] [--follow] [--json] [--denied] [--state-dir DIR] NAME
       sandbox-supervisor logs --denied --summary [--since DUR] [--follow [--interval D]] [--state-dir DIR] NAME
       sandbox-supervisor logs --proxy [--since DUR] [--follow] [--state-dir DIR] NAME

Prints the sandbox's events, oldest first (newest last), from the OCSF
file it was created with (--events FILE): its own lines only, from its
creation on. --denied keeps the denials, one line each:

  DENY /usr/bin/curl(4242) -> pastebin.com:443 policy_denied/no_matching_endpoint
  DENY /usr/bin/curl(4242) -> POST files.example.com:80/upload policy_denied
  DENY-FS /usr/bin/cat(4242) read /etc/shadow

--denied --summary folds the denials instead, as policy-sync propose does:
one line per sandbox, kind, binary and destination or path, with the
count and the first and last time seen. With --follow the table is
printed again whenever new denials came in, at most every --interval
(default $OPENSHELL_DENIAL_FLUSH_INTERVAL_SECS seconds, else 10s), and
once more when the sandbox ends. policy-sync propose --events FILE
--sandbox NAME turns them into a policy change.

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
  sudo sandbox-supervisor logs --denied --summary --follow task-42
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
	summary := fs.Bool("summary", false, "with --denied: fold the denials into a table (count, first and last seen), as policy-sync propose does")
	interval := fs.Duration("interval", denialFlushInterval(), "with --summary --follow: reprint the table at most this often")
	dir := fs.String("state-dir", state.DefaultRoot, "state root")
	name, err := parseName(fs, "logs", args)
	if err != nil {
		return err
	}
	if *since < 0 {
		return cli.Usagef("--since %v: must not be negative", *since)
	}
	if *summary && (!*denied || *asJSON || *proxy) {
		return cli.Usagef("logs: --summary goes with --denied (and not with --json or --proxy)")
	}
	if *interval <= 0 {
		return cli.Usagef("logs: --interval %v: must be positive", *interval)
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
	var sum *denialSummary
	if *summary {
		sum = &denialSummary{name: name, interval: *interval, agg: &proposal.Aggregator{Filter: proposal.Filter{Sandbox: name}}}
		defer sum.flush(w, true)
	}
	r := bufio.NewReaderSize(file, 64<<10)
	var partial []byte
	for {
		line, err := r.ReadBytes('\n')
		if err == nil {
			line = append(partial, line...)
			partial = nil
			if e, ok := eventlog.Parse(line); ok && f.Match(e) {
				if sum != nil {
					sum.add(line)
				} else if *asJSON {
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
		sum.flush(w, false)
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

// denialSummary is logs --denied --summary: the aggregation policy-sync
// propose makes, printed as a table when it changed (at most every
// interval while following, and at the end).
type denialSummary struct {
	name     string
	interval time.Duration
	agg      *proposal.Aggregator
	dirty    bool
	last     time.Time
}

func (d *denialSummary) add(line []byte) {
	if d.agg.Add(line) {
		d.dirty = true
	}
}

// flush prints the table when new denials came in and the interval has
// passed (or final is set), and the first time even when empty.
func (d *denialSummary) flush(w io.Writer, final bool) {
	if d == nil || !d.dirty && !d.last.IsZero() || !final && !d.last.IsZero() && time.Since(d.last) < d.interval {
		return
	}
	d.dirty, d.last = false, time.Now()
	fmt.Fprintf(w, "== denials of %s as of %s\n", termsafe.String(d.name), d.last.UTC().Format("2006-01-02T15:04:05Z"))
	proposal.WriteSummary(w, d.agg.Denials(), termsafe.String)
}

// denialFlushInterval is seed 004's denial aggregation interval:
// OPENSHELL_DENIAL_FLUSH_INTERVAL_SECS seconds, else 10.
func denialFlushInterval() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("OPENSHELL_DENIAL_FLUSH_INTERVAL_SECS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 10 * time.Second
}

// ended reports whether the sandbox no longer runs: deleted, exited, or
// its creator gone.
func ended(store *state.Store, name string) bool {
	l, err := store.Get(name)
	return err != nil || l.Status == state.StatusExited || !store.CreatorAlive(l)
}
