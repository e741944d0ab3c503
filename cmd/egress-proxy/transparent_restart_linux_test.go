//go:build linux

package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/nettest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// A client port that made a transparent connection before the proxy
// restarted makes one again to the restarted proxy, as
// BenchmarkAgainstBaseline's transparent row does at its halfway swap: a
// proxy started again hands out another synthetic address (another
// epoch), so the new connection has another original destination and
// the same client port while the first one's conntrack entry is in
// TIME_WAIT. With the bench's redirect to one transparent port the two
// share a reply tuple, the kernel's NAT moves the new connection's source
// port, and the proxy, finding no sandbox socket with that port, refuses
// it (attribution_failed: 3 of 4 runs of the row ended so). Redirected
// to a range of ports, as sandboxnet's fence does, the NAT takes another
// transparent port instead and the connection is attributed and allowed.
// Fails with benchTransparentPorts 1.
func TestBenchTransparentClientPortAcrossRestart(t *testing.T) {
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	testutil.RequireData(t, "/usr/bin/python3 (apt install python3)", err)
	sb := newBenchSandbox(t)
	sb.redirectSynthetic(t)
	const addr = benchHostAddr + ":3128"
	const clientPort = 40125
	var seen [2]string
	for i := range seen {
		events := filepath.Join(t.TempDir(), "events.jsonl")
		sb.startBuildAt(t, testutil.Binary(t, "egress-proxy"), addr, "echo.test", nettest.EchoPort, python,
			append([]string{"--events", events}, benchTransparentArgs()...)...)
		pid := sb.pids[addr]
		seen[i] = net.JoinHostPort(sb.resolvePolicyDNS(t, python, "echo.test").String(), strconv.Itoa(nettest.EchoPort))
		var out bytes.Buffer
		c := sb.start(t, &out, python, "-c", echoFromPort, strconv.Itoa(clientPort), seen[i])
		if err := c.Wait(); err != nil {
			ev, _ := os.ReadFile(events)
			t.Fatalf("proxy start %d: connection from port %d to %s: %v: %s\nevents:\n%s", i+1, clientPort, seen[i], err, out.String(), ev)
		}
		stopPID(t, pid)
	}
	if seen[0] == seen[1] {
		t.Fatalf("both proxy starts handed out %s: the test needs the restart's new synthetic address", seen[0])
	}
}

// echoFromPort connects from local port argv[1] (SO_REUSEADDR: the port's
// earlier connection may be in TIME_WAIT here) to argv[2] (HOST:PORT),
// makes a 1 KiB echo round trip and closes first.
const echoFromPort = `
import socket, sys
host, port = sys.argv[2].rsplit(":", 1)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.settimeout(5)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.connect((host, int(port)))
s.sendall(b"x" * 1024)
got = 0
while got < 1024:
    d = s.recv(65536)
    if not d:
        sys.exit("closed after %d bytes of the echo" % got)
    got += len(d)
s.close()
`
