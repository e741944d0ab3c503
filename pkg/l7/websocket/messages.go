package websocket

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/palisade-sandbox/palisade/pkg/l7"
)

// Close codes (RFC 6455 §7.4.1) the proxy closes a refused connection
// with.
const (
	CloseInvalidData     = 1007 // a text message that is not UTF-8
	ClosePolicyViolation = 1008 // a message the rules refuse
	CloseTooBig          = 1009 // a message over the endpoint's bound
)

// Refusal ends RelayMessages: a message was refused, and the connection
// is to be closed with Code. Decision is the rules' decision (a policy
// refusal: 1008); for 1007 and 1009 its Reason is one of the
// Reason* constants below and Rule is empty.
type Refusal struct {
	Code     int
	Decision l7.Decision
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("websocket message refused (%d): %s", r.Code, r.Decision.Reason)
}

// Reasons of refusals that are not the rules'.
const (
	ReasonInvalidUTF8 = "websocket_text_not_utf8"
	ReasonTooBig      = "websocket_message_too_big"
)

// maxBatch bounds the allowed frames gathered before one write.
const maxBatch = 64 << 10

// RelayMessages copies the client's frames from src to dst, each header
// checked by c first (as Relay does), and holds every data message to
// msgs: its frames are gathered (as sent, masked) until its last one
// has arrived, up to msgs.MaxMessage() bytes of payload; a text
// message must be UTF-8; then msgs.Message decides the unmasked
// payload, and only an allowed message's frames are written. Control
// frames pass as they come (one arriving inside a fragmented message
// goes out after it). Allowed messages are written in batches: whatever
// was decided while src had more bytes buffered goes out in one write.
//
// A message in one frame that fits src's buffer (most are) is decided
// where it lies: unmasked into a scratch copy, and, allowed, written
// from src's buffer with the frames around it, without being copied
// or allocating (wholeFrames); the rest are gathered as above. Both
// ways decide and write the same (FuzzRelayMessagesPaths).
//
// It returns the bytes written and, at the first refused message, a
// *Refusal (nothing of that message written; what came before it was).
// With audit set, a policy refusal (1008) is reported to audit and the
// message relayed instead; 1007 and 1009 always end the relay. Other
// errors are as Relay's: ErrFrame, read and write errors; io.EOF
// between frames is a clean end (nil).
//
// With rw set, every text message the rules let through (audit
// included: rules judge the message as the client sent it) is passed
// to rw next: a refusal it returns ends the relay like the rules' (the
// message not written), and a payload other than the one it was given
// replaces the message, written as one masked frame with a fresh key
// (its fragments merged; over msgs.MaxMessage() bytes it is refused
// with 1009 instead).
func RelayMessages(dst io.Writer, src *bufio.Reader, c *Checker, msgs l7.Messages, audit func(l7.Decision), rw Rewrite) (int64, error) {
	return relayMessages(dst, src, c, msgs, audit, rw, true)
}

// relayMessages is RelayMessages; without whole, every message is
// gathered (the tests compare the two ways).
func relayMessages(dst io.Writer, src *bufio.Reader, c *Checker, msgs l7.Messages, audit func(l7.Decision), rw Rewrite, whole bool) (int64, error) {
	r := &msgRelay{dst: dst, src: src, c: c, msgs: msgs, max: msgs.MaxMessage(), audit: audit, rw: rw, whole: whole}
	r.rules, _ = msgs.(*Rules)
	err := r.run()
	if ferr := r.flush(); err == nil {
		err = ferr
	}
	return r.n, err
}

// Rewrite is what RelayMessages does to an allowed text message's
// payload before relaying it: it returns the payload to send (text
// itself when unchanged) or a refusal. It must not keep text.
type Rewrite func(text []byte) ([]byte, *Refusal)

type msgRelay struct {
	dst   io.Writer
	src   *bufio.Reader
	c     *Checker
	msgs  l7.Messages
	rules *Rules // msgs, when it is: asked Rules.allows first
	max   int64
	audit func(l7.Decision)
	rw    Rewrite
	whole bool // decide messages in one buffered frame in place (wholeFrames)
	n     int64
	msg   l7.Message // the message being decided (not allocated per message)

	out      []byte // allowed bytes not yet written
	msgStart int    // where the message being gathered starts in out (-1: none)
	ctl      []byte // control frames that arrived inside it
	data     []byte // its unmasked payload
	text     bool
	shapes   shapeCache // the last text's JSON shape, for rules with json matchers
}

