//go:build linux

package sandboxnet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// identityHelperArg makes the test binary, copied into a sandbox, act as
// one of the processes of the identity tests instead of running tests.
const identityHelperArg = "identity-helper"

// identityHelper runs "<binary> identity-helper <mode> <args...>" inside
// a sandbox and exits. Modes:
//
//	handoff <unix path> <flood per CPU> [host:port]: connects to the
//	  proxy (from HTTP_PROXY), or to host:port by name without it (policy
//	  DNS and the transparent listener), passes the socket over the Unix
//	  socket at path
//	  (SCM_RIGHTS), closes its own copy, makes <flood> refused TCP
//	  connects on each CPU (each leaves a connect record the kernel never
//	  removes, evicting older ones), then writes "go" to the receiver and
//	  waits for its "done".
//	recv <unix path> <name>: listens on path, receives one socket, waits
//	  for "go", sends "GET http://allowed.test/<name>" on it and prints
//	  "<name>=<status line>|<body>", then answers "done".
//	get <host:port> <name>: connects to host:port by name without the
//	  proxy, sends "GET http://allowed.test/<name>" and prints
//	  "<name>=<status line>|<body>".
//	sleep: sleeps a minute (an allowed process that merely exists).
//	decided <unix path> connect|forward|transparent keep|close: gets a
//	  connection decided for itself — a CONNECT tunnel to allowed.test:80,
//	  a forwarded keep-alive request, or a connection to allowed.test:80
//	  by name without the proxy (policy DNS, the transparent listener) —
//	  and prints "first=<result>"; starts
//	  a child (descendant) that sends its own request on the socket
//	  ("child=<result>"); then hands the socket over the Unix socket at
//	  path to a sibling (SCM_RIGHTS), keeping or closing its copy, and
//	  waits for the sibling's "done".
//	decidedcode <file>: gets a CONNECT tunnel to allowed.test:80 decided
//	  for itself ("first=<result>"), then maps file executable and sends
//	  a request for /after-code ("aftercode=ok" or "=errno <n>").
//	child <what>: sends a request for /child on fd 3 and prints
//	  "child=<result>".
//	sibling <unix path> write|sendmsg|sendfile|splice: receives a socket
//	  over path, sends a request for /stolen-<how> on it by that system
//	  call and prints "<how>=ok" or "<how>=errno <n>", then whether the
//	  connection still answers ("<how>_after=...").
func identityHelper(args []string) {
	if err := runIdentityHelper(args); err != nil {
		fmt.Fprintf(os.Stderr, "identity helper %v: %v\n", args, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runIdentityHelper(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no mode")
	}
	switch mode, rest := args[0], args[1:]; {
	case mode == "handoff" && (len(rest) == 2 || len(rest) == 3):
		n, err := strconv.Atoi(rest[1])
		if err != nil {
			return err
		}
		target := ""
		if len(rest) == 3 {
			target = rest[2]
		}
		return helperHandoff(rest[0], n, target)
	case mode == "get" && len(rest) == 2:
		c, err := net.DialTimeout("tcp", rest[0], 10*time.Second)
		if err != nil {
			fmt.Printf("%s=error %v\n", rest[1], err)
			return nil
		}
		defer c.Close()
		fmt.Printf("%s=%s\n", rest[1], request(c, "GET http://allowed.test/"+rest[1]+" HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"))
		return nil
	case mode == "recv" && len(rest) == 2:
		return helperRecv(rest[0], rest[1])
	case mode == "sleep" && len(rest) == 0:
		time.Sleep(time.Minute)
		return nil
	case mode == "decided" && len(rest) == 3:
		return helperDecided(rest[0], rest[1], rest[2])
	case mode == "decidedcode" && len(rest) == 1:
		return helperDecidedCode(rest[0])
	case mode == "child" && len(rest) == 1:
		return helperChild(rest[0])
	case mode == "sibling" && len(rest) == 2:
		return helperSibling(rest[0], rest[1])
	default:
		return fmt.Errorf("unknown mode or wrong arguments")
	}
}

// proxyAddr is the proxy's address from the sandbox's HTTP_PROXY.
func proxyAddr() (string, error) {
	u := os.Getenv("HTTP_PROXY")
	addr, ok := strings.CutPrefix(u, "http://")
	if !ok {
		return "", fmt.Errorf("HTTP_PROXY %q", u)
	}
	return strings.TrimSuffix(addr, "/"), nil
}

// dialUnix dials path, waiting up to 10 s for its listener.
func dialUnix(path string) (*net.UnixConn, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func helperHandoff(path string, flood int, target string) error {
	addr := target
	if addr == "" {
		var err error
		if addr, err = proxyAddr(); err != nil {
			return err
		}
	}
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		// (A transparent connection can be refused before connect(2)
		// returns.) Let the receiver go rather than wait for a socket.
		if uc, uerr := dialUnix(path); uerr == nil {
			uc.Close()
		}
		return err
	}
	f, err := pc.(*net.TCPConn).File()
	pc.Close()
	if err != nil {
		return err
	}
	uc, err := dialUnix(path)
	if err != nil {
		return err
	}
	if _, _, err := uc.WriteMsgUnix([]byte("s"), unix.UnixRights(int(f.Fd())), nil); err != nil {
		return err
	}
	f.Close()
	if err := floodRecords(flood); err != nil {
		return err
	}
	if _, err := uc.Write([]byte("go\n")); err != nil {
		return err
	}
	uc.SetReadDeadline(time.Now().Add(60 * time.Second))
	_, err = bufio.NewReader(uc).ReadString('\n')
	return err
}

// floodRecords makes n TCP connects to 224.0.0.1:80 on each CPU: the
// cgroup connect hook records each, then the route lookup refuses it
// before sock_ops sees the socket, so nothing deletes the record. The
// LRU map hands a CPU's new entries to the list eviction works on only
// at that CPU's next inserts, so every CPU takes its turn.
func floodRecords(n int) error {
	if n == 0 {
		return nil
	}
	runtime.LockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return err
	}
	sa := &unix.SockaddrInet4{Port: 80, Addr: [4]byte{224, 0, 0, 1}}
	for cpu := range 1024 {
		if !all.IsSet(cpu) {
			continue
		}
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return err
		}
		for range n {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			unix.Connect(fd, sa)
			unix.Close(fd)
		}
	}
	return nil
}

