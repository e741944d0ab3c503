// Package hubtest is a reference hub for tests and benchmarks: a real HTTP
// server on loopback that implements the contract in docs/hub-api.md
// (agent-bound bearer tokens, policy assignment, convergence reports, the
// idempotent action-event ledger) and can be told to misbehave: be down
// (connection refused), hang up without answering, answer slowly, fail
// with a status and Retry-After, or answer 2xx with a malformed body.
//
// It records what it receives: every stored event id once (the ledger's
// dedup set) and, separately, every event delivered in an accepted batch,
// so a test can tell "stored exactly once" from "delivered more than once".
package hubtest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/hub"
)

// Routes, as used by Failure.Route.
const (
	RoutePolicy       = "policy"
	RouteConvergence  = "convergence"
	RouteActionEvents = "action-events"
)

// Failure makes matching requests fail instead of being served.
type Failure struct {
	Route      string // RoutePolicy, RouteConvergence, RouteActionEvents; "" matches all
	Code       int    // HTTP status to answer with
	RetryAfter string // Retry-After header value, if any
	Count      int    // how many requests to fail; <= 0 means until cleared
}

// Request is one request the server saw (after authentication), with the
// status it answered.
type Request struct {
	Time   time.Time
	Method string
	Route  string
	Agent  string
	Status int
	Events int // events in the batch, for action-events
}

// Stats summarises the ledger.
type Stats struct {
	Distinct int // event ids stored
	Received int // events delivered in accepted batches, duplicates included
	Batches  int // accepted batches
	Rejected int // batches refused (invalid, forbidden or failed on purpose)
}

// Duplicates is the number of deliveries of an already stored id.
func (s Stats) Duplicates() int { return s.Received - s.Distinct }

// Options configure a Server.
type Options struct {
	// Addr to listen on; default 127.0.0.1:0.
	Addr string
	// DiscardEvents keeps only event ids, not the records (benchmarks).
	DiscardEvents bool
	// Journal, when set, receives one JSON line per request served
	// (JournalEntry): what a person trying the hub watches.
	Journal io.Writer
}

// JournalEntry is one line of Options.Journal: a served request, with the
// policy version it handed out, the convergence report it recorded, or
// the events it stored (not the duplicates).
type JournalEntry struct {
	Time        time.Time            `json:"time"`
	Method      string               `json:"method"`
	Route       string               `json:"route"`
	Agent       string               `json:"agent,omitempty"`
	Status      int                  `json:"status"`
	Version     int64                `json:"policy_version,omitempty"`
	Convergence *hub.Convergence     `json:"convergence,omitempty"`
	Stored      []actionevent.Record `json:"stored,omitempty"`
	Duplicates  int                  `json:"duplicates,omitempty"`
}

// Server is the reference hub. Its methods are safe for concurrent use.
type Server struct {
	URL  string
	addr string
	opts Options

	mu          sync.Mutex
	tokens      map[string]string // token -> agent
	policies    map[string]hub.Policy
	convergence map[string][]hub.Convergence
	ids         map[string]uint32 // event id -> deliveries
	events      map[string]actionevent.Record
	order       []string // event ids in arrival order
	stats       Stats
	requests    []Request
	failures    []Failure
	delay       time.Duration
	malformed   string
	hangUp      bool
	down        bool

	srv  *http.Server
	done chan struct{}

	journalMu sync.Mutex // orders Journal lines
}

// New starts a server.
func New(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	s := &Server{
		opts:        opts,
		tokens:      map[string]string{},
		policies:    map[string]hub.Policy{},
		convergence: map[string][]hub.Convergence{},
		ids:         map[string]uint32{},
		events:      map[string]actionevent.Record{},
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("hubtest: listen %s: %w", opts.Addr, err)
	}
	s.addr = ln.Addr().String()
	s.URL = "http://" + s.addr
	s.serve(ln)
	return s, nil
}

