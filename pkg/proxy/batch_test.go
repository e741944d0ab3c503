package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
)

// bulkByte is byte i of the upstream's /bulk body.
func bulkByte(i int) byte { return byte(i*7 + i/251) }

func bulkSum(n int) [32]byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = bulkByte(i)
	}
	return sha256.Sum256(b)
}

// A bulk download crosses a terminated tunnel byte for byte (sized and
// chunked; HTTP/1.1 or h2 on the client leg, over an HTTP/1.1 or h2
// upstream), one after another on one connection, and each request's
// event counts its bytes.
func TestInspectedBulkDownload(t *testing.T) {
	const n = 3<<20 + 12345
	for _, c := range []struct{ client, upstream bool }{{false, false}, {true, true}, {true, false}} {
		t.Run(fmt.Sprintf("h2=%v/upstream-h2=%v", c.client, c.upstream), func(t *testing.T) {
			e := newInspectEnv(t, c.upstream, func(port int) string { return restPolicy(port, "read-only", "") }, true)
			cl := e.client(c.client)
			for _, q := range []string{"", "&chunked=1", ""} {
				resp, err := cl.Get(e.url("/bulk?n=" + strconv.Itoa(n) + q))
				if err != nil {
					t.Fatal(err)
				}
				h := sha256.New()
				got, err := io.Copy(h, resp.Body)
				resp.Body.Close()
				if err != nil || got != n || resp.StatusCode != 200 || [32]byte(h.Sum(nil)) != bulkSum(n) {
					t.Fatalf("%s: status %d, %d of %d bytes (%v), content equal %v", q, resp.StatusCode, got, n, err, [32]byte(h.Sum(nil)) == bulkSum(n))
				}
				if sized := q == ""; sized != (resp.ContentLength == n) {
					t.Errorf("%s: Content-Length %d", q, resp.ContentLength)
				}
				if want := map[bool]int{false: 1, true: 2}[c.client]; resp.ProtoMajor != want {
					t.Errorf("client leg %s", resp.Proto)
				}
			}
			wantUp := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[c.upstream]
			for _, r := range e.up.requests() {
				if !strings.HasSuffix(r, " "+wantUp) {
					t.Errorf("upstream saw %q, want %s", r, wantUp)
				}
			}
			evs := e.waitEvents(ocsf.ClassHTTPActivity, 3)
			if len(evs) != 3 {
				t.Fatalf("%d HTTP events, want 3", len(evs))
			}
			for _, ev := range evs {
				if d := num(get(ev, "unmapped", "egress_proxy", "bytes_down")); d != n {
					t.Errorf("event bytes_down %d, want %d", d, n)
				}
			}
		})
	}
}

