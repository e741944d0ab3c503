// Command ocsf-collector follows OCSF JSONL event files (or stdin),
// normalises every event into a mac.action_event.v1 record and ships the
// records to the hub's action ledger, an OTLP/HTTP logs endpoint and/or
// stdout, with a durable spool so that neither a hub outage nor a crash
// loses an event. See pkg/collector and docs/events.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/collector"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
)

const prog = "ocsf-collector"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	cli.Exit(prog, err, os.Stderr)
}

const usage = `Usage: ocsf-collector [flags]
       ocsf-collector local-hub --agent-id ID --token-file FILE [--assign POLICY]

Follow OCSF JSONL event files (rotation-safe) or stdin, normalise each event
into a mac.action_event.v1 record, and deliver the records to the hub
(POST /action-events), an OTLP/HTTP logs endpoint and/or stdout. Records are
fsynced to a spool before an input checkpoint moves, and leave the spool
only when a destination acknowledged them: a hub outage or a crash loses
nothing, and deterministic event ids let the hub drop redeliveries.

Inputs default to $MAC_OPENSHELL_EVENTS_FILE. Lines that are not OCSF events
go to <spool>/dead-letter.jsonl. With --stdout as the only destination and
no --spool nothing is kept on disk: files are read from the start and lines
that are not events are counted and dropped. An --input that matches no
file is an error with --once, a warning otherwise. SIGINT/SIGTERM: stop
reading, keep delivering for --shutdown-timeout, exit 0.

Examples:
  # follow the sandbox event logs and ship them to the hub
  ocsf-collector --input '/var/log/openshell-ocsf.*.log' \
      --hub https://hub.example:8443 --agent-id agent_hub --token-file ~/.mac/worker-token

  # normalise a file once, as JSONL on stdout (no spool, nothing kept)
  ocsf-collector --input events.log --stdout --once

  # a pipeline: read stdin to EOF, ship, exit
  zcat old-events.log.gz | ocsf-collector --input - --hub http://127.0.0.1:8080 \
      --agent-id agent_hub --token-file token

  # a hub on this host for trying policy-sync and the collector end to end
  # (see ocsf-collector local-hub --help and docs/hub-api.md)
  ocsf-collector local-hub --agent-id worker-1 --token-file /tmp/palisade-hub/worker-1.token \
      --assign policies/examples/npm.yaml

  # also export OTLP logs and serve Prometheus metrics
  ocsf-collector --hub https://hub.example --agent-id a1 --token-file t \
      --otlp-endpoint http://127.0.0.1:4318 --metrics-listen 127.0.0.1:9464

Exit status: 0 when it stopped normally (--once: the inputs were read to
their end; or SIGINT/SIGTERM), with anything not yet acknowledged kept in
the spool for the next run; 1 when the collector failed (with --once an
--input that matches no file; a spool it cannot write); 2 on bad flags.

Flags:
`

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if cli.IsVersion(args) {
		return cli.PrintVersion(stdout, prog)
	}
	if len(args) > 0 && args[0] == "__hubtest" {
		return runHubtest(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "local-hub" {
		return runLocalHub(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(cli.FlagOutput(stderr))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		cli.PrintFlags(fs.Output(), fs)
	}
	var inputs multiFlag
	fs.Var(&inputs, "input", "OCSF JSONL file glob to follow, or - for stdin (repeatable; default $MAC_OPENSHELL_EVENTS_FILE)")
	hubURL := fs.String("hub", "", "hub base URL; ship records to POST /action-events")
	agentID := fs.String("agent-id", "", "this agent's id (required with --hub; stamped into every record)")
	tokenFile := fs.String("token-file", "", "file holding the hub bearer token (required with --hub)")
	spoolDir := fs.String("spool", "", "spool directory: checkpoints, spool, dead letters (default with --hub or --otlp-endpoint: $STATE_DIRECTORY or ~/.mac/ocsf-collector; --stdout alone keeps nothing)")
	toStdout := fs.Bool("stdout", false, "write normalised JSONL records to stdout")
	otlp := fs.String("otlp-endpoint", "", "OTLP/HTTP base URL; export records as logs to <URL>/v1/logs (JSON)")
	metricsAddr := fs.String("metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics")
	batchSize := fs.Int("batch-size", 500, "records per request (1-10000)")
	flush := fs.Duration("flush-interval", time.Second, "longest a record waits for a full batch")
	poll := fs.Duration("poll-interval", 250*time.Millisecond, "how often followed files are checked")
	maxBackoff := fs.Duration("max-backoff", 30*time.Second, "cap on the retry delay (Retry-After may ask for longer, up to 10m)")
	spoolMax := fs.Int64("spool-max-bytes", 1<<30, "pause reading inputs while this many spooled bytes are unacknowledged")
	shutdown := fs.Duration("shutdown-timeout", 10*time.Second, "after SIGINT/SIGTERM, how long to keep delivering")
	closeInactive := fs.Duration("close-inactive", 5*time.Second, "stop following a rotated-away file after this long without new lines")
	once := fs.Bool("once", false, "read file inputs to their current end, deliver everything, exit")
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := cli.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return cli.Usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q (inputs are given with --input)", fs.Arg(0))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return cli.Usagef("--log-level: %q is not debug, info, warn or error", *logLevel)
	}
	log, err := cli.NewLogger(*logFormat, stderr, level)
	if err != nil {
		return err
	}

	if len(inputs) == 0 {
		env := os.Getenv("MAC_OPENSHELL_EVENTS_FILE")
		if env == "" {
			return cli.Usagef("no input: pass --input GLOB (or - for stdin), or set MAC_OPENSHELL_EVENTS_FILE")
		}
		inputs = multiFlag{env}
	}
	for _, in := range inputs {
		if in == "" {
			return cli.Usagef("--input: empty value")
		}
		if in != "-" {
			if _, err := filepath.Match(in, ""); err != nil {
				return cli.Usagef("--input %q: bad glob: %v", in, err)
			}
		}
	}
	if *batchSize < 1 || *batchSize > hub.MaxBatchEvents {
		return cli.Usagef("--batch-size: %d is outside 1-%d", *batchSize, hub.MaxBatchEvents)
	}
	for name, d := range map[string]time.Duration{"--flush-interval": *flush, "--poll-interval": *poll, "--max-backoff": *maxBackoff, "--shutdown-timeout": *shutdown, "--close-inactive": *closeInactive} {
		if d <= 0 {
			return cli.Usagef("%s: must be positive, have %s", name, d)
		}
	}
	if *spoolMax <= 0 {
		return cli.Usagef("--spool-max-bytes: must be positive")
	}
	if *hubURL == "" && *otlp == "" && !*toStdout {
		return cli.Usagef("no destination: pass --hub, --otlp-endpoint and/or --stdout")
	}
	if *agentID != "" && !hub.ValidAgentID(*agentID) {
		return cli.Usagef("--agent-id %q: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", *agentID)
	}
	var hc *hub.Client
	if *hubURL != "" {
		if *agentID == "" {
			return cli.Usagef("--hub needs --agent-id")
		}
		if *tokenFile == "" {
			return cli.Usagef("--hub needs --token-file")
		}
		hc, err = hub.New(hub.Config{URL: *hubURL, AgentID: *agentID, TokenFile: *tokenFile, UserAgent: prog + "/1"})
		if err != nil {
			return cli.Usagef("%v", err)
		}
	} else if *tokenFile != "" {
		return cli.Usagef("--token-file is only used with --hub")
	}
	if *otlp != "" {
		if _, err := collector.OTLPLogsURL(*otlp); err != nil {
			return cli.Usagef("%v", err)
		}
	}
	// --stdout alone needs no spool: nothing is checkpointed unless a
	// spool is asked for.
	dir := *spoolDir
	if dir == "" && (*hubURL != "" || *otlp != "") {
		dir, err = defaultSpool()
		if err != nil {
			return err
		}
	}
	for _, in := range inputs {
		if in == "-" {
			continue
		}
		if m, _ := filepath.Glob(in); len(m) == 0 {
			if *once {
				return cli.Failf("--input %s matches no file (with --once there is nothing to wait for)", in)
			}
			log.Warn("--input matches no file yet; waiting for one to appear", "input", in)
		}
	}

	m := collector.NewMetrics()
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return cli.Usagef("--metrics-listen %s: %v", *metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
		log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}

	cfg := collector.Config{
		Inputs: inputs, Stdin: stdin, SpoolDir: dir, AgentID: *agentID,
		Hub: hc, OTLPEndpoint: *otlp,
		BatchSize: *batchSize, FlushInterval: *flush, PollInterval: *poll, MaxBackoff: *maxBackoff,
		SpoolMaxBytes: *spoolMax, ShutdownTimeout: *shutdown, CloseInactive: *closeInactive,
		Once: *once, Logger: log, Metrics: m,
	}
	if *toStdout {
		cfg.Stdout = stdout
	}
	log.Info("collector starting", "inputs", strings.Join(inputs, ","), "spool", dir, "hub", *hubURL != "", "otlp", *otlp != "", "stdout", *toStdout, "once", *once)
	sum, err := collector.Run(ctx, cfg)
	attrs := []any{"lines_read", sum.LinesRead, "records", sum.Records, "dead_letters", sum.DeadLetters, "pending_spool_bytes", sum.Pending}
	for k, v := range sum.Shipped {
		attrs = append(attrs, "shipped_"+k, v)
	}
	if err != nil {
		log.Error("collector failed", append(attrs, "err", err)...)
		return cli.WithCode(cli.ExitFailed, err)
	}
	log.Info("collector stopped", attrs...)
	if sum.DeadLetters > 0 {
		if dir == "" {
			log.Warn("some lines were not OCSF events and were dropped (pass --spool to keep them as dead letters)", "count", sum.DeadLetters)
		} else {
			log.Warn("some lines were set aside as dead letters", "count", sum.DeadLetters, "file", filepath.Join(dir, collector.DeadLetterName))
		}
	}
	if sum.Pending > 0 {
		log.Warn("records remain in the spool; the next run delivers them", "bytes", sum.Pending)
	}
	return nil
}

// defaultSpool is $STATE_DIRECTORY (systemd StateDirectory=, first entry)
// or ~/.mac/ocsf-collector.
func defaultSpool() (string, error) {
	if sd := os.Getenv("STATE_DIRECTORY"); sd != "" {
		return strings.Split(sd, ":")[0], nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", cli.Usagef("no --spool given and no home directory to default to: pass --spool DIR")
	}
	return filepath.Join(home, ".mac", "ocsf-collector"), nil
}

// runHubtest is a hidden, test-only mode: a reference hub (pkg/hub/hubtest)
// on loopback for scripts/bench/collector.sh. It prints {"url": ...} once
// listening and the ledger counters on exit.
func runHubtest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(prog+" __hubtest", flag.ContinueOnError)
	fs.SetOutput(cli.FlagOutput(stderr))
	listen := fs.String("listen", "127.0.0.1:0", "address")
	agent := fs.String("agent-id", "", "agent to register")
	tokenFile := fs.String("token-file", "", "write a fresh token for the agent here")
	if err := cli.ParseFlags(fs, args); err != nil {
		return cli.Usagef("%v", err)
	}
	if *agent == "" || *tokenFile == "" {
		return cli.Usagef("__hubtest needs --agent-id and --token-file")
	}
	s, err := hubtest.New(hubtest.Options{Addr: *listen, DiscardEvents: true})
	if err != nil {
		return err
	}
	defer s.Close()
	tf, err := s.TokenFile(filepath.Dir(*tokenFile), *agent)
	if err != nil {
		return err
	}
	if err := os.Rename(tf, *tokenFile); err != nil {
		return err
	}
	json.NewEncoder(stdout).Encode(map[string]string{"url": s.URL})
	<-ctx.Done()
	st := s.Stats()
	return json.NewEncoder(stdout).Encode(map[string]int{"distinct": st.Distinct, "received": st.Received, "duplicates": st.Duplicates(), "batches": st.Batches})
}
