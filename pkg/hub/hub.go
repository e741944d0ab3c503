// Package hub is the client side of the hub contract in docs/hub-api.md:
// fetching the policy assigned to this agent, reporting what is installed
// (convergence), and posting batches of mac.action_event.v1 records to the
// action ledger.
//
// Every call is bounded in time, authenticates with a bearer token read
// from a file (never logged, never put in an error), refuses redirects, and
// returns typed errors: ErrNotAssigned for a missing assignment,
// ErrForbidden and ErrUnauthorized for auth failures, *StatusError (with
// the server's Retry-After) for any other non-2xx status, and
// *ResponseError for a 2xx answer whose body does not match the contract.
// Callers never assume the hub is up.
package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sentinel errors; a *StatusError unwraps to the one matching its code.
var (
	ErrNotAssigned  = errors.New("hub: no policy assigned to this agent")
	ErrForbidden    = errors.New("hub: forbidden")
	ErrUnauthorized = errors.New("hub: unauthorized (check the token file)")
)

// StatusError is a non-2xx answer from the hub.
type StatusError struct {
	Op         string        // e.g. "GET /agents/{id}/openshell/policy"
	Code       int           // HTTP status
	RetryAfter time.Duration // from Retry-After; 0 when absent
	Detail     string        // the hub's "error" field or a short body excerpt
	sentinel   error
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("hub: %s: HTTP %d", e.Op, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}

// Unwrap returns ErrNotAssigned, ErrForbidden or ErrUnauthorized when the
// status means one of them.
func (e *StatusError) Unwrap() error { return e.sentinel }

// Retryable reports whether the same request may succeed later unchanged:
// timeouts, rate limits and server errors, but also auth failures (an
// operator can fix the token while the caller keeps its data).
func (e *StatusError) Retryable() bool {
	switch {
	case e.Code == http.StatusRequestTimeout, e.Code == http.StatusTooEarly,
		e.Code == http.StatusTooManyRequests, e.Code >= 500:
		return true
	case e.Code == http.StatusUnauthorized, e.Code == http.StatusForbidden:
		return true
	}
	return false
}

// ResponseError is a 2xx answer whose body breaks the contract.
type ResponseError struct {
	Op     string
	Reason string
}

func (e *ResponseError) Error() string { return "hub: " + e.Op + ": malformed response: " + e.Reason }

// RetryAfter returns the server-requested delay carried by err, or 0.
func RetryAfter(err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}

// Config configures a Client.
type Config struct {
	URL       string        // hub base URL, http or https; a path prefix is kept
	AgentID   string        // this agent's id, as the token's principal
	TokenFile string        // file holding the bearer token
	Timeout   time.Duration // per request, including the body; default 30s
	// HTTPClient overrides the transport (tests); its Timeout and
	// CheckRedirect are replaced.
	HTTPClient *http.Client
	UserAgent  string
}

// Client talks to one hub as one agent. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	agentID   string
	tokenFile string
	http      *http.Client
	ua        string

	mu    sync.Mutex
	token string
}

// agentIDPattern: ids appear in URL paths and ledger keys.
var agentIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidAgentID reports whether id is acceptable as an agent id.
func ValidAgentID(id string) bool { return agentIDPattern.MatchString(id) }

// New checks cfg, reads the token file and returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("hub: URL is empty")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("hub: URL %q: %w", cfg.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("hub: URL %q: scheme must be http or https", cfg.URL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("hub: URL %q: no host", cfg.URL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("hub: URL must not carry user information, a query or a fragment (put the token in the token file)")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	if !ValidAgentID(cfg.AgentID) {
		return nil, fmt.Errorf("hub: agent id %q: want 1-128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit", cfg.AgentID)
	}
	if cfg.TokenFile == "" {
		return nil, errors.New("hub: token file is empty")
	}
	tok, err := ReadTokenFile(cfg.TokenFile)
	if err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		*hc = *cfg.HTTPClient
	} else {
		hc.Transport = &http.Transport{
			Proxy:                 nil, // the hub is reached directly
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		}
	}
	hc.Timeout = timeout
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	ua := cfg.UserAgent
	if ua == "" {
		ua = "palisade-hub-client/1"
	}
	return &Client{base: u, agentID: cfg.AgentID, tokenFile: cfg.TokenFile, http: hc, ua: ua, token: tok}, nil
}

