package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/hub"
)

// OTLP/HTTP JSON export of records as log records (OTLP 1.x, the
// ExportLogsServiceRequest message in its JSON encoding: lowerCamelCase
// field names, 64-bit integers as decimal strings, enums as numbers).
// Each record becomes one LogRecord: time is the event time, eventName
// is mac.action_event.v1, the body is the record's JSON, and the fields
// that matter for queries are attributes named mac.<field>.

type otlpAnyValue struct {
	StringValue *string `json:"stringValue,omitempty"`
	IntValue    *string `json:"intValue,omitempty"`
}

type otlpKeyValue struct {
	Key   string       `json:"key"`
	Value otlpAnyValue `json:"value"`
}

type otlpLogRecord struct {
	TimeUnixNano         string         `json:"timeUnixNano"`
	ObservedTimeUnixNano string         `json:"observedTimeUnixNano"`
	SeverityNumber       int            `json:"severityNumber,omitempty"`
	SeverityText         string         `json:"severityText,omitempty"`
	EventName            string         `json:"eventName"`
	Body                 otlpAnyValue   `json:"body"`
	Attributes           []otlpKeyValue `json:"attributes,omitempty"`
}

type otlpRequest struct {
	ResourceLogs []otlpResourceLogs `json:"resourceLogs"`
}

type otlpResourceLogs struct {
	Resource struct {
		Attributes []otlpKeyValue `json:"attributes"`
	} `json:"resource"`
	ScopeLogs []otlpScopeLogs `json:"scopeLogs"`
}

type otlpScopeLogs struct {
	Scope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	} `json:"scope"`
	LogRecords []otlpLogRecord `json:"logRecords"`
}

// OTLPScope is the instrumentation scope name of exported log records.
const OTLPScope = "github.com/palisade-sandbox/palisade/pkg/collector"

// severityNumber maps a record severity to an OpenTelemetry SeverityNumber.
var severityNumber = map[string]int{
	"unknown": 0, "other": 0,
	"informational": 9,  // INFO
	"low":           10, // INFO2
	"medium":        13, // WARN
	"high":          17, // ERROR
	"critical":      21, // FATAL
	"fatal":         24, // FATAL4
}

func sv(s string) otlpAnyValue { return otlpAnyValue{StringValue: &s} }

func iv(n int64) otlpAnyValue {
	s := strconv.FormatInt(n, 10)
	return otlpAnyValue{IntValue: &s}
}

// EncodeOTLPLogs returns the ExportLogsServiceRequest JSON for records,
// with resource attributes service.name=ocsf-collector and, when set,
// mac.agent_id and host.name.
func EncodeOTLPLogs(records [][]byte, agentID, hostName string, now time.Time) ([]byte, error) {
	var rl otlpResourceLogs
	rl.Resource.Attributes = []otlpKeyValue{{Key: "service.name", Value: sv("ocsf-collector")}, {Key: "service.namespace", Value: sv("palisade")}}
	if agentID != "" {
		rl.Resource.Attributes = append(rl.Resource.Attributes, otlpKeyValue{Key: "mac.agent_id", Value: sv(agentID)})
	}
	if hostName != "" {
		rl.Resource.Attributes = append(rl.Resource.Attributes, otlpKeyValue{Key: "host.name", Value: sv(hostName)})
	}
	var sl otlpScopeLogs
	sl.Scope.Name, sl.Scope.Version = OTLPScope, "1"
	observed := strconv.FormatInt(now.UnixNano(), 10)
	for i, raw := range records {
		r, err := actionevent.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("otlp: record %d: %w", i, err)
		}
		lr := otlpLogRecord{
			TimeUnixNano:         strconv.FormatInt(r.Time.UnixNano(), 10),
			ObservedTimeUnixNano: observed,
			SeverityNumber:       severityNumber[r.Severity],
			SeverityText:         r.Severity,
			EventName:            actionevent.Schema,
			Body:                 sv(string(raw)),
		}
		add := func(k, v string) {
			if v != "" {
				lr.Attributes = append(lr.Attributes, otlpKeyValue{Key: k, Value: sv(v)})
			}
		}
		addInt := func(k string, v int64) {
			if v != 0 {
				lr.Attributes = append(lr.Attributes, otlpKeyValue{Key: k, Value: iv(v)})
			}
		}
		add("mac.event_id", r.EventID)
		add("mac.layer", r.Layer)
		add("mac.category", r.Category)
		add("mac.action", r.Action)
		add("mac.agent_id", r.AgentID)
		add("mac.sandbox_id", r.SandboxID)
		add("mac.actor.process", r.Actor.Process)
		addInt("mac.actor.pid", r.Actor.PID)
		add("mac.actor.binary", r.Actor.Binary)
		add("mac.actor.binary_sha256", r.Actor.BinarySHA256)
		add("mac.target.host", r.Target.Host)
		addInt("mac.target.port", int64(r.Target.Port))
		add("mac.target.method", r.Target.Method)
		add("mac.target.path", r.Target.Path)
		add("mac.policy.name", r.Policy.Name)
		add("mac.policy.checksum", r.Policy.Checksum)
		add("mac.policy.rule", r.Policy.Rule)
		add("mac.reason", r.Reason)
		addInt("mac.source.class_uid", int64(r.Source.ClassUID))
		addInt("mac.source.activity_id", int64(r.Source.ActivityID))
		sl.LogRecords = append(sl.LogRecords, lr)
	}
	rl.ScopeLogs = []otlpScopeLogs{sl}
	return json.Marshal(otlpRequest{ResourceLogs: []otlpResourceLogs{rl}})
}

// OTLPLogsURL returns the logs endpoint for an OTLP/HTTP base URL: the URL
// itself when it already ends in /v1/logs, else URL + "/v1/logs".
func OTLPLogsURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("--otlp-endpoint %q: %w", endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("--otlp-endpoint %q: want an http or https URL with a host", endpoint)
	}
	if u.User != nil {
		return "", fmt.Errorf("--otlp-endpoint: user information in the URL is not allowed")
	}
	if !strings.HasSuffix(u.Path, "/v1/logs") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/logs"
	}
	return u.String(), nil
}

// otlpSender posts OTLP/HTTP JSON log exports.
type otlpSender struct {
	url     string
	agentID string
	host    string
	http    *http.Client
}

func newOTLPSender(endpoint, agentID string, hc *http.Client) (*otlpSender, error) {
	u, err := OTLPLogsURL(endpoint)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	host, _ := os.Hostname()
	return &otlpSender{url: u, agentID: agentID, host: host, http: hc}, nil
}

func (*otlpSender) name() string { return "otlp" }

func (o *otlpSender) send(ctx context.Context, recs [][]byte) (int, error) {
	body, err := EncodeOTLPLogs(recs, o.agentID, o.host, time.Now())
	if err != nil {
		// A record that does not parse can never be exported.
		return 0, &SendError{Sink: "otlp", Code: http.StatusUnprocessableEntity, Detail: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := o.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("otlp: %w", err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return 0, nil
	}
	e := &SendError{Sink: "otlp", Code: resp.StatusCode, RetryAfter: hub.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	if len(data) > 0 {
		e.Detail = strings.TrimSpace(strings.ToValidUTF8(string(data[:min(len(data), 200)]), "?"))
	}
	return 0, e
}
