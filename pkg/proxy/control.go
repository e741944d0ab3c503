package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// Status is the control socket's GET /status answer.
type Status struct {
	Sandbox         string       `json:"sandbox"`
	Policy          PolicyStatus `json:"policy"`
	LastReloadError string       `json:"last_reload_error,omitempty"`
	StartedAt       time.Time    `json:"started_at"`
	Counters        Counters     `json:"counters"`
	// Attribution holds the attribution backend's counters, when it has
	// any (see AttributionCounter).
	Attribution map[string]uint64 `json:"attribution,omitempty"`
	// Credentials describes the credentials in force (nil: none are
	// configured); never a key or a value.
	Credentials *CredentialsStatus `json:"credentials,omitempty"`
	// Endpoints is the last observed result of each inspected endpoint
	// (also GET /endpoints alone).
	Endpoints []EndpointStatus `json:"endpoints,omitempty"`
}

// CredentialsStatus describes the credentials in force.
type CredentialsStatus struct {
	Path        string `json:"path"`
	Generation  int64  `json:"generation"`
	Credentials int    `json:"credentials"`
	Providers   int    `json:"providers"`
	// Revoked is set after a reload failed (LastError says why): every
	// credential is refused until a reload succeeds.
	Revoked   bool   `json:"revoked"`
	LastError string `json:"last_error,omitempty"`
}

// PolicyStatus describes the generation in force.
type PolicyStatus struct {
	Path         string    `json:"path"`
	SHA256       string    `json:"sha256"`
	StaticSHA256 string    `json:"static_sha256"`
	Generation   int64     `json:"generation"`
	LoadedAt     time.Time `json:"loaded_at"`
}

// Status returns the proxy's status.
func (p *Proxy) Status() Status {
	g := p.gen.Load()
	s := Status{
		Sandbox:   p.src.Sandbox,
		StartedAt: p.started,
		Counters:  p.Counters(),
		Policy: PolicyStatus{
			Path:         g.Path,
			SHA256:       g.SHA256,
			StaticSHA256: g.StaticSHA256,
			Generation:   g.Number,
			LoadedAt:     g.LoadedAt,
		},
	}
	s.Attribution = p.attributionCounters()
	s.Endpoints = p.Endpoints()
	s.Credentials = p.credsStatus.Load()
	if e := p.lastReloadErr.Load(); e != nil {
		s.LastReloadError = *e
	}
	return s
}

// ControlHandler is the control API: GET /status (JSON), GET /endpoints
// (JSON: the inspected endpoints' last results), GET /metrics
// (Prometheus text), POST /reload (JSON ReloadResult; 422 with the error
// when the file is rejected and the last-known-good stays).
func (p *Proxy) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, p.Status())
	})
	mux.HandleFunc("GET /endpoints", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, struct {
			Endpoints []EndpointStatus `json:"endpoints"`
		}{p.Endpoints()})
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		p.WriteMetrics(w)
	})
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, _ *http.Request) {
		res, err := p.Reload("control")
		if err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, struct {
				Error string `json:"error"`
				ReloadResult
			}{err.Error(), res})
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// ListenControl creates the control socket at path, mode 0600, replacing
// a stale socket left by an earlier run (but never another kind of file).
// Connections from peers that are neither root nor the proxy's own user
// are closed unanswered.
func ListenControl(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("proxy: control socket path %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("proxy: remove stale control socket: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("proxy: control socket: %w", err)
	}
	// The umask only ever removes permission bits, so narrowing it while
	// binding cannot widen any file another goroutine creates meanwhile.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("proxy: control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("proxy: control socket: %w", err)
	}
	return &peerCheckListener{Listener: ln}, nil
}

// peerCheckListener drops connections from unauthorised peers.
type peerCheckListener struct{ net.Listener }

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uc, ok := c.(*net.UnixConn); ok && peerAuthorized(uc) {
			return c, nil
		}
		c.Close()
	}
}

// ServeControl serves the control API on ln (from ListenControl) until
// Close.
func (p *Proxy) ServeControl(ln net.Listener) error {
	srv := &http.Server{
		Handler:           p.ControlHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    8 << 10,
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return nil
	}
	p.servers = append(p.servers, srv)
	p.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
