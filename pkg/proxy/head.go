package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultMaxHeadBytes bounds a request head (request line, header fields
// and the blank line): larger heads get 431.
const DefaultMaxHeadBytes = 8 << 10

// maxHeaderFields bounds the number of header fields in one head.
const maxHeaderFields = 128

// ErrHeadTooLarge is returned by readHead when the head exceeds its limit.
var ErrHeadTooLarge = errors.New("request head too large")

// HeadError is a malformed request head: the proxy answers 400 and names
// the problem.
type HeadError struct{ Msg string }

func (e *HeadError) Error() string { return "bad request head: " + e.Msg }

func headErrorf(format string, args ...any) error {
	return &HeadError{Msg: fmt.Sprintf(format, args...)}
}

// Field is one request header field as received.
type Field struct {
	Name  string
	Value string
}

// Head is a parsed HTTP/1.x request head.
type Head struct {
	Method string // token, case as received (methods are case-sensitive)
	Target string // request-target as received
	Proto  string // "HTTP/1.1" or "HTTP/1.0"
	Fields []Field
}

// Get returns the first value of the named field (case-insensitive).
func (h *Head) Get(name string) (string, bool) {
	for _, f := range h.Fields {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	return "", false
}

// readHead reads one request head from br into buf (reusing its storage)
// and returns it, including the terminating blank line. Empty lines before
// the request line are skipped (RFC 9112 §2.2) but count toward max. It
// returns ErrHeadTooLarge once more than max bytes arrived without the
// blank line, and the read error (io.EOF, a timeout) otherwise.
func readHead(br *bufio.Reader, max int, buf []byte) ([]byte, error) {
	buf = buf[:0]
	total, lineStart := 0, 0
	for {
		chunk, err := br.ReadSlice('\n')
		total += len(chunk)
		if total > max {
			return buf, ErrHeadTooLarge
		}
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue // the line goes on; keep accumulating
		}
		if err != nil {
			return buf, err
		}
		line := buf[lineStart:]
		if len(line) == 1 || (len(line) == 2 && line[0] == '\r') {
			if lineStart == 0 {
				buf = buf[:0] // leading empty line before the request line
				continue
			}
			return buf, nil
		}
		lineStart = len(buf)
	}
}

// ParseHead parses a request head as returned by readHead: a request line
// "METHOD SP target SP HTTP/1.x", header fields "name: value", and the
// blank line. Lines end in CRLF or LF. It rejects what a lenient parser
// would let through and a downstream server might read differently:
// obsolete line folding, whitespace before the colon, control characters,
// bad tokens, other protocol versions, and too many fields.
//
// The head is copied into one string and every part of the result is a
// piece of it: one allocation for the text of the head, one for its
// fields.
func ParseHead(b []byte) (*Head, error) {
	s := string(b)
	line, rest, ok := cutLine(s)
	if !ok {
		return nil, headErrorf("missing request line")
	}
	sp1 := strings.IndexByte(line, ' ')
	if sp1 <= 0 {
		return nil, headErrorf("malformed request line")
	}
	sp2 := strings.IndexByte(line[sp1+1:], ' ')
	if sp2 <= 0 {
		return nil, headErrorf("malformed request line")
	}
	sp2 += sp1 + 1
	method, target, proto := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if !isToken(method) {
		return nil, headErrorf("invalid method")
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c == 0x7f {
			return nil, headErrorf("request target contains whitespace or a control character")
		}
	}
	switch proto {
	case "HTTP/1.1", "HTTP/1.0":
	default:
		return nil, headErrorf("unsupported protocol version (want HTTP/1.1 or HTTP/1.0)")
	}
	h := &Head{Method: method, Target: target, Proto: proto}
	if n := strings.Count(rest, "\n") - 1; n > 0 {
		h.Fields = make([]Field, 0, min(n, maxHeaderFields))
	}
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return nil, headErrorf("head not terminated by an empty line")
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, headErrorf("obsolete line folding is not accepted")
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return nil, headErrorf("header line without a field name and colon")
		}
		name := line[:colon]
		if !isToken(name) {
			return nil, headErrorf("invalid header field name")
		}
		value := strings.Trim(line[colon+1:], " \t")
		for i := 0; i < len(value); i++ {
			if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
				return nil, headErrorf("header %s contains a control character", name)
			}
		}
		if len(h.Fields) == maxHeaderFields {
			return nil, headErrorf("more than %d header fields", maxHeaderFields)
		}
		h.Fields = append(h.Fields, Field{Name: name, Value: value})
	}
	if len(rest) != 0 {
		return nil, headErrorf("data after the end of the head")
	}
	return h, nil
}

// cutLine splits off one line ending in LF (a preceding CR is dropped).
// A bare CR inside a line is refused by the callers' control-character
// checks.
func cutLine(s string) (line, rest string, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 0 {
		return "", s, false
	}
	line, rest = s[:i], s[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest, true
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChar[s[i]] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// ParseAuthority splits a CONNECT request target, which must be
// authority-form host:port (RFC 9110 §9.3.6): a DNS name, IPv4 literal or
// bracketed IPv6 literal, and a decimal port in 1..65535. A missing port,
// userinfo, a path or an empty host is an error.
func ParseAuthority(s string) (host string, port int, err error) {
	if s == "" {
		return "", 0, headErrorf("empty CONNECT authority")
	}
	if strings.ContainsAny(s, "@/?#\\") {
		return "", 0, headErrorf("CONNECT authority must be host:port")
	}
	var portStr string
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, headErrorf("CONNECT authority has an unterminated [")
		}
		host = s[1:end]
		after := s[end+1:]
		if !strings.HasPrefix(after, ":") {
			return "", 0, headErrorf("CONNECT authority %q has no port", s)
		}
		portStr = after[1:]
		if host == "" || !strings.Contains(host, ":") {
			return "", 0, headErrorf("CONNECT authority has an invalid bracketed address")
		}
	} else {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return "", 0, headErrorf("CONNECT authority %q has no port", s)
		}
		host, portStr = s[:i], s[i+1:]
		if strings.Contains(host, ":") {
			return "", 0, headErrorf("CONNECT authority: IPv6 literals must be bracketed")
		}
		if host == "" {
			return "", 0, headErrorf("CONNECT authority has an empty host")
		}
	}
	port, err = parsePort(portStr)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// parsePort parses a decimal port in 1..65535 (digits only, no sign).
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 {
		return 0, headErrorf("port %q is not in 1..65535", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, headErrorf("port %q is not a decimal number", s)
		}
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, headErrorf("port %q is not in 1..65535", s)
	}
	return n, nil
}

// maxPartialTarget bounds the request target a malformed head's record
// keeps.
const maxPartialTarget = 1024

// partialRequestLine is what can be read of a head that did not parse:
// its method, when the first line starts with a token and a space, and
// its target up to the query (events never carry one), when it is
// printable ASCII of bounded length. Either may be "".
func partialRequestLine(raw []byte) (method, target string) {
	line := raw
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	m, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(m) > 24 || !isToken(string(m)) {
		return "", ""
	}
	method = string(m)
	t, _, _ := bytes.Cut(rest, []byte(" "))
	if i := bytes.IndexAny(t, "?#"); i >= 0 {
		t = t[:i]
	}
	if len(t) == 0 || len(t) > maxPartialTarget {
		return method, ""
	}
	for _, c := range t {
		if c <= ' ' || c >= 0x7f {
			return method, ""
		}
	}
	return method, string(t)
}
