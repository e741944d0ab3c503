package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// sinkServer reads each connection to EOF, then writes "ok" and closes.
func sinkServer(b *testing.B) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				bp := sinkBufs.Get().(*[]byte) // large reads keep the sink cheap
				defer sinkBufs.Put(bp)
				buf := *bp
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				io.WriteString(c, "ok")
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

var chunk = make([]byte, 256<<10)

var sinkBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// push writes n bytes, half-closes and waits for the sink's "ok".
func push(b *testing.B, c *net.TCPConn, r io.Reader, n int) {
	for left := n; left > 0; left -= len(chunk) {
		if _, err := c.Write(chunk[:min(left, len(chunk))]); err != nil {
			b.Fatal(err)
		}
	}
	c.CloseWrite()
	ack, err := io.ReadAll(r)
	if err != nil || string(ack) != "ok" {
		b.Fatalf("ack %q %v", ack, err)
	}
}

// BenchmarkTunnelThroughput compares bulk transfer through a CONNECT
// tunnel (splice on both sides) with the same transfer over a direct
// loopback connection, in the same run.
func BenchmarkTunnelThroughput(b *testing.B) {
	const size = 64 << 20
	port := sinkServer(b)
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				b.Fatal(err)
			}
			push(b, c.(*net.TCPConn), c, size)
			c.Close()
		}
	})
	b.Run("proxy", func(b *testing.B) {
		env := newBenchEnv(b, port)
		b.SetBytes(size)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c, br := benchConnect(b, env, port)
			push(b, c, br, size)
			c.Close()
		}
	})
}

// BenchmarkConnectSetup measures one CONNECT round trip (parse,
// attribution, pin, decision, dial, 200) plus close, and one denial.
func BenchmarkConnectSetup(b *testing.B) {
	port := sinkServer(b)
	env := newBenchEnv(b, port)
	b.Run("allowed", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, _ := benchConnect(b, env, port)
			c.Close()
		}
	})
	b.Run("denied", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, err := net.Dial("tcp", env.addr)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT denied.test:%d HTTP/1.1\r\n\r\n", port)
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != 403 {
				b.Fatalf("%v %v", resp, err)
			}
			c.Close()
		}
	})
}

type benchEnv struct{ addr string }

// newBenchEnv is a proxy whose events are marshalled but not validated
// (validation would dominate the measurement).
func newBenchEnv(b *testing.B, port int) *benchEnv {
	env := newEnv(b, policyYAML(port, ""), func(c *Config) { c.Events = ocsf.Discard })
	return &benchEnv{addr: env.addr}
}

func benchConnect(b *testing.B, env *benchEnv, port int) (*net.TCPConn, *bufio.Reader) {
	c, err := net.Dial("tcp", env.addr)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("%v %v", resp, err)
	}
	return c.(*net.TCPConn), br
}
