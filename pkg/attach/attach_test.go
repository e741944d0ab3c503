package attach

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReplayKeepsTheLastMiB(t *testing.T) {
	m := New(io.Discard)
	data := bytes.Repeat([]byte("0123456789abcdef"), 100000) // 1.6 MB
	m.Copy(bytes.NewReader(data))
	if got := m.Replay(); !bytes.Equal(got, data[len(data)-ReplayBytes:]) {
		t.Fatalf("replay of %d bytes is not the last %d of the output", len(got), ReplayBytes)
	}
}

func TestStdinLeaseIsOneClientAtATime(t *testing.T) {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	outR, outW := io.Pipe()
	m := New(inW)
	go m.Copy(outR)
	defer outW.Close()
	ln, err := Listen(filepath.Join(t.TempDir(), "attach.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go m.Serve(ln)
	outW.Write([]byte("hello\n"))
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if l, err := r.ReadString('\n'); l != "hello\n" {
			t.Fatalf("replay %q, %v", l, err)
		}
		return c, r
	}
	// The mux decides whose bytes reach stdin when it reads them: the
	// test waits for it to have dropped b's line, and for the lease to
	// have passed, rather than sleeping.
	waitMux := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			m.mu.Lock()
			ok := cond()
			m.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 10 s, still not: %s", what)
			}
		}
	}
	inR.SetReadDeadline(time.Now().Add(30 * time.Second))
	a, _ := dial()
	b, br := dial()
	defer b.Close()
	b.Write([]byte("from-b\n"))
	waitMux("b's line dropped", func() bool { return m.discarded == int64(len("from-b\n")) })
	a.Write([]byte("from-a\n"))
	in := bufio.NewReader(inR)
	if l, err := in.ReadString('\n'); l != "from-a\n" {
		t.Fatalf("stdin got %q (%v), want only the lease holder's line", l, err)
	}
	a.Close()
	waitMux("the lease to pass to b", func() bool { return len(m.clients) == 1 && m.lease != nil })
	b.Write([]byte("from-b-again\n"))
	if l, err := in.ReadString('\n'); l != "from-b-again\n" {
		t.Fatalf("after the holder left, stdin got %q (%v)", l, err)
	}
	outW.Write([]byte("live\n"))
	if l, _ := br.ReadString('\n'); l != "live\n" {
		t.Fatalf("live output %q", l)
	}
}
