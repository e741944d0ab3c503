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
	a, _ := dial()
	b, br := dial()
	defer b.Close()
	b.Write([]byte("from-b\n"))
	time.Sleep(50 * time.Millisecond)
	a.Write([]byte("from-a\n"))
	in := bufio.NewReader(inR)
	if l, _ := in.ReadString('\n'); l != "from-a\n" {
		t.Fatalf("stdin got %q, want only the lease holder's line", l)
	}
	a.Close()
	time.Sleep(50 * time.Millisecond)
	b.Write([]byte("from-b-again\n"))
	if l, _ := in.ReadString('\n'); l != "from-b-again\n" {
		t.Fatalf("after the holder left, stdin got %q", l)
	}
	outW.Write([]byte("live\n"))
	if l, _ := br.ReadString('\n'); l != "live\n" {
		t.Fatalf("live output %q", l)
	}
}
