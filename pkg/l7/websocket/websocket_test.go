package websocket

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The accept value of RFC 6455 §1.3's example.
func TestAcceptKey(t *testing.T) {
	if got := AcceptKey("dGhlIHNhbXBsZSBub25jZQ=="); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("AcceptKey = %q", got)
	}
	for key, ok := range map[string]bool{"dGhlIHNhbXBsZSBub25jZQ==": true, "": false, "abc": false, "dGhlIHNhbXBsZSBub25jZQ": false, "dGhlIHNhbXBsZSBub25jZSEh": false} {
		if ValidKey(key) != ok {
			t.Errorf("ValidKey(%q) = %v", key, !ok)
		}
	}
}

// frame builds one frame: fin, rsv bits, opcode, a mask when masked,
// the payload (masked with the key as a client sends it).
func frame(fin bool, rsv, op byte, masked bool, payload []byte) []byte {
	b0 := op | rsv<<4
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	mbit := byte(0)
	if masked {
		mbit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		out = append(out, mbit|byte(n))
	case n < 1<<16:
		out = append(out, mbit|126, byte(n>>8), byte(n))
	default:
		out = append(out, mbit|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	p := append([]byte(nil), payload...)
	if masked {
		key := [4]byte{1, 2, 3, 4}
		out = append(out, key[:]...)
		Unmask(p, key, 0)
	}
	return append(out, p...)
}

func cat(fs ...[]byte) []byte { return bytes.Join(fs, nil) }

func TestRelay(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 70000)
	for _, c := range []struct {
		name string
		in   []byte
		rsv1 bool
		ok   bool // relayed in full
	}{
		{"text", frame(true, 0, OpText, true, []byte("hello")), false, true},
		{"binary 16-bit length", frame(true, 0, OpBinary, true, big[:300]), false, true},
		{"binary 64-bit length", frame(true, 0, OpBinary, true, big), false, true},
		{"fragmented with a ping inside", cat(frame(false, 0, OpText, true, []byte("a")), frame(true, 0, OpPing, true, nil), frame(true, 0, OpContinuation, true, []byte("b"))), false, true},
		{"close", frame(true, 0, OpClose, true, []byte{3, 232}), false, true},
		{"deflate bit negotiated", frame(true, 4, OpText, true, []byte("z")), true, true},
		{"raw HTTP", []byte("GET /admin HTTP/1.1\r\nHost: x\r\n\r\n"), false, false},
		{"DELETE", []byte("DELETE /item HTTP/1.1\r\n\r\n"), false, false},
		{"unmasked", frame(true, 0, OpText, false, []byte("hi")), false, false},
		{"reserved opcode", frame(true, 0, 3, true, nil), false, false},
		{"reserved control opcode", frame(true, 0, 0xB, true, nil), false, false},
		{"fragmented control", frame(false, 0, OpPing, true, nil), false, false},
		{"long control", frame(true, 0, OpPing, true, big[:126]), false, false},
		{"continuation first", frame(true, 0, OpContinuation, true, nil), false, false},
		{"new message inside a fragmented one", cat(frame(false, 0, OpText, true, nil), frame(true, 0, OpText, true, nil)), false, false},
		{"deflate bit not negotiated", frame(true, 4, OpText, true, []byte("z")), false, false},
		{"deflate bit on a continuation", cat(frame(false, 4, OpText, true, nil), frame(true, 4, OpContinuation, true, nil)), true, false},
		{"RSV2", frame(true, 2, OpText, true, nil), true, false},
		{"non-minimal 16-bit length", []byte{0x81, 0x80 | 126, 0, 5, 1, 2, 3, 4, 0, 0, 0, 0, 0}, false, false},
		{"64-bit length with the top bit", []byte{0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, false, false},
		{"truncated payload", frame(true, 0, OpText, true, []byte("hello"))[:8], false, false},
	} {
		var out bytes.Buffer
		n, err := Relay(&out, bufio.NewReader(bytes.NewReader(c.in)), &Checker{Client: true, RSV1: c.rsv1})
		if c.ok != (err == nil) || c.ok && (n != int64(len(c.in)) || !bytes.Equal(out.Bytes(), c.in)) {
			t.Errorf("%s: relayed %d of %d bytes, %v", c.name, n, len(c.in), err)
		}
		if !c.ok && bytes.Contains(out.Bytes(), []byte("HTTP")) {
			t.Errorf("%s: refused bytes were relayed: %q", c.name, out.Bytes())
		}
	}
	// A server's frames are unmasked.
	if _, err := Relay(io.Discard, bufio.NewReader(bytes.NewReader(frame(true, 0, OpText, true, nil))), &Checker{}); !errors.Is(err, ErrFrame) {
		t.Errorf("masked server frame: %v", err)
	}
}

// FuzzRelay: what Relay writes is a prefix of its input made of whole
// frames that each pass the checker on their own.
func FuzzRelay(f *testing.F) {
	f.Add(frame(true, 0, OpText, true, []byte("hello")), false)
	f.Add(cat(frame(false, 0, OpText, true, []byte("a")), frame(true, 0, OpPing, true, nil), frame(true, 0, OpContinuation, true, []byte("b"))), false)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, in []byte, rsv1 bool) {
		var out bytes.Buffer
		n, _ := Relay(&out, bufio.NewReader(bytes.NewReader(in)), &Checker{Client: true, RSV1: rsv1})
		if n != int64(out.Len()) || !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("wrote %d bytes, not a prefix of the input", n)
		}
		r := bufio.NewReader(bytes.NewReader(out.Bytes()))
		c := &Checker{Client: true, RSV1: rsv1}
		for {
			h, _, err := ReadHeader(r)
			if err == io.EOF {
				return
			}
			if err != nil {
				// Relay stops inside a frame only on a short read.
				return
			}
			if c.Check(h) != nil || !h.Masked {
				t.Fatalf("relayed a frame the checker refuses: %+v", h)
			}
			if _, err := io.CopyN(io.Discard, r, h.Length); err != nil {
				return
			}
		}
	})
}

// BenchmarkRelay: checking every frame against relaying the same bytes
// unread (io.Copy, what the proxy did before), both through a 64 KiB
// bufio.Reader from a source without WriteTo (a TLS connection) into a
// writer that copies (a socket); see Relay's comment.
func BenchmarkRelay(b *testing.B) {
	var in []byte
	for i := 0; i < 256; i++ {
		in = append(in, frame(true, 0, OpBinary, true, bytes.Repeat([]byte{byte(i)}, 4096))...)
	}
	for _, c := range []struct {
		name string
		fn   func(io.Writer, *bufio.Reader) error
	}{
		{"relay", func(w io.Writer, r *bufio.Reader) error { _, err := Relay(w, r, &Checker{Client: true}); return err }},
		{"io.Copy", func(w io.Writer, r *bufio.Reader) error { _, err := io.Copy(w, r); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			rd := bytes.NewReader(in)
			br := bufio.NewReaderSize(onlyReader{rd}, 64<<10)
			sink := &copySink{buf: make([]byte, 64<<10)}
			b.ReportAllocs()
			defer testutil.CPUPerOp(b)()
			for i := 0; i < b.N; i++ {
				rd.Reset(in)
				br.Reset(onlyReader{rd})
				if err := c.fn(sink, br); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// onlyReader hides a source's WriteTo, as a TLS connection has none.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// copySink copies what it is given, as a socket write would, and
// offers io.Copy no shortcut.
type copySink struct{ buf []byte }

func (s *copySink) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		p = p[copy(s.buf, p):]
	}
	return n, nil
}
