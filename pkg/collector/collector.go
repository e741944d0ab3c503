// Package collector is the engine of ocsf-collector: it follows OCSF JSONL
// inputs (file globs, across rename+create and copytruncate rotation, or
// a stream such as stdin), normalises every line into a
// mac.action_event.v1 record, and delivers the records to the hub's
// action ledger, to an OTLP/HTTP logs endpoint and/or to stdout.
//
// Nothing is lost across a hub outage or a crash (SIGKILL included): a
// record is appended to an on-disk spool and fsynced before the input
// checkpoint moves past its line, and a sink's spool cursor moves only
// past records the sink acknowledged with a 2xx. Everything is delivered
// at least once; deterministic event ids make the hub store it exactly
// once. Lines that are not OCSF events, and records a sink refuses as
// invalid, go to a dead-letter file instead of stopping the pipeline.
package collector

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/hub"
)

// Config configures Run. Zero durations and sizes take the defaults below.
type Config struct {
	// Inputs are file globs to follow, or "-" for Stdin (at most once).
	Inputs []string
	Stdin  io.Reader
	// SpoolDir holds checkpoints, spool segments, cursors and the
	// dead-letter file. Required with a hub or OTLP destination; empty
	// with stdout only means nothing is kept: files are read from the
	// start, dead letters are counted and dropped.
	SpoolDir string
	// AgentID goes into every record (and its event_id).
	AgentID string

	Hub          *hub.Client  // ship to POST /action-events when set
	OTLPEndpoint string       // export OTLP/HTTP JSON logs when set
	OTLPClient   *http.Client // optional transport for OTLP
	Stdout       io.Writer    // write normalised JSONL when set

	BatchSize       int           // records per request; default 500
	FlushInterval   time.Duration // longest a record waits for a full batch; default 1s
	PollInterval    time.Duration // how often files are checked for new data; default 250ms
	BaseBackoff     time.Duration // first retry delay; default 250ms
	MaxBackoff      time.Duration // retry delay cap; default 30s
	SpoolMaxBytes   int64         // stop reading inputs while this much is unacknowledged; default 1 GiB
	SegmentBytes    int64         // spool segment size; default 64 MiB
	ShutdownTimeout time.Duration // after cancellation, how long to keep delivering; default 10s
	CloseInactive   time.Duration // close a rotated-away file after this long without new data; default 5s
	MaxLineBytes    int           // longer input lines are dead-lettered; default 1 MiB

	// Once reads every file input to its current end, delivers everything
	// and returns, instead of following. Stdin is always read to EOF.
	Once bool

	Logger  *slog.Logger
	Metrics *Metrics
}

// Summary is what Run did.
type Summary struct {
	LinesRead   int64
	Records     int64
	DeadLetters int64
	Shipped     map[string]int64 // per sink
	Pending     int64            // spooled bytes some sink has not acknowledged
}

