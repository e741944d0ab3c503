package proxy

import (
	"encoding/binary"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ReasonH2Refused: the HTTP/2 server reset a stream (or ended the
// connection) with an error before the proxy's handler answered it — a
// request it rejected as malformed, a stream over the limit.
const ReasonH2Refused = "h2_stream_refused"

// h2Watch follows the frames of an inspected HTTP/2 connection in both
// directions, without changing a byte, so that a stream the HTTP/2
// server refuses before the proxy's handler sees it still gets an event
// naming its method and path (golang.org/x/net/http2 answers such a
// stream with RST_STREAM and calls no handler). It decodes the client's
// header blocks with its own HPACK decoder, which stays in step with the
// server's because both read the same blocks in order; a block over
// maxWatchedHeaderBlock stops the decoding (later streams are named
// without method and path). It costs a frame header parse per frame
// and one HPACK decoding per request.
type h2Watch struct {
	mu      sync.Mutex
	in, out frameScanner
	dec     *hpack.Decoder
	broken  bool // a header block was skipped: the decoder is out of step
	streams map[uint32]*h2Stream
	order   []uint32 // streams by arrival, for the bound and for seen()
	refused func(method, path, cause string)
	goaway  http2.ErrCode // the server's GOAWAY error code, when one came
	// block is the header block being assembled from HEADERS and
	// CONTINUATION frames of stream blockID.
	block   []byte
	blockID uint32
}

type h2Stream struct {
	method, path string
	answered     bool // the server sent HEADERS, or the handler saw it
	reported     bool
}

const (
	maxWatchedStreams     = 1024
	maxWatchedHeaderBlock = 64 << 10
)

func newH2Watch(refused func(method, path, cause string)) *h2Watch {
	w := &h2Watch{streams: map[uint32]*h2Stream{}, refused: refused}
	w.in.skip = len(http2.ClientPreface)
	w.dec = hpack.NewDecoder(4096, nil)
	w.dec.SetMaxStringLength(maxWatchedHeaderBlock)
	return w
}

// clientBytes follows bytes the client sent (as the server reads them).
func (w *h2Watch) clientBytes(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.in.scan(p, w.clientFrame)
}

// serverBytes follows bytes the server wrote.
func (w *h2Watch) serverBytes(p []byte) {
	w.mu.Lock()
	var due []func()
	w.out.scan(p, func(f *frame) { due = append(due, w.serverFrame(f)...) })
	w.mu.Unlock()
	for _, fn := range due {
		fn() // events, outside the lock
	}
}

// seen marks the oldest unanswered stream with this method and path as
// one the handler got (called at the start of every h2 request).
func (w *h2Watch) seen(method, path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range w.order {
		if s := w.streams[id]; s != nil && !s.answered && s.method == method && s.path == path {
			s.answered = true
			return
		}
	}
}

// frame is one frame's header and, for the types the watch reads, its
// payload.
type frame struct {
	typ     http2.FrameType
	flags   http2.Flags
	stream  uint32
	payload []byte
}

// frameScanner splits a byte stream into frames as it arrives.
type frameScanner struct {
	skip    int // bytes still to ignore (the client preface)
	hdr     [9]byte
	nhdr    int
	remain  int // payload bytes of the current frame still to come
	keep    bool
	cur     frame
	payload []byte
}

func (s *frameScanner) scan(p []byte, fn func(*frame)) {
	for len(p) > 0 {
		if s.skip > 0 {
			n := min(s.skip, len(p))
			s.skip -= n
			p = p[n:]
			continue
		}
		if s.remain == 0 && s.nhdr < 9 {
			n := copy(s.hdr[s.nhdr:], p)
			s.nhdr += n
			p = p[n:]
			if s.nhdr < 9 {
				return
			}
			s.cur = frame{typ: http2.FrameType(s.hdr[3]), flags: http2.Flags(s.hdr[4]), stream: binary.BigEndian.Uint32(s.hdr[5:9]) & (1<<31 - 1)}
			s.remain = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			s.keep = watched(s.cur.typ) && s.remain <= maxWatchedHeaderBlock
			s.payload = s.payload[:0]
			if s.remain == 0 {
				s.nhdr = 0
				s.cur.payload = s.payload[:0:0]
				if !s.keep {
					s.cur.payload = nil
				}
				fn(&s.cur)
			}
			continue
		}
		n := min(s.remain, len(p))
		if s.keep {
			s.payload = append(s.payload, p[:n]...)
		}
		s.remain -= n
		p = p[n:]
		if s.remain == 0 {
			s.nhdr = 0
			if s.keep {
				s.cur.payload = s.payload
			} else {
				s.cur.payload = nil
			}
			fn(&s.cur)
		}
	}
}

func watched(t http2.FrameType) bool {
	return t == http2.FrameHeaders || t == http2.FrameContinuation || t == http2.FrameRSTStream || t == http2.FrameGoAway
}

// clientFrame assembles and decodes the client's header blocks.
func (w *h2Watch) clientFrame(f *frame) {
	switch f.typ {
	case http2.FrameHeaders:
		frag, ok := headersFragment(f)
		w.block, w.blockID = append(w.block[:0], frag...), f.stream
		if !ok || f.payload == nil {
			w.broken = true
		}
	case http2.FrameContinuation:
		if f.payload == nil || f.stream != w.blockID || len(w.block)+len(f.payload) > maxWatchedHeaderBlock {
			w.broken = true
		} else {
			w.block = append(w.block, f.payload...)
		}
	default:
		return
	}
	if f.flags&http2.FlagHeadersEndHeaders == 0 {
		return
	}
	method, path := "", ""
	if !w.broken {
		fields, err := w.dec.DecodeFull(w.block)
		if err != nil {
			w.broken = true
		}
		for _, hf := range fields {
			switch hf.Name {
			case ":method":
				method = hf.Value
			case ":path":
				path = hf.Value
			}
		}
	}
	if _, dup := w.streams[w.blockID]; dup {
		return // trailers
	}
	if len(w.order) == maxWatchedStreams {
		delete(w.streams, w.order[0])
		w.order = w.order[1:]
	}
	w.streams[w.blockID] = &h2Stream{method: method, path: path}
	w.order = append(w.order, w.blockID)
}

// headersFragment is a HEADERS frame's header block fragment (padding
// and priority removed).
func headersFragment(f *frame) ([]byte, bool) {
	p := f.payload
	pad := 0
	if f.flags&http2.FlagHeadersPadded != 0 {
		if len(p) < 1 {
			return nil, false
		}
		pad, p = int(p[0]), p[1:]
	}
	if f.flags&http2.FlagHeadersPriority != 0 {
		if len(p) < 5 {
			return nil, false
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, false
	}
	return p[:len(p)-pad], true
}

// serverFrame notes the server's answers and refusals and returns the
// events due.
func (w *h2Watch) serverFrame(f *frame) []func() {
	switch f.typ {
	case http2.FrameHeaders:
		if s := w.streams[f.stream]; s != nil {
			s.answered = true
		}
	case http2.FrameRSTStream:
		if len(f.payload) == 4 {
			code := http2.ErrCode(binary.BigEndian.Uint32(f.payload))
			if code != http2.ErrCodeNo && code != http2.ErrCodeCancel {
				return w.refuse(f.stream, "RST_STREAM "+code.String())
			}
		}
	case http2.FrameGoAway:
		if len(f.payload) >= 8 {
			code := http2.ErrCode(binary.BigEndian.Uint32(f.payload[4:8]))
			if code != http2.ErrCodeNo {
				w.goaway = code
				var due []func()
				for _, id := range w.order {
					due = append(due, w.refuse(id, "GOAWAY "+code.String())...)
				}
				return due
			}
		}
	}
	return nil
}

// refuse reports stream id once, when no answer went out for it.
func (w *h2Watch) refuse(id uint32, cause string) []func() {
	s := w.streams[id]
	if s == nil {
		s = &h2Stream{} // refused before its headers decoded
		w.streams[id] = s
	}
	if s.answered || s.reported {
		return nil
	}
	s.reported = true
	m, p := s.method, s.path
	return []func(){func() { w.refused(m, p, cause) }}
}

// goAwayCode is the error code of the server's GOAWAY (ErrCodeNo when it
// sent none or ended cleanly).
func (w *h2Watch) goAwayCode() http2.ErrCode {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.goaway
}

// h2RefusedRecord is the record of a stream the HTTP/2 server refused:
// the method and path it decoded (the path without its query).
func (ix *inspector) h2RefusedRecord(method, path, cause string) *Record {
	rr := ix.requestRecord(&http.Request{Method: method})
	rr.Proto = "HTTP/2.0"
	path, _, _ = strings.Cut(path, "?")
	rr.URL = ix.partialURL(path)
	rr.Outcome, rr.Reason, rr.Cause = OutcomeBadRequest, ReasonH2Refused, cause
	return rr
}