// AgentID returns the agent this client speaks for.
func (c *Client) AgentID() string { return c.agentID }

// ReadTokenFile reads a bearer token: the file's content with one trailing
// newline (LF or CRLF) removed. An empty token, or one with whitespace or
// control characters inside, is refused; the error never quotes the token.
func ReadTokenFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("hub: token file: %w", err)
	}
	s := string(data)
	s = strings.TrimSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	if s == "" {
		return "", fmt.Errorf("hub: token file %s is empty", path)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return "", fmt.Errorf("hub: token file %s: token contains whitespace or a control character at byte %d", path, i)
		}
	}
	if len(s) > 8192 {
		return "", fmt.Errorf("hub: token file %s: token longer than 8192 bytes", path)
	}
	return s, nil
}

func (c *Client) currentToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// reloadToken re-reads the token file and reports whether it changed.
func (c *Client) reloadToken() bool {
	tok, err := ReadTokenFile(c.tokenFile)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tok == c.token {
		return false
	}
	c.token = tok
	return true
}

func (c *Client) endpoint(segments ...string) string {
	u := *c.base
	var p strings.Builder
	p.WriteString(u.Path)
	for _, s := range segments {
		p.WriteByte('/')
		p.WriteString(url.PathEscape(s))
	}
	u.Path = p.String()
	return u.String()
}

// Body size limits for responses.
const (
	maxPolicyResponse = 4 << 20
	maxSmallResponse  = 64 << 10
)

// do sends one request and returns the 2xx body. On 401 it re-reads the
// token file once and, if the token changed, retries.
func (c *Client) do(ctx context.Context, op, method, target string, body []byte, limit int64) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, target, rd)
		if err != nil {
			return nil, fmt.Errorf("hub: %s: %w", op, err)
		}
		req.Header.Set("Authorization", "Bearer "+c.currentToken())
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", c.ua)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("hub: %s: %w", op, scrubURLError(err))
		}
		data, rerr := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			if rerr != nil {
				return nil, fmt.Errorf("hub: %s: reading response: %w", op, rerr)
			}
			if int64(len(data)) > limit {
				return nil, &ResponseError{Op: op, Reason: fmt.Sprintf("body larger than %d bytes", limit)}
			}
			return data, nil
		}
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 && c.reloadToken() {
			continue
		}
		return nil, c.statusError(op, resp, data)
	}
}

// scrubURLError drops the request URL from transport errors: it is ours
// and harmless, but keeping errors short keeps logs readable.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func (c *Client) statusError(op string, resp *http.Response, body []byte) *StatusError {
	e := &StatusError{Op: op, Code: resp.StatusCode, RetryAfter: ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var eb struct {
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		e.Detail = eb.Error
		if eb.Detail != "" {
			e.Detail += ": " + eb.Detail
		}
	} else {
		e.Detail = excerpt(body)
	}
	if tok := c.currentToken(); tok != "" && strings.Contains(e.Detail, tok) {
		e.Detail = strings.ReplaceAll(e.Detail, tok, "[redacted]")
	}
	if len(e.Detail) > 300 {
		e.Detail = e.Detail[:300] + "…"
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		e.sentinel = ErrUnauthorized
	case http.StatusForbidden:
		e.sentinel = ErrForbidden
	}
	return e
}

func excerpt(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// ParseRetryAfter parses a Retry-After value (delay in seconds or an HTTP
// date) relative to now. Invalid or past values give 0.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > 86400 {
			n = 86400
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