// A client that leaves in the middle of a bulk download ends the
// request: its event is written, with the bytes that were relayed.
func TestInspectedBulkDownloadClientLeaves(t *testing.T) {
	const n = 64 << 20
	e := newInspectEnv(t, false, func(port int) string { return restPolicy(port, "read-only", "") }, true)
	cl := e.client(false)
	resp, err := cl.Get(e.url("/bulk?n=" + strconv.Itoa(n)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // closes the connection: the body was not read to its end
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if evs := e.rec.ByClass(ocsf.ClassHTTPActivity); len(evs) == 1 {
			if d := num(get(evs[0], "unmapped", "egress_proxy", "bytes_down")); d < 1<<20 || d >= n {
				t.Errorf("event bytes_down %d, want between 1 MiB and %d", d, n)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no event for the abandoned download")
}

// countingConn counts the reads and writes that reach a connection.
type countingConn struct {
	net.Conn
	reads, writes atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// tlsPair is a TLS connection over loopback whose server side (the
// proxy's client leg: tls.Server over a batchConn over a countingConn)
// is passed to serve once the handshake is done; the counts of the
// countingConn returned start after the handshake.
func tlsPair(t *testing.T, protos []string, serve func(tc *tls.Conn, bc *batchConn)) (*tls.Conn, *countingConn) {
	t.Helper()
	ca, err := tlsca.New(tlsca.Options{Name: "batch-test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan *countingConn, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ready)
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		cc := &countingConn{Conn: c}
		bc := &batchConn{Conn: cc}
		tc := tls.Server(bc, &tls.Config{NextProtos: protos, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf("batch.test") }})
		if tc.Handshake() != nil {
			return
		}
		cc.reads.Store(0)
		cc.writes.Store(0)
		ready <- cc
		serve(tc, bc)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	tc := tls.Client(c, &tls.Config{ServerName: "batch.test", RootCAs: pool, NextProtos: protos})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close(); wg.Wait() })
	cc := <-ready
	if cc == nil {
		t.Fatal("server handshake failed")
	}
	return tc, cc
}

// The h2 client leg sends each frame write in one socket write, not one
// per TLS record: a 16 KiB DATA frame and its 9-byte header are two
// records (and crypto/tls starts a connection with small records), which
// without the batch were two writes or more.
func TestH2ClientLegOneWritePerFrame(t *testing.T) {
	const size = 1 << 20
	tc, server := tlsPair(t, []string{"h2"}, func(tc *tls.Conn, bc *batchConn) {
		serveH2(tc, bc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.Write(make([]byte, size))
		}), time.Minute, newH2Watch(func(string, string, string) {}))
	})
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://batch.test/", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n != size || err != nil {
		t.Fatalf("read %d of %d bytes: %v", n, size, err)
	}
	got, frames := server.writes.Load(), size/(16<<10)
	t.Logf("%d socket writes for %d DATA frames", got, frames)
	if got > int64(frames+frames/8+8) {
		t.Errorf("%d socket writes for a body of %d DATA frames: the h2 client leg's TLS records are not batched", got, frames)
	}
}

// One application write of a bulk copy (bulkCopySize) leaves the HTTP/1.1
// client leg in one socket write: maxBatch holds its records.
func TestBulkWriteIsOneSocketWrite(t *testing.T) {
	const writes = 8
	tc, server := tlsPair(t, []string{"http/1.1"}, func(tc *tls.Conn, bc *batchConn) {
		w := tlsBatchWriter{tc: tc, bc: bc}
		buf := make([]byte, bulkCopySize)
		for range writes {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})
	if n, err := io.CopyN(io.Discard, tc, writes*bulkCopySize); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	if got := server.writes.Load(); got != writes {
		t.Errorf("%d socket writes for %d application writes of %d bytes", got, writes, bulkCopySize)
	}
}

// streamConn is a socket holding data: each Read returns what is asked
// for, or at most per bytes when per > 0 (a trickling upstream).
type streamConn struct {
	net.Conn
	data  []byte
	per   int
	asked []int // len(p) of every Read
}

func (s *streamConn) Read(p []byte) (int, error) {
	s.asked = append(s.asked, len(p))
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if s.per > 0 {
		n = min(n, s.per)
	}
	n = copy(p, s.data[:min(n, len(s.data))])
	s.data = s.data[n:]
	return n, nil
}

// bigReadConn reads a bulk stream in upReadSize pieces, hands crypto/tls
// (here a reader asking 16.5 KiB at a time, as it does) every byte in
// order, and holds no buffer once the bytes are handed on; a trickling
// upstream is read straight into the caller's buffer, so a connection
// waiting for its upstream holds none.
func TestBigReadConn(t *testing.T) {
	const total = 8<<20 + 333
	data := make([]byte, total)
	for i := range data {
		data[i] = bulkByte(i)
	}
	read := func(c *bigReadConn) []byte {
		var out []byte
		buf := make([]byte, 16<<10+512)
		for {
			n, err := c.Read(buf)
			out = append(out, buf[:n]...)
			if c.pending() != (c.bp != nil) {
				t.Fatalf("pending %v with buffer %v", c.pending(), c.bp != nil)
			}
			if err != nil {
				return out
			}
		}
	}
	t.Run("bulk", func(t *testing.T) {
		s := &streamConn{data: data}
		c := &bigReadConn{Conn: s}
		if got := read(c); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes read, content equal %v", len(got), bytes.Equal(got, data))
		}
		big := 0
		for _, n := range s.asked {
			if n == upReadSize {
				big++
			}
		}
		// One 16.5 KiB read starts each run of big reads after a short one;
		// here only the last read is short.
		if big != total/upReadSize || len(s.asked) > 2*big+3 {
			t.Errorf("%d socket reads (%d of %d bytes) for %d bytes", len(s.asked), big, upReadSize, total)
		}
		if c.bp != nil {
			t.Error("buffer held after the stream ended")
		}
	})
	t.Run("trickle", func(t *testing.T) {
		s := &streamConn{data: data[:1<<20], per: 1000}
		c := &bigReadConn{Conn: s}
		if got := read(c); !bytes.Equal(got, data[:1<<20]) {
			t.Fatal("content differs")
		}
		for _, n := range s.asked {
			if n == upReadSize {
				t.Fatal("a short read was followed by a pooled big read")
			}
		}
	})
}

// scriptedBody returns its chunks one per Read; pending reports what
// pend says about the time after the chunk just returned.
type scriptedBody struct {
	chunks [][]byte
	pend   []bool
	i      int
	before func(i int) // called at the start of Read i
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	if b.before != nil {
		b.before(b.i)
	}
	if b.i == len(b.chunks) {
		return 0, io.EOF
	}
	n := copy(p, b.chunks[b.i])
	if n < len(b.chunks[b.i]) {
		b.chunks[b.i] = b.chunks[b.i][n:]
		return n, nil
	}
	b.i++
	return n, nil
}

func (b *scriptedBody) pending() bool { return b.i > 0 && b.i < len(b.chunks) && b.pend[b.i-1] }

type recordingWriter struct {
	h       http.Header
	writes  []int
	total   int
	flushes int
}

func (w *recordingWriter) Header() http.Header { return w.h }
func (w *recordingWriter) WriteHeader(int)     {}
func (w *recordingWriter) Flush()              { w.flushes++ }
func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	w.total += len(p)
	return len(p), nil
}