// recvFD listens on the Unix socket path, accepts one connection and
// receives one descriptor over it (SCM_RIGHTS).
func recvFD(path string) (int, *net.UnixConn, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return -1, nil, err
	}
	defer ln.Close()
	ln.SetDeadline(time.Now().Add(30 * time.Second))
	uc, err := ln.AcceptUnix()
	if err != nil {
		return -1, nil, err
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := uc.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return -1, nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, nil, fmt.Errorf("control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, nil, fmt.Errorf("rights: %v", err)
	}
	return fds[0], uc, nil
}

func helperRecv(path, name string) error {
	fd, uc, err := recvFD(path)
	if err != nil {
		return err
	}
	conn, err := net.FileConn(os.NewFile(uintptr(fd), "handed"))
	if err != nil {
		return err
	}
	br := bufio.NewReader(uc)
	uc.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := br.ReadString('\n'); err != nil {
		return err
	}
	fmt.Printf("%s=%s\n", name, request(conn, "GET http://allowed.test/"+name+" HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"))
	_, err = uc.Write([]byte("done\n"))
	return err
}

// request sends req on c and returns the response's status line and
// body ("<status>|<body>"), or "error <err>".
func request(c net.Conn, req string) string {
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return "error " + err.Error()
	}
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil {
		return "error " + err.Error()
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
	}
	body, _ := bufio.NewReader(br).ReadString(0)
	return strings.TrimSpace(status) + "|" + strings.TrimSpace(body)
}

// tunnelRequest and forwardRequest are the requests a process sends on
// a decided CONNECT tunnel and on a forwarded keep-alive connection.
func tunnelRequest(path string) string {
	return "GET /" + path + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
}

func forwardRequest(path string) string {
	return "GET http://allowed.test/" + path + " HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
}

// response reads one HTTP response (status line, headers, a body of
// Content-Length bytes) and returns "<status>|<body>", or "error <err>".
func response(br *bufio.Reader) string {
	status, err := br.ReadString('\n')
	if err != nil {
		return "error " + err.Error()
	}
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "error " + err.Error()
		}
		if line == "\r\n" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "content-length") {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return "error " + err.Error()
	}
	return strings.TrimSpace(status) + "|" + strings.TrimSpace(string(body))
}