// TB is the part of testing.TB that Start uses.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// Start starts a server on loopback and closes it at test cleanup.
func Start(t TB) *Server {
	t.Helper()
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Addr returns host:port.
func (s *Server) Addr() string { return s.addr }

func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	s.mu.Lock()
	s.srv, s.done = srv, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
}

// Close stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
		<-done
	}
}

// SetDown takes the server off the network (the port refuses connections
// and open connections are closed) or brings it back on the same address.
func (s *Server) SetDown(down bool) error {
	s.mu.Lock()
	if s.down == down {
		s.mu.Unlock()
		return nil
	}
	s.down = down
	srv, done := s.srv, s.done
	s.mu.Unlock()
	if down {
		if srv != nil {
			srv.Close() // closes the listener and every connection
			<-done
		}
		s.mu.Lock()
		s.srv = nil
		s.mu.Unlock()
		return nil
	}
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger briefly
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("hubtest: relisten %s: %w", s.addr, err)
	}
	s.serve(ln)
	return nil
}

// SetHangUp makes the server accept requests and close the connection
// without answering.
func (s *Server) SetHangUp(on bool) { s.mu.Lock(); s.hangUp = on; s.mu.Unlock() }

// SetDelay delays every answer by d (the request's context still wins).
func (s *Server) SetDelay(d time.Duration) { s.mu.Lock(); s.delay = d; s.mu.Unlock() }

// SetMalformed replaces the body of every 2xx answer with body; "" restores
// normal answers. The ledger still stores accepted events, as a hub whose
// reply was mangled on the way back would.
func (s *Server) SetMalformed(body string) { s.mu.Lock(); s.malformed = body; s.mu.Unlock() }

// Fail queues a failure rule; rules apply in order.
func (s *Server) Fail(f Failure) { s.mu.Lock(); s.failures = append(s.failures, f); s.mu.Unlock() }

// ClearFailures removes every failure rule.
func (s *Server) ClearFailures() { s.mu.Lock(); s.failures = nil; s.mu.Unlock() }

// AddAgent registers an agent and the token that authenticates it.
func (s *Server) AddAgent(agentID, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = agentID
}

// TokenFile registers agentID with a fresh token written to a 0600 file in
// dir and returns the file's path.
func (s *Server) TokenFile(dir, agentID string) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return "", err
	}
	tok := fmt.Sprintf("hubtest-%x", b)
	p := filepath.Join(dir, agentID+".token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		return "", err
	}
	s.AddAgent(agentID, tok)
	return p, nil
}

// Assign sets the policy assigned to agentID.
func (s *Server) Assign(agentID string, p hub.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policies[agentID] = p
}

// Unassign removes agentID's assignment.
func (s *Server) Unassign(agentID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.policies, agentID)
}

// Convergence returns the reports agentID has posted, oldest first.
func (s *Server) Convergence(agentID string) []hub.Convergence {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hub.Convergence(nil), s.convergence[agentID]...)
}

// Stats returns the ledger counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Deliveries returns how many times id was delivered in accepted batches
// (0: never stored).
func (s *Server) Deliveries(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.ids[id])
}

// EventIDs returns the stored ids in arrival order.
func (s *Server) EventIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.order...)
}

// Event returns a stored record (absent with DiscardEvents).
func (s *Server) Event(id string) (actionevent.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.events[id]
	return r, ok
}

// Requests returns the requests served so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ServeHTTP implements the contract.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_hubtest/stats" {
		s.ServeStats(w, r)
		return
	}
	s.mu.Lock()
	hangUp, delay := s.hangUp, s.delay
	s.mu.Unlock()
	if hangUp {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	route, pathAgent, ok := parsePath(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such route")
		return
	}
	agent, ok := s.authenticate(r)
	if !ok {
		s.log(r, route, "", http.StatusUnauthorized, 0)
		writeError(w, http.StatusUnauthorized, "unauthorized", "missing or unknown bearer token")
		return
	}
	if f, hit := s.takeFailure(route); hit {
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		s.mu.Lock()
		if route == RouteActionEvents {
			s.stats.Rejected++
		}
		s.mu.Unlock()
		s.log(r, route, agent, f.Code, 0)
		writeError(w, f.Code, "injected_failure", "hubtest was told to fail this request")
		return
	}
	switch route {
	case RoutePolicy:
		s.getPolicy(w, r, agent, pathAgent)
	case RouteConvergence:
		s.postConvergence(w, r, agent, pathAgent)
	case RouteActionEvents:
		s.postActionEvents(w, r, agent)
	}
}