// flushCopy gathers a sized body into bulkCopySize writes only while the
// next bytes are already there: whatever was read is written before a
// read that may wait for the upstream. Streamed bodies and bodies that
// cannot tell are written read by read, as before.
func TestFlushCopyGathersWhatIsThere(t *testing.T) {
	chunks := func(n, size int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = make([]byte, size)
		}
		return out
	}
	const k = 16 << 10
	t.Run("bulk", func(t *testing.T) {
		pend := make([]bool, 40)
		for i := range pend {
			pend[i] = true
		}
		w := &recordingWriter{h: http.Header{}}
		n := flushCopy(w, &scriptedBody{chunks: chunks(40, k), pend: pend}, false)
		want := []int{bulkCopySize, bulkCopySize, 40*k - 2*bulkCopySize}
		if n != 40*k || fmt.Sprint(w.writes) != fmt.Sprint(want) {
			t.Errorf("copied %d bytes in writes %v, want %v", n, w.writes, want)
		}
	})
	t.Run("slow upstream", func(t *testing.T) {
		// Bytes stop being there after chunks 3 and 7: everything read so
		// far is written before the next read.
		pend := []bool{true, true, false, true, true, true, false, true, true, false}
		w := &recordingWriter{h: http.Header{}}
		b := &scriptedBody{chunks: chunks(10, k), pend: pend}
		b.before = func(i int) {
			if i > 0 && !pend[i-1] && w.total != i*k {
				t.Errorf("read %d starts with %d of %d bytes written", i, w.total, i*k)
			}
		}
		flushCopy(w, b, false)
		if fmt.Sprint(w.writes) != fmt.Sprint([]int{3 * k, 4 * k, 3 * k}) {
			t.Errorf("writes %v", w.writes)
		}
	})
	t.Run("streamed", func(t *testing.T) {
		pend := []bool{true, true, true, true}
		w := &recordingWriter{h: http.Header{}}
		flushCopy(w, &scriptedBody{chunks: chunks(4, k), pend: pend}, true)
		if len(w.writes) != 4 || w.flushes != 4 {
			t.Errorf("streamed body: %d writes, %d flushes for 4 reads", len(w.writes), w.flushes)
		}
	})
	t.Run("cannot tell", func(t *testing.T) {
		w := &recordingWriter{h: http.Header{}}
		flushCopy(w, io.MultiReader(bytes.NewReader(make([]byte, k)), bytes.NewReader(make([]byte, k))), false)
		if len(w.writes) != 2 || w.flushes != 0 {
			t.Errorf("%d writes, %d flushes for 2 reads", len(w.writes), w.flushes)
		}
	})
}