func (c *Config) defaults() {
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.BatchSize > hub.MaxBatchEvents {
		c.BatchSize = hub.MaxBatchEvents
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 250 * time.Millisecond
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = 250 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.MaxBackoff < c.BaseBackoff {
		c.MaxBackoff = c.BaseBackoff
	}
	if c.SpoolMaxBytes <= 0 {
		c.SpoolMaxBytes = 1 << 30
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = 64 << 20
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.CloseInactive <= 0 {
		c.CloseInactive = 5 * time.Second
	}
	if c.MaxLineBytes <= 0 {
		c.MaxLineBytes = 1 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
}

// Validate checks the configuration; errors name the setting.
func (c *Config) Validate() error {
	if len(c.Inputs) == 0 {
		return errors.New("inputs: none given")
	}
	stdin := 0
	for _, in := range c.Inputs {
		if in == "-" {
			stdin++
			continue
		}
		if in == "" {
			return errors.New("inputs: empty pattern")
		}
		if _, err := filepath.Match(in, ""); err != nil {
			return fmt.Errorf("inputs: %q: %w", in, err)
		}
	}
	if stdin > 1 {
		return errors.New(`inputs: "-" (stdin) given more than once`)
	}
	if stdin == 1 && c.Stdin == nil {
		return errors.New(`inputs: "-" given but no stdin reader`)
	}
	if c.SpoolDir == "" && (c.Hub != nil || c.OTLPEndpoint != "") {
		return errors.New("spool directory: not set (a hub or OTLP destination needs one)")
	}
	if c.Hub == nil && c.OTLPEndpoint == "" && c.Stdout == nil {
		return errors.New("no destination: set a hub, an OTLP endpoint or stdout")
	}
	if c.Hub != nil && c.AgentID != c.Hub.AgentID() {
		return fmt.Errorf("agent id %q differs from the hub client's %q", c.AgentID, c.Hub.AgentID())
	}
	if c.OTLPEndpoint != "" {
		if _, err := OTLPLogsURL(c.OTLPEndpoint); err != nil {
			return err
		}
	}
	return nil
}

// Run collects until the inputs are exhausted (Once, or stdin only) or ctx
// is cancelled; then it keeps delivering for up to ShutdownTimeout and
// returns. Records not delivered by then stay in the spool for the next
// run. It returns an error only when it cannot keep its durability
// promise (spool or checkpoint writes fail) or the configuration is bad.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	log, m := cfg.Logger, cfg.Metrics

	var globs []string
	useStdin := false
	for _, in := range cfg.Inputs {
		if in == "-" {
			useStdin = true
		} else {
			globs = append(globs, in)
		}
	}

	var senders []sender
	if cfg.Hub != nil {
		senders = append(senders, hubSender{c: cfg.Hub})
	}
	if cfg.OTLPEndpoint != "" {
		o, err := newOTLPSender(cfg.OTLPEndpoint, cfg.AgentID, cfg.OTLPClient)
		if err != nil {
			return Summary{}, err
		}
		senders = append(senders, o)
	}

	// The spool directory is locked whenever this run keeps state in it
	// (checkpoints or spool segments).
	if cfg.SpoolDir != "" && (len(globs) > 0 || len(senders) > 0) {
		if err := mkdirPrivate(cfg.SpoolDir); err != nil {
			return Summary{}, err
		}
		lock, err := lockDir(cfg.SpoolDir)
		if err != nil {
			return Summary{}, err
		}
		defer lock.Close()
	}

	dl := &deadLetters{m: m}
	if cfg.SpoolDir != "" {
		dl.path = filepath.Join(cfg.SpoolDir, DeadLetterName)
	}
	defer dl.close()
	in := &ingester{agentID: cfg.AgentID, dl: dl, m: m, maxLine: cfg.MaxLineBytes}
	if cfg.Stdout != nil {
		in.stdout = bufio.NewWriterSize(cfg.Stdout, 256<<10)
	}

	var sp *spool
	if len(senders) > 0 {
		names := make([]string, len(senders))
		for i, s := range senders {
			names[i] = s.name()
		}
		var err error
		sp, err = openSpool(cfg.SpoolDir, names, cfg.SegmentBytes)
		if err != nil {
			return Summary{}, err
		}
		defer sp.Close()
		in.spool = sp
		m.setSpoolGauge(sp.Pending)
		if p := sp.Pending(); p > 0 {
			log.Info("spool holds records from an earlier run; delivering them", "bytes", p)
		}
	}

	var fo *follower
	if len(globs) > 0 {
		var err error
		fo, err = newFollower(globs, cfg.SpoolDir, cfg.CloseInactive, cfg.MaxLineBytes, log, m)
		if err != nil {
			return Summary{}, err
		}
		defer fo.close()
	}
	var st *stdinReader
	if useStdin {
		st = startStdin(cfg.Stdin, cfg.MaxLineBytes)
	}

	// Sinks ship from the spool concurrently with ingestion. After ctx is
	// cancelled they get ShutdownTimeout more to deliver.
	drain := make(chan struct{})
	shipCtx, cancelShip := context.WithCancel(context.Background())
	defer cancelShip()
	shipDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-shipDone:
			return
		}
		t := time.NewTimer(cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelShip()
		case <-shipDone:
		}
	}()
	shipErrs := make(chan error, len(senders))
	for _, s := range senders {
		sh := &shipper{
			snd: s, sp: sp, rd: sp.reader(s.name()),
			batchSize: cfg.BatchSize, maxBatchBytes: hub.MaxBatchBytes / 2, flushInterval: cfg.FlushInterval,
			baseBackoff: cfg.BaseBackoff, maxBackoff: cfg.MaxBackoff, persistEvery: time.Second,
			dl: dl, m: m.Sink(s.name()), log: log,
		}
		go func() { shipErrs <- sh.run(shipCtx, drain) }()
	}

	ingestErr := ingest(ctx, cfg, in, fo, st, sp)
	close(drain)
	var shipErr error
	for range senders {
		if err := <-shipErrs; err != nil && !errors.Is(err, context.Canceled) && shipErr == nil {
			shipErr = err
		}
	}
	close(shipDone)
	if err := dl.commit(); err != nil && ingestErr == nil {
		ingestErr = err
	}

	sum := Summary{
		LinesRead: m.LinesRead.Load(), Records: m.Records.Load(), DeadLetters: m.DeadLetters.Load(),
		Shipped: map[string]int64{},
	}
	for _, s := range senders {
		sum.Shipped[s.name()] = m.Sink(s.name()).Shipped.Load()
	}
	if sp != nil {
		sum.Pending = sp.Pending()
	}
	if ingestErr != nil {
		return sum, ingestErr
	}
	return sum, shipErr
}

