package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Policy is the body of GET /agents/{id}/openshell/policy.
type Policy struct {
	PolicyText string `json:"policy_text"`
	Version    int64  `json:"version"`
	Checksum   string `json:"checksum"`
	PolicyName string `json:"policy_name,omitempty"`
}

var checksumPattern = regexp.MustCompile(`^(sha256:)?[0-9a-f]{64}$`)

// ValidChecksum reports whether s is a policy checksum as the contract
// spells it: 64 lower-case hex digits, optionally prefixed "sha256:".
func ValidChecksum(s string) bool { return checksumPattern.MatchString(s) }

// Validate checks the fields the contract requires.
func (p *Policy) Validate() error {
	var errs []error
	if strings.TrimSpace(p.PolicyText) == "" {
		errs = append(errs, errors.New("policy_text: empty"))
	}
	if p.Version < 1 {
		errs = append(errs, fmt.Errorf("version: %d, want >= 1", p.Version))
	}
	if !ValidChecksum(p.Checksum) {
		errs = append(errs, errors.New("checksum: want 64 lower-case hex digits, optionally prefixed sha256:"))
	}
	return errors.Join(errs...)
}

// GetPolicy fetches the policy assigned to this agent. It returns an error
// wrapping ErrNotAssigned when the hub has none (404), ErrForbidden when
// the token's principal is another agent (403), and *ResponseError when
// the body is not a valid assignment. The caller validates the policy text
// itself before installing it.
func (c *Client) GetPolicy(ctx context.Context) (*Policy, error) {
	const op = "GET /agents/{id}/openshell/policy"
	body, err := c.do(ctx, op, http.MethodGet, c.endpoint("agents", c.agentID, "openshell", "policy"), nil, maxPolicyResponse)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound {
			se.sentinel = ErrNotAssigned
		}
		return nil, err
	}
	var p Policy
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		return nil, &ResponseError{Op: op, Reason: "not a JSON policy object: " + err.Error()}
	}
	if dec.More() {
		return nil, &ResponseError{Op: op, Reason: "data after the JSON object"}
	}
	if err := p.Validate(); err != nil {
		return nil, &ResponseError{Op: op, Reason: err.Error()}
	}
	return &p, nil
}

// Convergence sources: where the installed policy came from.
const (
	SourceHub            = "hub"             // installed from the hub assignment
	SourceOverride       = "override"        // MAC_OPENSHELL_POLICY points elsewhere; never overwritten
	SourceLocal          = "local"           // ~/.mac/openshell-policy.yaml not from the hub
	SourceBundledDefault = "bundled_default" // nothing installed: the fail-closed default applies
)

// Convergence is the body of POST /agents/{id}/openshell/policy/convergence:
// what this worker has installed now and whether it matches the hub.
type Convergence struct {
	Converged         bool      `json:"converged"`
	InstalledChecksum string    `json:"installed_checksum,omitempty"`
	InstalledVersion  int64     `json:"installed_version,omitempty"`
	DesiredChecksum   string    `json:"desired_checksum,omitempty"`
	DesiredVersion    int64     `json:"desired_version,omitempty"`
	PolicyName        string    `json:"policy_name,omitempty"`
	Source            string    `json:"source"`
	Reason            string    `json:"reason"`
	ObservedAt        time.Time `json:"observed_at"`
}

