package collector

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
)

// Metrics are the collector's counters, exported in the Prometheus text
// format by Handler. All fields are safe for concurrent use.
type Metrics struct {
	LinesRead         atomic.Int64 // lines read from inputs (blank lines included)
	BytesRead         atomic.Int64 // bytes of those lines
	Records           atomic.Int64 // lines normalised into records
	DeadLetters       atomic.Int64 // lines and records set aside as dead letters
	RotationsRename   atomic.Int64 // followed files renamed away (rename+create)
	RotationsTruncate atomic.Int64 // followed files truncated or rewritten (copytruncate)
	Commits           atomic.Int64 // durable spool commits

	mu    sync.Mutex
	sinks map[string]*SinkMetrics
	spool func() int64
}

// SinkMetrics count one destination (hub, otlp).
type SinkMetrics struct {
	Shipped    atomic.Int64 // records acknowledged with a 2xx
	Duplicates atomic.Int64 // of those, records the hub already had
	Batches    atomic.Int64 // requests acknowledged
	Retries    atomic.Int64 // failed attempts that will be retried
	Rejected   atomic.Int64 // records refused permanently (dead-lettered)
}

// NewMetrics returns zeroed metrics.
func NewMetrics() *Metrics { return &Metrics{sinks: map[string]*SinkMetrics{}} }

// Sink returns the counters for the named sink, creating them.
func (m *Metrics) Sink(name string) *SinkMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sinks[name]
	if !ok {
		s = &SinkMetrics{}
		m.sinks[name] = s
	}
	return s
}

// setSpoolGauge installs the function that reports unacknowledged spool
// bytes.
func (m *Metrics) setSpoolGauge(f func() int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.spool = f
}

// SpoolBytes reports the spool bytes not yet acknowledged by every sink.
func (m *Metrics) SpoolBytes() int64 {
	m.mu.Lock()
	f := m.spool
	m.mu.Unlock()
	if f == nil {
		return 0
	}
	return f()
}

// WriteText writes the metrics in the Prometheus text exposition format.
func (m *Metrics) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	counter := func(name, help string, v int64) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	counter("ocsf_collector_lines_read_total", "Lines read from inputs.", m.LinesRead.Load())
	counter("ocsf_collector_bytes_read_total", "Bytes read from inputs.", m.BytesRead.Load())
	counter("ocsf_collector_records_total", "Lines normalised into mac.action_event.v1 records.", m.Records.Load())
	counter("ocsf_collector_dead_letters_total", "Lines or records set aside in the dead-letter file.", m.DeadLetters.Load())
	counter("ocsf_collector_spool_commits_total", "Durable (fsynced) spool commits.", m.Commits.Load())
	fmt.Fprintf(bw, "# HELP ocsf_collector_rotations_total Rotations of followed files, by kind.\n# TYPE ocsf_collector_rotations_total counter\n")
	fmt.Fprintf(bw, "ocsf_collector_rotations_total{kind=\"rename\"} %d\n", m.RotationsRename.Load())
	fmt.Fprintf(bw, "ocsf_collector_rotations_total{kind=\"truncate\"} %d\n", m.RotationsTruncate.Load())
	fmt.Fprintf(bw, "# HELP ocsf_collector_spool_bytes Spooled bytes not yet acknowledged by every sink.\n# TYPE ocsf_collector_spool_bytes gauge\nocsf_collector_spool_bytes %d\n", m.SpoolBytes())

	m.mu.Lock()
	names := make([]string, 0, len(m.sinks))
	for n := range m.sinks {
		names = append(names, n)
	}
	m.mu.Unlock()
	sort.Strings(names)
	perSink := []struct {
		name, help string
		get        func(*SinkMetrics) int64
	}{
		{"ocsf_collector_records_shipped_total", "Records acknowledged by the sink.", func(s *SinkMetrics) int64 { return s.Shipped.Load() }},
		{"ocsf_collector_records_duplicate_total", "Acknowledged records the hub already held.", func(s *SinkMetrics) int64 { return s.Duplicates.Load() }},
		{"ocsf_collector_batches_shipped_total", "Batches acknowledged by the sink.", func(s *SinkMetrics) int64 { return s.Batches.Load() }},
		{"ocsf_collector_ship_retries_total", "Failed deliveries that will be retried.", func(s *SinkMetrics) int64 { return s.Retries.Load() }},
		{"ocsf_collector_records_rejected_total", "Records the sink refused permanently (dead-lettered).", func(s *SinkMetrics) int64 { return s.Rejected.Load() }},
	}
	for _, p := range perSink {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s counter\n", p.name, p.help, p.name)
		for _, n := range names {
			fmt.Fprintf(bw, "%s{sink=%q} %d\n", p.name, n, p.get(m.Sink(n)))
		}
	}
	return bw.Flush()
}

// Handler serves the metrics at any path.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.WriteText(w)
	})
}