func helperDecided(path, kind, keep string) error {
	addr := "allowed.test:80" // transparent: by name, without the proxy
	if kind != "transparent" {
		var err error
		if addr, err = proxyAddr(); err != nil {
			return err
		}
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	req := forwardRequest
	if kind != "forward" {
		req = tunnelRequest
	}
	if kind == "connect" {
		if err := openTunnel(c, br); err != nil {
			return err
		}
	}
	fmt.Fprint(c, req("first"))
	fmt.Printf("first=%s\n", response(br))
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		return err
	}
	// A descendant: the decided process's child, with the socket.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, identityHelperArg, "child", kind)
	child.ExtraFiles, child.Stdout, child.Stderr = []*os.File{f}, os.Stdout, os.Stderr
	if err := child.Run(); err != nil {
		return fmt.Errorf("child: %w", err)
	}
	uc, err := dialUnix(path)
	if err != nil {
		return err
	}
	if _, _, err := uc.WriteMsgUnix([]byte("s"), unix.UnixRights(int(f.Fd())), nil); err != nil {
		return err
	}
	if keep == "close" {
		f.Close()
		c.Close()
	}
	uc.SetReadDeadline(time.Now().Add(60 * time.Second))
	_, err = bufio.NewReader(uc).ReadString('\n')
	return err
}

func helperChild(kind string) error {
	c, err := net.FileConn(os.NewFile(3, "decided"))
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	req := forwardRequest
	if kind != "forward" {
		req = tunnelRequest
	}
	if _, err := c.Write([]byte(req("child"))); err != nil {
		fmt.Printf("child=error %v\n", err)
		return nil
	}
	fmt.Printf("child=%s\n", response(bufio.NewReader(c)))
	return nil
}

func helperSibling(path, how string) error {
	fd, uc, err := recvFD(path)
	if err != nil {
		return err
	}
	// Both kinds of decided connection take either request line: the
	// tunnel's upstream reads an origin-form one, the proxy an
	// absolute-form one.
	req := []byte(forwardRequest("stolen-" + how))
	if how == "write" || how == "sendmsg" {
		req = []byte(tunnelRequest("stolen-"+how) + forwardRequest("stolen-"+how+"-abs"))
	}
	fmt.Printf("%s=%s\n", how, errnoOf(sendBy(how, fd, req)))
	// The connection is closed for it: a read ends (EOF or reset) soon.
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	n, err := unix.Read(fd, make([]byte, 4096))
	fmt.Printf("%s_after=%d %s\n", how, n, errnoOf(err))
	_, err = uc.Write([]byte("done\n"))
	return err
}

// sendBy sends b on socket fd by the named system call.
func sendBy(how string, fd int, b []byte) error {
	switch how {
	case "write":
		_, err := unix.Write(fd, b)
		return err
	case "sendmsg":
		_, err := unix.SendmsgN(fd, b, nil, nil, 0)
		return err
	case "sendfile", "splice":
		tmp, err := os.CreateTemp("", "req")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		if _, err := tmp.Write(b); err != nil {
			return err
		}
		if how == "sendfile" {
			off := int64(0)
			_, err = unix.Sendfile(fd, int(tmp.Fd()), &off, len(b))
			return err
		}
		var p [2]int
		if err := unix.Pipe(p[:]); err != nil {
			return err
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		if _, err := unix.Write(p[1], b); err != nil {
			return err
		}
		_, err = unix.Splice(p[0], nil, fd, nil, len(b), 0)
		return err
	}
	return fmt.Errorf("send by %q", how)
}

// errnoOf is "ok", "errno <n>" or the error's text.
func errnoOf(err error) string {
	var e unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &e):
		return fmt.Sprintf("errno %d", int(e))
	}
	return err.Error()
}

func helperDecidedCode(file string) error {
	addr, err := proxyAddr()
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	if err := openTunnel(c, br); err != nil {
		return err
	}
	fmt.Fprint(c, tunnelRequest("first"))
	fmt.Printf("first=%s\n", response(br))
	// Code from a file the sandbox can write, mapped after the decision
	// (what dlopen of an engine or a plugin does).
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	if _, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE); err != nil {
		return err
	}
	_, err = c.Write([]byte(tunnelRequest("after-code")))
	fmt.Printf("aftercode=%s\n", errnoOf(err))
	// Until the proxy closed the connection (it names the file from
	// this process's maps while it lives).
	io.Copy(io.Discard, br)
	return nil
}

// openTunnel asks the proxy on c for a CONNECT tunnel to
// allowed.test:80 and reads its 200 answer.
func openTunnel(c net.Conn, br *bufio.Reader) error {
	fmt.Fprint(c, "CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		return fmt.Errorf("CONNECT: %q %v", line, err)
	}
	for line != "\r\n" {
		if line, err = br.ReadString('\n'); err != nil {
			return err
		}
	}
	return nil
}
