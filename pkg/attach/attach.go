// Package attach is the main-session multiplexer of a detached sandbox
// (seed 004 "Connect and Logs"): the owner keeps the main process's
// output in a bounded replay buffer (1 MiB, oldest bytes dropped first)
// and its stdin open, and serves `sandbox-supervisor attach` clients on a
// root-only Unix socket. A client first receives the replayed output,
// then the live output; one client at a time holds the stdin lease (its
// bytes reach the main process); the lease passes to the next client
// when its holder goes, and the main process's stdin stays open across
// client disconnects. When the output ends (the main process and every
// holder of its stdout are gone) the clients are disconnected.
package attach

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
)

// ReplayBytes is the size of the replay buffer.
const ReplayBytes = 1 << 20

// Mux relays one main process's output to attached clients and one
// client's input to its stdin.
type Mux struct {
	mu      sync.Mutex
	replay  []byte
	clients map[*client]bool
	lease   *client // the client whose input reaches stdin
	// discarded counts input bytes dropped because their client did not
	// hold the lease (the tests wait on it).
	discarded int64
	stdin     io.Writer
	done      bool
	limit     int
}

type client struct {
	c   net.Conn
	out chan []byte // live output; closed when the mux ends
}

// New returns a Mux writing client input to stdin.
func New(stdin io.Writer) *Mux {
	return &Mux{clients: map[*client]bool{}, stdin: stdin, limit: ReplayBytes}
}

// Copy reads the main process's output from r until EOF, keeping the
// last ReplayBytes bytes and sending each read to every client; then it
// disconnects the clients.
func (m *Mux) Copy(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			m.write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	m.mu.Lock()
	m.done = true
	for c := range m.clients {
		close(c.out)
		delete(m.clients, c)
	}
	m.mu.Unlock()
}

func (m *Mux) write(p []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replay = append(m.replay, p...)
	if over := len(m.replay) - m.limit; over > 0 {
		m.replay = append(m.replay[:0], m.replay[over:]...)
	}
	for c := range m.clients {
		b := append([]byte(nil), p...)
		select {
		case c.out <- b:
		default:
			// A client that does not keep up loses its connection, not
			// the others' output.
			close(c.out)
			delete(m.clients, c)
		}
	}
}

// Replay returns a copy of the replay buffer.
func (m *Mux) Replay() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.replay...)
}

// Serve accepts clients on ln until it is closed.
func (m *Mux) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go m.serve(c)
	}
}

func (m *Mux) serve(conn net.Conn) {
	defer conn.Close()
	c := &client{c: conn, out: make(chan []byte, 256)}
	m.mu.Lock()
	replay := append([]byte(nil), m.replay...)
	done := m.done
	if !done {
		m.clients[c] = true
		if m.lease == nil {
			m.lease = c
		}
	}
	m.mu.Unlock()
	if _, err := conn.Write(replay); err != nil || done {
		m.drop(c)
		return
	}
	go m.input(c)
	for b := range c.out {
		if _, err := conn.Write(b); err != nil {
			break
		}
	}
	m.drop(c)
}

// input copies the client's bytes to stdin while it holds the lease;
// a client without it has its input discarded.
func (m *Mux) input(c *client) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.c.Read(buf)
		if n > 0 {
			m.mu.Lock()
			holds := m.lease == c
			if !holds {
				m.discarded += int64(n)
			}
			m.mu.Unlock()
			if holds {
				m.stdin.Write(buf[:n])
			}
		}
		if err != nil {
			m.drop(c)
			c.c.Close()
			return
		}
	}
}

// drop forgets c and passes its lease to another client.
func (m *Mux) drop(c *client) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.clients[c] {
		delete(m.clients, c)
		close(c.out)
	}
	if m.lease == c {
		m.lease = nil
		for o := range m.clients {
			m.lease = o
			break
		}
	}
}

// Listen creates the attach socket at path, readable by root only.
func Listen(path string) (net.Listener, error) {
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Attach connects to the attach socket at path and relays until the
// sandbox's output ends: its output to stdout, stdin to it (reaching the
// main process while this client holds the lease). It returns when the
// owner closes the connection.
func Attach(path string, stdin io.Reader, stdout io.Writer) error {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer conn.Close()
	if stdin != nil {
		go io.Copy(conn, stdin)
	}
	_, err = io.Copy(stdout, conn)
	return err
}