// parsePath recognises /agents/{id}/openshell/policy,
// /agents/{id}/openshell/policy/convergence and /action-events.
func parsePath(p string) (route, agent string, ok bool) {
	if p == "/action-events" {
		return RouteActionEvents, "", true
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) >= 4 && parts[0] == "agents" && parts[2] == "openshell" && parts[3] == "policy" && parts[1] != "" {
		switch len(parts) {
		case 4:
			return RoutePolicy, parts[1], true
		case 5:
			if parts[4] == "convergence" {
				return RouteConvergence, parts[1], true
			}
		}
	}
	return "", "", false
}

func (s *Server) authenticate(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	agent, ok := s.tokens[tok]
	return agent, ok
}

func (s *Server) takeFailure(route string) (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.failures {
		if f.Route != "" && f.Route != route {
			continue
		}
		if f.Count > 0 {
			s.failures[i].Count--
			if s.failures[i].Count == 0 {
				s.failures = append(s.failures[:i], s.failures[i+1:]...)
			}
		}
		return f, true
	}
	return Failure{}, false
}

func (s *Server) log(r *http.Request, route, agent string, status, events int) {
	s.mu.Lock()
	if len(s.requests) < 100000 {
		s.requests = append(s.requests, Request{Time: time.Now(), Method: r.Method, Route: route, Agent: agent, Status: status, Events: events})
	}
	s.mu.Unlock()
	if status != http.StatusOK {
		s.journal(JournalEntry{Method: r.Method, Route: route, Agent: agent, Status: status})
	}
}

// journal writes one line to Options.Journal.
func (s *Server) journal(e JournalEntry) {
	if s.opts.Journal == nil {
		return
	}
	e.Time = time.Now().UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	s.journalMu.Lock()
	defer s.journalMu.Unlock()
	s.opts.Journal.Write(append(b, '\n'))
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request, agent, pathAgent string) {
	if r.Method != http.MethodGet {
		s.log(r, RoutePolicy, agent, http.StatusMethodNotAllowed, 0)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return
	}
	if pathAgent != agent {
		s.log(r, RoutePolicy, agent, http.StatusForbidden, 0)
		writeError(w, http.StatusForbidden, "forbidden", "the token's agent may read only its own policy")
		return
	}
	s.mu.Lock()
	p, ok := s.policies[agent]
	s.mu.Unlock()
	if !ok {
		s.log(r, RoutePolicy, agent, http.StatusNotFound, 0)
		writeError(w, http.StatusNotFound, "not_assigned", "no policy is assigned to this agent")
		return
	}
	s.log(r, RoutePolicy, agent, http.StatusOK, 0)
	s.journal(JournalEntry{Method: r.Method, Route: RoutePolicy, Agent: agent, Status: http.StatusOK, Version: p.Version})
	s.writeOK(w, p)
}