// ingest reads inputs and commits records until the inputs are done or
// ctx is cancelled.
func ingest(ctx context.Context, cfg Config, in *ingester, fo *follower, st *stdinReader, sp *spool) error {
	// Bytes read per pass before a commit; small spool limits need small
	// passes for the backpressure below to bite.
	budget := min(int64(8<<20), max(int64(64<<10), cfg.SpoolMaxBytes/2))
	log := cfg.Logger
	paused := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var lastScan time.Time
	for {
		now := time.Now()
		var progressed int64
		if fo != nil {
			if now.Sub(lastScan) >= cfg.PollInterval {
				fo.scan(now)
				lastScan = now
			}
			progressed += fo.read(budget, in, now)
		}
		if st != nil && !st.done {
		stdin:
			for progressed < budget {
				select {
				case b, ok := <-st.ch:
					st.feed(b, ok, in)
					progressed += int64(len(b))
					if !ok {
						break stdin
					}
				default:
					break stdin
				}
			}
		}
		if err := in.commit(); err != nil {
			return err
		}
		if fo != nil {
			fo.closeIdle(now)
			if err := fo.save(); err != nil {
				return err
			}
		}

		filesDone := fo == nil || cfg.Once && progressed == 0 && fo.allAtEOF()
		stdinDone := st == nil || st.done
		if filesDone && stdinDone {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		// Backpressure: never let the spool grow without bound while a
		// sink is down; the inputs keep the data meanwhile.
		for sp != nil && sp.Pending() > cfg.SpoolMaxBytes {
			if !paused {
				log.Warn("spool full; pausing input until a sink catches up", "pending_bytes", sp.Pending(), "limit", cfg.SpoolMaxBytes)
				paused = true
			}
			select {
			case <-sp.Changed():
			case <-time.After(time.Second):
			case <-ctx.Done():
				return nil
			}
		}
		if paused {
			log.Info("spool below its limit; reading input again", "pending_bytes", sp.Pending())
			paused = false
		}
		if progressed > 0 {
			continue
		}
		var stdinCh chan []byte
		if st != nil && !st.done {
			stdinCh = st.ch
		}
		var tick <-chan time.Time
		if fo != nil {
			timer.Reset(cfg.PollInterval)
			tick = timer.C
		}
		select {
		case <-ctx.Done():
		case <-tick:
		case b, ok := <-stdinCh:
			st.feed(b, ok, in)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spool directory: %w", err)
	}
	return nil
}