func (r *msgRelay) run() error {
	r.msgStart = -1
	for {
		if r.src.Buffered() == 0 {
			if err := r.flush(); err != nil {
				return err
			}
		}
		h, hn, err := peekHeader(r.src)
		if err != nil {
			if err == io.EOF {
				if r.msgStart >= 0 {
					return io.ErrUnexpectedEOF
				}
				return nil
			}
			return err
		}
		if err := r.c.Check(h); err != nil {
			return err
		}
		fl := int64(hn) + h.Length
		if r.whole && r.msgStart < 0 && h.Fin && fl <= int64(r.src.Size()) {
			if h.Opcode < OpClose && h.Length > r.max {
				return &Refusal{Code: CloseTooBig, Decision: l7.Denied(ReasonTooBig, "")}
			}
			if int64(r.src.Buffered()) < fl {
				if err := r.flush(); err != nil { // what was allowed does not wait for this frame
					return err
				}
				if _, err := r.src.Peek(int(fl)); err != nil {
					return unexpected(err)
				}
			}
			left := r.src.Buffered()
			if err := r.wholeFrames(); err != nil {
				return err
			}
			if r.src.Buffered() < left {
				continue
			}
			// wholeFrames reads every frame checked here; were one left,
			// it is read below rather than offered to it again.
		}
		if h.Opcode >= OpClose {
			if err := r.control(h, hn); err != nil {
				return err
			}
			continue
		}
		if err := r.dataFrame(h, hn); err != nil {
			return err
		}
	}
}

// wholeFrames relays the frames at the start of src's buffer that are
// wholly there and need no gathering: messages in one frame, and
// control frames between messages. Each message is unmasked into
// r.data and decided (judge); the allowed frames are written from
// src's buffer, after whatever r.out holds, in one write. A rewritten
// message breaks the run: the frames before it and its new frame go
// through r.out. It stops before the first frame that is not whole,
// starts a fragmented message or is to be refused by its header (run
// reads that one), and at a refused message, after writing the frames
// allowed before it.
func (r *msgRelay) wholeFrames() error {
	buf, _ := r.src.Peek(r.src.Buffered())
	from, pos := 0, 0 // buf[from:pos]: allowed frames not yet written
	var err error
	for err == nil {
		rest := buf[pos:]
		if len(rest) < 2 || len(rest) < headerLen(rest) {
			break
		}
		hn := headerLen(rest)
		var h Header
		var perr error
		if b0, b1 := rest[0], rest[1]; b1&0x80 != 0 && b1&0x7f < 126 { // masked, a 7-bit length: parseHeader's reading, inlined
			h = Header{Fin: b0&0x80 != 0, RSV: (b0 >> 4) & 7, Opcode: b0 & 0xf, Masked: true, Length: int64(b1 & 0x7f), Mask: [4]byte(rest[2:6])}
		} else {
			h, perr = parseHeader(rest[:hn])
		}
		// Check, short-cut for what passes it unchanged: a whole masked
		// text or binary frame between messages, no reserved bit.
		plain := h.Masked == r.c.Client && h.RSV == 0 && !r.c.fragments && (h.Opcode == OpText || h.Opcode == OpBinary)
		if perr != nil || !h.Fin || !plain && r.c.Check(h) != nil || h.Opcode < OpClose && h.Length > r.max || int64(len(rest)-hn) < h.Length {
			break // run reads it (and refuses it, for the same reason)
		}
		fl := hn + int(h.Length)
		if h.Opcode >= OpClose {
			pos += fl
			continue
		}
		r.text = h.Opcode == OpText
		var ascii bool
		r.data, ascii = appendUnmasked(r.data[:0], rest[hn:fl], h.Mask)
		var pay []byte
		var changed bool
		if pay, changed, err = r.judge(ascii); err != nil {
			break
		}
		if changed {
			r.out = append(r.out, buf[from:pos]...)
			r.out = appendMaskedFrame(r.out, OpText, pay)
			from = pos + fl
		}
		pos += fl
		if cap(r.data) > maxBatch {
			r.data = nil
		}
	}
	var werr error
	if len(r.out) > 0 {
		r.out = append(r.out, buf[from:pos]...)
		werr = r.flush()
	} else if pos > from {
		w, e := r.dst.Write(buf[from:pos])
		r.n += int64(w)
		werr = e
	}
	r.src.Discard(pos)
	if err != nil {
		return err
	}
	return werr
}

// control passes a control frame (at most 2+4+125 bytes).
func (r *msgRelay) control(h Header, hn int) error {
	b, err := r.src.Peek(hn + int(h.Length))
	if err != nil {
		return unexpected(err)
	}
	if r.msgStart >= 0 {
		r.ctl = append(r.ctl, b...)
	} else {
		r.out = append(r.out, b...)
	}
	r.src.Discard(len(b))
	return r.flushIfFull()
}

