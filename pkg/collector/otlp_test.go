package collector

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
)

// otlpReceiver decodes every export with the official OTLP protobuf types;
// protojson refuses unknown fields and wrongly typed values, so a body it
// accepts is a valid ExportLogsServiceRequest in the OTLP JSON encoding.
type otlpReceiver struct {
	t        *testing.T
	mu       sync.Mutex
	reqs     []*collogspb.ExportLogsServiceRequest
	fail     int // answer this many requests with 503 + Retry-After
	attempts []time.Time
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts = append(o.attempts, time.Now())
	if r.URL.Path != "/v1/logs" || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		o.t.Errorf("OTLP request %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		http.Error(w, "bad request", http.StatusNotFound)
		return
	}
	if o.fail > 0 {
		o.fail--
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req collogspb.ExportLogsServiceRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		o.t.Errorf("export does not decode as ExportLogsServiceRequest: %v\n%.400s", err, body)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.reqs = append(o.reqs, &req)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{}`)
}

func attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func TestOTLPExportDecodesWithOfficialTypes(t *testing.T) {
	e := newEnv(t)
	rcv := &otlpReceiver{t: t, fail: 1}
	ts := httptest.NewServer(rcv)
	defer ts.Close()
	in := filepath.Join(e.dir, "events.log")
	appendLines(t, in, 0, 250)
	cfg := e.cfg(in)
	cfg.OTLPEndpoint = ts.URL
	cfg.Once = true
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Shipped["otlp"] != 250 || sum.Shipped["hub"] != 250 {
		t.Fatalf("summary %+v", sum)
	}
	e.assertExactly(0, 250)

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.attempts) < 2 || rcv.attempts[1].Sub(rcv.attempts[0]) < 950*time.Millisecond {
		t.Errorf("OTLP 503 Retry-After: 1 not honoured: attempts at %v", rcv.attempts)
	}
	seen := map[string]bool{}
	for _, req := range rcv.reqs {
		if len(req.ResourceLogs) != 1 {
			t.Fatalf("want one ResourceLogs, have %d", len(req.ResourceLogs))
		}
		rl := req.ResourceLogs[0]
		if v := attr(rl.GetResource().GetAttributes(), "service.name"); v.GetStringValue() != "ocsf-collector" {
			t.Errorf("service.name = %v", v)
		}
		if v := attr(rl.GetResource().GetAttributes(), "mac.agent_id"); v.GetStringValue() != agent {
			t.Errorf("resource mac.agent_id = %v", v)
		}
		for _, sl := range rl.ScopeLogs {
			if sl.GetScope().GetName() != OTLPScope {
				t.Errorf("scope %q", sl.GetScope().GetName())
			}
			for _, lr := range sl.LogRecords {
				rec, err := actionevent.Parse([]byte(lr.GetBody().GetStringValue()))
				if err != nil {
					t.Fatalf("body is not a record: %v", err)
				}
				id := attr(lr.Attributes, "mac.event_id").GetStringValue()
				if id != rec.EventID || seen[id] {
					t.Fatalf("mac.event_id %q (record %q, seen before %v)", id, rec.EventID, seen[id])
				}
				seen[id] = true
				if lr.GetTimeUnixNano() != uint64(rec.Time.UnixNano()) || lr.GetObservedTimeUnixNano() == 0 {
					t.Errorf("times %d/%d, record time %v", lr.GetTimeUnixNano(), lr.GetObservedTimeUnixNano(), rec.Time)
				}
				if lr.GetEventName() != actionevent.Schema || lr.GetSeverityText() != "informational" || lr.GetSeverityNumber() != 9 {
					t.Errorf("event name %q severity %q/%d", lr.GetEventName(), lr.GetSeverityText(), lr.GetSeverityNumber())
				}
				if a := attr(lr.Attributes, "mac.action").GetStringValue(); a != rec.Action {
					t.Errorf("mac.action %q, record %q", a, rec.Action)
				}
				if p := attr(lr.Attributes, "mac.target.port").GetIntValue(); p != 443 {
					t.Errorf("mac.target.port %d", p)
				}
				if h := attr(lr.Attributes, "mac.target.host").GetStringValue(); h != "pypi.org" {
					t.Errorf("mac.target.host %q", h)
				}
			}
		}
	}
	for i := 0; i < 250; i++ {
		if !seen[idOf(t, i)] {
			t.Fatalf("event %d not exported (%d exported)", i, len(seen))
		}
	}
}

func TestOTLPLogsURL(t *testing.T) {
	cases := map[string]string{
		"http://127.0.0.1:4318":          "http://127.0.0.1:4318/v1/logs",
		"http://127.0.0.1:4318/":         "http://127.0.0.1:4318/v1/logs",
		"https://otel.example/v1/logs":   "https://otel.example/v1/logs",
		"https://otel.example/prefix":    "https://otel.example/prefix/v1/logs",
		"https://otel.example/p/v1/logs": "https://otel.example/p/v1/logs",
	}
	for in, want := range cases {
		got, err := OTLPLogsURL(in)
		if err != nil || got != want {
			t.Errorf("OTLPLogsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x", "http://", "http://u:p@h:1", "::"} {
		if _, err := OTLPLogsURL(bad); err == nil {
			t.Errorf("OTLPLogsURL(%q) accepted", bad)
		}
	}
}
