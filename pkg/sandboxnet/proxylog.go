package sandboxnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// The egress proxy's own log stream: what it writes to stderr goes to
// ProxyLogName in the sandbox's state directory (read with
// `sandbox-supervisor logs --proxy NAME`), never to the operator's stderr,
// which the sandboxed command shares. Only lines that need the operator's
// attention reach the supervisor's log, as its own warnings: the proxy's
// WARN and ERROR lines and any line that is not a log record (a fatal
// error, a panic), at most relayLimit per proxy start. Denials are not
// among them: the proxy logs a denial at info, since refusing what the
// policy does not allow is the proxy working (the denial is an event).
const (
	// ProxyLogName is the proxy's log file (mode 0600) in the sandbox's
	// state directory; ProxyLogName+".1" is the previous one.
	ProxyLogName = "proxy.log"
	// proxyLogMax is the size at which the log is renamed to .1 and a
	// new one started: the two together hold at most about 2×16 MiB.
	proxyLogMax = 16 << 20
	// relayLimit bounds the lines relayed to the supervisor's log per
	// proxy start.
	relayLimit = 10
	// tailLines is how many of the last lines a start failure quotes.
	tailLines = 5
)

// proxyLog is an io.Writer for the proxy's stderr: it appends whole
// lines to the log file and relays those that need action.
type proxyLog struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	size    int64
	partial []byte
	tail    []string
	relayed int
	// Until the proxy is ready, relayed lines wait in pending: a start
	// that fails quotes the tail in its error instead (the state
	// directory, and the log with it, may be gone by then).
	ready   bool
	pending []func()
	logger  *slog.Logger
	sandbox string
}

// openProxyLog opens (appends to) the log at path.
func openProxyLog(path, sandbox string, logger *slog.Logger) (*proxyLog, error) {
	l := &proxyLog{path: path, logger: logger, sandbox: sandbox}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *proxyLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("egress-proxy log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("egress-proxy log: %w", err)
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// started resets what is kept per proxy start: the tail, the relay
// budget and the relays waiting for readiness.
func (l *proxyLog) started() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tail, l.relayed, l.ready, l.pending = nil, 0, false, nil
}

// isReady relays what waited for the proxy's readiness, and from now on
// relays at once.
func (l *proxyLog) isReady() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.pending {
		f()
	}
	l.ready, l.pending = true, nil
}

// Tail returns the last lines written since the last start, joined.
func (l *proxyLog) Tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, " | ")
}

func (l *proxyLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			// A line longer than the file's cap is cut, not buffered
			// without bound.
			l.partial = append(l.partial, p[:min(len(p), proxyLogMax-len(l.partial))]...)
			break
		}
		line := append(l.partial, p[:i+1]...)
		l.partial = nil
		p = p[i+1:]
		l.line(line)
	}
	return n, nil
}

// Close writes an unfinished last line and closes the file.
func (l *proxyLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.line(append(l.partial, '\n'))
		l.partial = nil
	}
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func (l *proxyLog) line(b []byte) {
	if l.f != nil && l.size+int64(len(b)) > proxyLogMax && l.size > 0 {
		l.f.Close()
		l.f = nil
		os.Rename(l.path, l.path+".1")
		if l.open() != nil {
			l.f = nil // the lines are lost, the proxy is not stopped
		}
	}
	if l.f != nil {
		if n, err := l.f.Write(b); err == nil {
			l.size += int64(n)
		}
	}
	text := strings.TrimRight(string(b), "\n")
	if text == "" {
		return
	}
	l.tail = append(l.tail, text)
	if len(l.tail) > tailLines {
		l.tail = l.tail[len(l.tail)-tailLines:]
	}
	level, msg, relay := needsAction(text)
	if !relay || l.relayed > relayLimit {
		return
	}
	l.relayed++
	hint := "sandbox-supervisor logs --proxy " + l.sandbox
	lvl, text := slog.LevelWarn, "egress-proxy: "+msg
	switch {
	case l.relayed > relayLimit:
		text = "egress-proxy: further warnings only in its log"
	case level == "ERROR":
		lvl = slog.LevelError
	}
	emit := func() { l.logger.Log(context.Background(), lvl, text, "sandbox", l.sandbox, "see", hint) }
	if l.ready {
		emit()
	} else {
		l.pending = append(l.pending, emit)
	}
}

// The expressions for slog's text lines are compiled on first use: at
// package initialisation every start of the supervisor, and of the
// sandbox's init (the same binary), paid for them.
var (
	textLevel = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?:^| )level=([A-Z]+)(?: |$)`) })
	textMsg   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?:^| )msg=`) })
)

// needsAction classifies one line of the proxy's stderr: a WARN or ERROR
// record (slog text or JSON) or a line that is no log record at all
// (the fatal error cli.Exit prints, a panic) needs action; the Go
// runtime's scheduler summaries (SCHED, see egress-proxy --help) and
// DEBUG and INFO records do not. It returns the level and the message.
func needsAction(line string) (level, msg string, relay bool) {
	if strings.HasPrefix(line, "{") {
		var r struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Level != "" {
			return r.Level, r.Msg, r.Level == "WARN" || r.Level == "ERROR"
		}
	}
	if m := textLevel().FindStringSubmatch(line); m != nil {
		level = m[1]
		if loc := textMsg().FindStringIndex(line); loc != nil {
			rest := line[loc[1]:]
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				msg, _ = strconv.Unquote(q)
			} else if i := strings.IndexByte(rest, ' '); i >= 0 {
				msg = rest[:i]
			} else {
				msg = rest
			}
		}
		return level, msg, level == "WARN" || level == "ERROR"
	}
	if strings.HasPrefix(line, "SCHED ") {
		return "", "", false
	}
	return "ERROR", line, true
}
