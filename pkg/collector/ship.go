package collector

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/hub"
)

// sender delivers one batch of records to a destination.
type sender interface {
	name() string
	// send delivers recs; dups is how many the destination already had.
	send(ctx context.Context, recs [][]byte) (dups int, err error)
}

// SendError is a non-2xx answer from a sink other than the hub.
type SendError struct {
	Sink       string
	Code       int
	RetryAfter time.Duration
	Detail     string
}

func (e *SendError) Error() string {
	s := e.Sink + ": HTTP " + strconv.Itoa(e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// classify says whether a failed batch can never succeed as sent (the
// destination refused its content) and how long the destination asked us
// to wait.
func classify(err error) (permanent bool, retryAfter time.Duration) {
	var code int
	var he *hub.StatusError
	var se *SendError
	switch {
	case errors.As(err, &he):
		code, retryAfter = he.Code, he.RetryAfter
	case errors.As(err, &se):
		code, retryAfter = se.Code, se.RetryAfter
	default:
		return false, 0 // transport errors, malformed answers: retry
	}
	switch code {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true, retryAfter
	}
	return false, retryAfter
}

// backoff returns the delay before retry number attempt (0-based):
// exponential from base, capped at max, with equal jitter (half fixed,
// half random) so that many collectors do not retry in step.
func backoff(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + rand.N(half+1)
}

// maxRetryAfter caps how long a Retry-After can park a sink.
const maxRetryAfter = 10 * time.Minute

// shipper moves records from the spool to one sink.
type shipper struct {
	snd           sender
	sp            *spool
	rd            *spoolReader
	batchSize     int
	maxBatchBytes int
	flushInterval time.Duration
	baseBackoff   time.Duration
	maxBackoff    time.Duration
	persistEvery  time.Duration
	dl            *deadLetters
	m             *SinkMetrics
	log           *slog.Logger
	persist       func() // persists acknowledged positions (set by run)
}

// run ships until drain is closed and the spool is empty (returns nil) or
// ctx is done (returns ctx.Err()). Acknowledged positions are persisted
// at least every persistEvery and on return.
func (sh *shipper) run(ctx context.Context, drain <-chan struct{}) error {
	name := sh.snd.name()
	defer sh.rd.Close()
	lastPersist := time.Now()
	var persist func()
	persist = func() {
		if err := sh.sp.Persist(name); err != nil {
			sh.log.Error("cannot persist spool cursor", "sink", name, "err", err)
		}
		if err := sh.dl.commit(); err != nil {
			sh.log.Error("cannot write dead letters", "sink", name, "err", err)
		}
		lastPersist = time.Now()
	}
	sh.persist = persist
	defer persist()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	var batch [][]byte
	batchBytes := 0
	var first time.Time
	for {
		changed := sh.sp.Changed()
		for len(batch) < sh.batchSize && batchBytes < sh.maxBatchBytes {
			recs, err := sh.rd.Next(sh.batchSize-len(batch), 1<<20)
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				break
			}
			if len(batch) == 0 {
				first = time.Now()
			}
			for _, r := range recs {
				batchBytes += len(r) + 1
			}
			batch = append(batch, recs...)
		}
		draining := isClosed(drain)
		if len(batch) > 0 && (len(batch) >= sh.batchSize || batchBytes >= sh.maxBatchBytes || draining || time.Since(first) >= sh.flushInterval) {
			if err := sh.deliver(ctx, batch); err != nil {
				return err
			}
			sh.sp.Ack(name, sh.rd.Pos())
			batch, batchBytes, first = nil, 0, time.Time{}
			if time.Since(lastPersist) >= sh.persistEvery {
				persist()
			}
			continue
		}
		if len(batch) == 0 && draining {
			return nil
		}
		wait := time.Second
		if len(batch) > 0 {
			wait = sh.flushInterval - time.Since(first)
		}
		timer.Reset(wait)
		var drainCh <-chan struct{}
		if !draining {
			drainCh = drain
		}
		select {
		case <-changed:
		case <-timer.C:
		case <-drainCh:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if time.Since(lastPersist) >= sh.persistEvery {
			persist()
		}
	}
}

// deliver sends recs until the sink acknowledges them, retrying with
// backoff and honouring Retry-After. A batch the sink refuses as invalid
// is split in halves to isolate the refused records, which go to the
// dead-letter file; everything else is retried until ctx is done.
func (sh *shipper) deliver(ctx context.Context, recs [][]byte) error {
	name := sh.snd.name()
	for attempt := 0; ; attempt++ {
		dups, err := sh.snd.send(ctx, recs)
		if err == nil {
			sh.m.Shipped.Add(int64(len(recs)))
			sh.m.Duplicates.Add(int64(dups))
			sh.m.Batches.Add(1)
			if attempt > 0 {
				sh.log.Info("delivered after retrying", "sink", name, "records", len(recs), "attempts", attempt+1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		permanent, retryAfter := classify(err)
		if permanent {
			if len(recs) > 1 {
				mid := len(recs) / 2
				if err := sh.deliver(ctx, recs[:mid]); err != nil {
					return err
				}
				return sh.deliver(ctx, recs[mid:])
			}
			sh.m.Rejected.Add(1)
			sh.log.Warn("sink refused a record; set aside as a dead letter", "sink", name, "err", err)
			sh.dl.add("sink:"+name, -1, err.Error(), recs[0])
			return nil
		}
		sh.m.Retries.Add(1)
		if attempt == 0 && sh.persist != nil {
			// The sink may stay away for long: save what it has
			// acknowledged so far, so a crash meanwhile resends less.
			sh.persist()
		}
		d := backoff(attempt, sh.baseBackoff, sh.maxBackoff)
		if retryAfter > d {
			d = min(retryAfter, maxRetryAfter)
		}
		sh.log.Warn("delivery failed; will retry", "sink", name, "records", len(recs), "attempt", attempt+1, "retry_in", d.Round(time.Millisecond), "err", err)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// hubSender posts batches to POST /action-events.
type hubSender struct{ c *hub.Client }

func (hubSender) name() string { return "hub" }

func (h hubSender) send(ctx context.Context, recs [][]byte) (int, error) {
	res, err := h.c.PostActionEvents(ctx, recs)
	if err != nil {
		return 0, err
	}
	return res.Duplicates, nil
}