// Validate checks the fields the contract requires.
func (cv *Convergence) Validate() error {
	var errs []error
	switch cv.Source {
	case SourceHub, SourceOverride, SourceLocal, SourceBundledDefault:
	default:
		errs = append(errs, fmt.Errorf("source: %q, want hub, override, local or bundled_default", cv.Source))
	}
	if cv.InstalledChecksum != "" && !ValidChecksum(cv.InstalledChecksum) {
		errs = append(errs, errors.New("installed_checksum: want 64 lower-case hex digits, optionally prefixed sha256:"))
	}
	if cv.DesiredChecksum != "" && !ValidChecksum(cv.DesiredChecksum) {
		errs = append(errs, errors.New("desired_checksum: want 64 lower-case hex digits, optionally prefixed sha256:"))
	}
	if cv.InstalledVersion < 0 || cv.DesiredVersion < 0 {
		errs = append(errs, errors.New("installed_version/desired_version: negative"))
	}
	if strings.TrimSpace(cv.Reason) == "" {
		errs = append(errs, errors.New("reason: empty"))
	}
	if len(cv.Reason) > 1024 {
		errs = append(errs, errors.New("reason: longer than 1024 bytes"))
	}
	if cv.Converged && cv.InstalledChecksum == "" {
		errs = append(errs, errors.New("installed_checksum: required when converged"))
	}
	if cv.ObservedAt.IsZero() {
		errs = append(errs, errors.New("observed_at: missing"))
	}
	return errors.Join(errs...)
}

// ReportConvergence posts what is installed. ObservedAt defaults to now.
func (c *Client) ReportConvergence(ctx context.Context, cv Convergence) error {
	const op = "POST /agents/{id}/openshell/policy/convergence"
	if cv.ObservedAt.IsZero() {
		cv.ObservedAt = time.Now().UTC()
	}
	if err := cv.Validate(); err != nil {
		return fmt.Errorf("hub: %s: %w", op, err)
	}
	body, err := json.Marshal(cv)
	if err != nil {
		return fmt.Errorf("hub: %s: %w", op, err)
	}
	_, err = c.do(ctx, op, http.MethodPost, c.endpoint("agents", c.agentID, "openshell", "policy", "convergence"), body, maxSmallResponse)
	return err
}

// BatchResult is the body of a 2xx answer to POST /action-events.
type BatchResult struct {
	Accepted   int `json:"accepted"`   // stored now
	Duplicates int `json:"duplicates"` // already stored (same event_id)
}

// MaxBatchEvents and MaxBatchBytes bound one POST /action-events.
const (
	MaxBatchEvents = 10000
	MaxBatchBytes  = 16 << 20
)

// PostActionEvents posts records (each one JSON object) as one batch. A
// 2xx answer means every record is stored (accepted + duplicates equals
// the batch size); anything else is an error and the caller resends the
// batch unchanged, which the hub's idempotency by event_id makes safe.
func (c *Client) PostActionEvents(ctx context.Context, records [][]byte) (*BatchResult, error) {
	if len(records) == 0 {
		return &BatchResult{}, nil
	}
	return c.PostActionEventsBody(ctx, EncodeBatch(nil, records), len(records))
}

// EncodeBatch appends the request body {"events":[...]} for records to dst.
func EncodeBatch(dst []byte, records [][]byte) []byte {
	n := len(dst) + 14 + len(records)
	for _, r := range records {
		n += len(r)
	}
	if cap(dst) < n {
		dst = append(make([]byte, 0, n), dst...)
	}
	dst = append(dst, `{"events":[`...)
	for i, r := range records {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, r...)
	}
	return append(dst, "]}"...)
}

// PostActionEventsBody posts an already encoded batch of n records.
func (c *Client) PostActionEventsBody(ctx context.Context, body []byte, n int) (*BatchResult, error) {
	const op = "POST /action-events"
	data, err := c.do(ctx, op, http.MethodPost, c.endpoint("action-events"), body, maxSmallResponse)
	if err != nil {
		return nil, err
	}
	var res BatchResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, &ResponseError{Op: op, Reason: "not a JSON batch result: " + err.Error()}
	}
	if res.Accepted < 0 || res.Duplicates < 0 || res.Accepted+res.Duplicates != n {
		return nil, &ResponseError{Op: op, Reason: fmt.Sprintf("accepted %d + duplicates %d != %d events sent", res.Accepted, res.Duplicates, n)}
	}
	return &res, nil
}
