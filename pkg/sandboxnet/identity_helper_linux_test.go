//go:build linux

package sandboxnet

import (
	"bufio"
	"fmt"
	"net"
	"os"
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
//	handoff <unix path> <flood per CPU>: connects to the proxy (from
//	  HTTP_PROXY), passes the socket over the Unix socket at path
//	  (SCM_RIGHTS), closes its own copy, makes <flood> refused TCP
//	  connects on each CPU (each leaves a connect record the kernel never
//	  removes, evicting older ones), then writes "go" to the receiver and
//	  waits for its "done".
//	recv <unix path> <name>: listens on path, receives one socket, waits
//	  for "go", sends "GET http://allowed.test/<name>" on it and prints
//	  "<name>=<status line>|<body>", then answers "done".
//	sleep: sleeps a minute (an allowed process that merely exists).
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
	case mode == "handoff" && len(rest) == 2:
		n, err := strconv.Atoi(rest[1])
		if err != nil {
			return err
		}
		return helperHandoff(rest[0], n)
	case mode == "recv" && len(rest) == 2:
		return helperRecv(rest[0], rest[1])
	case mode == "sleep" && len(rest) == 0:
		time.Sleep(time.Minute)
		return nil
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

func helperHandoff(path string, flood int) error {
	addr, err := proxyAddr()
	if err != nil {
		return err
	}
	pc, err := net.Dial("tcp", addr)
	if err != nil {
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

func helperRecv(path, name string) error {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetDeadline(time.Now().Add(30 * time.Second))
	uc, err := ln.AcceptUnix()
	if err != nil {
		return err
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := uc.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return fmt.Errorf("control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return fmt.Errorf("rights: %v", err)
	}
	conn, err := net.FileConn(os.NewFile(uintptr(fds[0]), "handed"))
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