func (s *Server) postConvergence(w http.ResponseWriter, r *http.Request, agent, pathAgent string) {
	if r.Method != http.MethodPost {
		s.log(r, RouteConvergence, agent, http.StatusMethodNotAllowed, 0)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
		return
	}
	if pathAgent != agent {
		s.log(r, RouteConvergence, agent, http.StatusForbidden, 0)
		writeError(w, http.StatusForbidden, "forbidden", "the token's agent may report only for itself")
		return
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	var cv hub.Convergence
	if err := dec.Decode(&cv); err != nil {
		s.log(r, RouteConvergence, agent, http.StatusBadRequest, 0)
		writeError(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	if err := cv.Validate(); err != nil {
		s.log(r, RouteConvergence, agent, http.StatusBadRequest, 0)
		writeError(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	s.mu.Lock()
	s.convergence[agent] = append(s.convergence[agent], cv)
	s.mu.Unlock()
	s.log(r, RouteConvergence, agent, http.StatusOK, 0)
	s.journal(JournalEntry{Method: r.Method, Route: RouteConvergence, Agent: agent, Status: http.StatusOK, Convergence: &cv})
	s.writeOK(w, map[string]string{"status": "recorded"})
}

func (s *Server) postActionEvents(w http.ResponseWriter, r *http.Request, agent string) {
	reject := func(code int, e, detail string, n int) {
		s.mu.Lock()
		s.stats.Rejected++
		s.mu.Unlock()
		s.log(r, RouteActionEvents, agent, code, n)
		writeError(w, code, e, detail)
	}
	if r.Method != http.MethodPost {
		reject(http.StatusMethodNotAllowed, "method_not_allowed", "use POST", 0)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, hub.MaxBatchBytes+1))
	if err != nil {
		reject(http.StatusBadRequest, "invalid_body", "reading body: "+err.Error(), 0)
		return
	}
	if len(body) > hub.MaxBatchBytes {
		reject(http.StatusRequestEntityTooLarge, "batch_too_large", fmt.Sprintf("body over %d bytes", hub.MaxBatchBytes), 0)
		return
	}
	raw, err := actionevent.SplitBatch(body)
	if err != nil {
		reject(http.StatusBadRequest, "invalid_body", err.Error(), 0)
		return
	}
	if len(raw) > hub.MaxBatchEvents {
		reject(http.StatusRequestEntityTooLarge, "batch_too_large", fmt.Sprintf("%d events, at most %d", len(raw), hub.MaxBatchEvents), len(raw))
		return
	}
	recs := make([]actionevent.Record, len(raw))
	for i, b := range raw {
		rec, err := actionevent.Parse(b)
		if err == nil {
			err = rec.Validate()
		}
		if err != nil {
			reject(http.StatusUnprocessableEntity, "invalid_event", fmt.Sprintf("events[%d]: %v", i, err), len(raw))
			return
		}
		if rec.AgentID != agent {
			reject(http.StatusForbidden, "agent_mismatch", fmt.Sprintf("events[%d]: agent_id is not the token's agent", i), len(raw))
			return
		}
		recs[i] = rec
	}
	var res hub.BatchResult
	var stored []actionevent.Record
	s.mu.Lock()
	for _, rec := range recs {
		n := s.ids[rec.EventID]
		s.ids[rec.EventID] = n + 1
		if n == 0 {
			res.Accepted++
			if s.opts.Journal != nil {
				stored = append(stored, rec)
			}
			s.order = append(s.order, rec.EventID)
			if !s.opts.DiscardEvents {
				s.events[rec.EventID] = rec
			}
		} else {
			res.Duplicates++
		}
	}
	s.stats.Received += len(recs)
	s.stats.Distinct = len(s.order)
	s.stats.Batches++
	s.mu.Unlock()
	s.log(r, RouteActionEvents, agent, http.StatusOK, len(recs))
	s.journal(JournalEntry{Method: r.Method, Route: RouteActionEvents, Agent: agent, Status: http.StatusOK, Stored: stored, Duplicates: res.Duplicates})
	s.writeOK(w, res)
}

func (s *Server) writeOK(w http.ResponseWriter, v any) {
	s.mu.Lock()
	mal := s.malformed
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if mal != "" {
		io.WriteString(w, mal)
		return
	}
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, e, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": e, "detail": detail})
}

// ServeStats answers GET /_hubtest/stats with Stats as JSON; used by the
// benchmark script to confirm what the hub holds.
func (s *Server) ServeStats(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]int{
		"distinct": st.Distinct, "received": st.Received, "duplicates": st.Duplicates(),
		"batches": st.Batches, "rejected": st.Rejected,
	})
}
