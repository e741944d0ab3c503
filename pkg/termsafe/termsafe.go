// Package termsafe renders bytes an agent controls for a root operator's
// terminal and for records a human reads: every rune a terminal would act
// on, or that would hide or reorder text, is written as a Go escape.
// Escaped are the C0 controls (ESC, BEL, CR, backspace, ...), DEL, the C1
// controls (U+0080-U+009F, which some terminals take as CSI, OSC, ...),
// the line and paragraph separators U+2028/U+2029, the bidirectional
// controls (U+202A-U+202E, U+2066-U+2069, LRM, RLM, ALM) and U+FFFD (what
// an invalid UTF-8 byte decodes to). So a name or an output line can
// neither drive the terminal (clear it, set its title, write the
// clipboard with OSC 52), nor forge a line of its own, nor reverse the
// text around it.
//
// String escapes one string (a name, a message). Writer escapes a stream
// line by line, for command output: newlines end lines, tabs pass, every
// line carries a prefix saying whose output it is. JSON escapes an
// encoded JSON document so that it stays valid JSON with the same value
// but holds no such rune raw.
package termsafe

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Unsafe reports whether r is escaped.
func Unsafe(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.In(r, unicode.Bidi_Control, unicode.Zl, unicode.Zp)
}

// String returns s with every unsafe rune escaped as Go does in a quoted
// string (\x1b, \n, \u202e); an invalid byte is written as \ufffd.
func String(s string) string {
	if strings.IndexFunc(s, Unsafe) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		appendRune(&b, r)
	}
	return b.String()
}

func appendRune(b *strings.Builder, r rune) {
	switch {
	case r == utf8.RuneError:
		b.WriteString(`\ufffd`)
	case Unsafe(r):
		q := strconv.QuoteRune(r)
		b.WriteString(q[1 : len(q)-1])
	default:
		b.WriteRune(r)
	}
}

// maxLine is how much of a line Writer holds before it writes the line
// out anyway (continued on the next output line, with the same prefix).
const maxLine = 4096

// Writer escapes a stream of command output for a terminal: each line
// (ended by '\n') is written as prefix + the line with unsafe runes
// escaped (tabs pass: they only move the cursor forward) + '\n'. A line
// longer than 4 KiB is cut at a rune boundary and continued on the next
// output line. Close writes out an unfinished last line. It is not safe
// for concurrent use; wrap it when two streams share it.
type Writer struct {
	w      io.Writer
	prefix string
	buf    []byte
	err    error
}

// NewWriter returns a Writer writing to w with prefix before every line.
func NewWriter(w io.Writer, prefix string) *Writer {
	return &Writer{w: w, prefix: String(prefix)}
}

// Write escapes p line by line; it reports len(p) unless w failed.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			p = nil
		} else {
			w.buf = append(w.buf, p[:i]...)
			p = p[i+1:]
			w.emit(len(w.buf))
			continue
		}
		for len(w.buf) >= maxLine && w.err == nil {
			w.emit(runeBoundary(w.buf, maxLine))
		}
	}
	if w.err != nil {
		return 0, w.err
	}
	return n, nil
}

// Close writes out an unfinished last line. It does not close the
// underlying writer.
func (w *Writer) Close() error {
	if len(w.buf) > 0 && w.err == nil {
		w.emit(len(w.buf))
	}
	return w.err
}

// emit writes the first n bytes of the buffer as one output line.
func (w *Writer) emit(n int) {
	var b strings.Builder
	b.WriteString(w.prefix)
	for s := string(w.buf[:n]); s != ""; {
		r, size := utf8.DecodeRuneInString(s)
		if r == '\t' {
			b.WriteByte('\t')
		} else if r == utf8.RuneError && size == 1 {
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[0]), 16))
		} else {
			appendRune(&b, r)
		}
		s = s[size:]
	}
	b.WriteByte('\n')
	w.buf = append(w.buf[:0], w.buf[n:]...)
	_, w.err = io.WriteString(w.w, b.String())
}

// runeBoundary returns where to cut b at most n bytes in without
// splitting a UTF-8 sequence: before a sequence that starts in the last
// three bytes and is not complete by n, else n.
func runeBoundary(b []byte, n int) int {
	for i := n - 1; i >= 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:n]) || i == 0 {
				return n
			}
			return i
		}
	}
	return n
}

// JSON returns the encoded JSON document doc with every unsafe rune
// inside a string written as a \uXXXX escape (an invalid byte as
// \ufffd). The result is valid JSON with the same value whenever doc
// was; whitespace between values (newlines of JSON lines, indentation)
// is kept.
func JSON(doc []byte) []byte {
	if bytes.IndexFunc(doc, Unsafe) < 0 {
		return doc
	}
	out := make([]byte, 0, len(doc)+16)
	inString, escaped := false, false
	for len(doc) > 0 {
		r, size := utf8.DecodeRune(doc)
		switch {
		case !inString && (r == '\n' || r == '\t' || r == '\r'):
			out = append(out, byte(r))
		case Unsafe(r):
			out = append(out, `\u`...)
			out = append(out, hex4(r)...)
			escaped = false
		default:
			out = append(out, doc[:size]...)
			switch {
			case escaped:
				escaped = false
			case r == '\\' && inString:
				escaped = true
			case r == '"':
				inString = !inString
			}
		}
		doc = doc[size:]
	}
	return out
}

func hex4(r rune) string {
	s := strconv.FormatUint(uint64(r), 16)
	return strings.Repeat("0", 4-len(s)) + s
}