// dataFrame gathers one frame of a data message and decides the message
// after its last frame.
func (r *msgRelay) dataFrame(h Header, hn int) error {
	if h.Opcode != OpContinuation {
		r.msgStart, r.text, r.data = len(r.out), h.Opcode == OpText, r.data[:0]
	}
	if int64(len(r.data))+h.Length > r.max {
		return &Refusal{Code: CloseTooBig, Decision: l7.Denied(ReasonTooBig, "")}
	}
	hb, _ := r.src.Peek(hn)
	r.out = append(r.out, hb...)
	r.src.Discard(hn)
	if int64(r.src.Buffered()) < h.Length {
		if err := r.flush(); err != nil { // what was allowed does not wait for this frame
			return err
		}
	}
	start := len(r.out)
	r.out = append(r.out, make([]byte, h.Length)...)
	if _, err := io.ReadFull(r.src, r.out[start:]); err != nil {
		return unexpected(err)
	}
	pay := r.out[start:]
	d0 := len(r.data)
	r.data = append(r.data, pay...)
	Unmask(r.data[d0:], h.Mask, 0)
	if !h.Fin {
		return nil
	}
	return r.decide()
}

// decide holds the gathered message to the rules.
func (r *msgRelay) decide() error {
	pay, changed, err := r.judge(false)
	if err != nil {
		r.out = r.out[:r.msgStart]
		return err
	}
	if changed {
		r.out = appendMaskedFrame(r.out[:r.msgStart], OpText, pay)
	}
	r.out = append(r.out, r.ctl...)
	r.ctl, r.msgStart = r.ctl[:0], -1
	if cap(r.data) > maxBatch {
		r.data = nil // a large message's buffer is not kept
	}
	return r.flushIfFull()
}

// judge decides the message in r.data (r.text; ascii: known to be all
// ASCII, so UTF-8): a *Refusal, or whether r.rw changed it (pay: what
// to send instead).
func (r *msgRelay) judge(ascii bool) (pay []byte, changed bool, err error) {
	if r.text && !ascii && !utf8.Valid(r.data) {
		return nil, false, &Refusal{Code: CloseInvalidData, Decision: l7.Denied(ReasonInvalidUTF8, "")}
	}
	if r.rules == nil || !r.rules.allows(r.text, r.data, &r.shapes) {
		r.msg = l7.Message{Text: r.text, Data: r.data}
		if d := r.msgs.Message(&r.msg); !d.Allow {
			if r.audit == nil || !d.Policy() {
				return nil, false, &Refusal{Code: ClosePolicyViolation, Decision: d}
			}
			r.audit(d)
		}
	}
	if !r.text || r.rw == nil {
		return nil, false, nil
	}
	pay, ref := r.rw(r.data)
	if ref == nil && int64(len(pay)) > r.max {
		ref = &Refusal{Code: CloseTooBig, Decision: l7.Denied(ReasonTooBig, "")}
	}
	if ref != nil {
		return nil, false, ref
	}
	return pay, !bytes.Equal(pay, r.data), nil
}

// appendMaskedFrame appends one final frame of op with payload pay, as a
// client sends it (masked with a random key).
func appendMaskedFrame(b []byte, op byte, pay []byte) []byte {
	b = append(b, 0x80|op)
	switch n := len(pay); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var key [4]byte
	rand.Read(key[:])
	b = append(b, key[:]...)
	start := len(b)
	b = append(b, pay...)
	Unmask(b[start:], key, 0)
	return b
}

func (r *msgRelay) flushIfFull() error {
	if r.msgStart < 0 && len(r.out) >= maxBatch {
		return r.flush()
	}
	return nil
}

// flush writes the allowed bytes gathered (never a message still being
// decided).
func (r *msgRelay) flush() error {
	end := len(r.out)
	if r.msgStart >= 0 {
		end = r.msgStart
	}
	if end == 0 {
		return nil
	}
	w, err := r.dst.Write(r.out[:end])
	r.n += int64(w)
	r.out = append(r.out[:0], r.out[end:]...)
	if r.msgStart >= 0 {
		r.msgStart = 0
	}
	if cap(r.out) > 4*maxBatch && len(r.out) == 0 {
		r.out = nil
	}
	return err
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// CloseFrame is a close frame with code, as a server sends it
// (unmasked), or, with masked set, as a client sends it (masked with a
// random key).
func CloseFrame(code int, masked bool) []byte {
	var pay [2]byte
	binary.BigEndian.PutUint16(pay[:], uint16(code))
	if !masked {
		return []byte{0x80 | OpClose, 2, pay[0], pay[1]}
	}
	var key [4]byte
	rand.Read(key[:])
	Unmask(pay[:], key, 0)
	return []byte{0x80 | OpClose, 0x80 | 2, key[0], key[1], key[2], key[3], pay[0], pay[1]}
}
