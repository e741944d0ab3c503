//go:build linux

package sandboxnet

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/palisade-sandbox/palisade/pkg/l7/websocket"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const wsPort = 8444

// wsNetwork is the test policy's WebSocket entry: subscribe messages
// for ticker.* channels pass, anything else closes with 1008.
const wsNetwork = `  ws:
    endpoints:
      - host: allowed.test
        port: %d
        protocol: websocket
        rules: [{allow: {method: GET, path: /stream}}]
        websocket:
          text:
            - json: {type: subscribe, channel: "ticker.*"}
    binaries:
      - path: /usr/bin/python3*
      - path: %s
`

// wsServer is a WebSocket echo server in the test internet: it records
// every message it receives, the extensions each upgrade offered, and
// the close codes it gets.
type wsServer struct {
	mu    sync.Mutex
	msgs  []string
	exts  []string
	codes []int
}

func (s *wsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "websocket" {
		http.Error(w, "want an upgrade", 400)
		return
	}
	s.mu.Lock()
	s.exts = append(s.exts, r.Header.Get("Sec-WebSocket-Extensions"))
	s.mu.Unlock()
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", websocket.AcceptKey(r.Header.Get("Sec-WebSocket-Key")))
	brw.Flush()
	for {
		h, _, err := websocket.ReadHeader(brw.Reader)
		if err != nil {
			return
		}
		pay := make([]byte, h.Length)
		if _, err := io.ReadFull(brw.Reader, pay); err != nil {
			return
		}
		websocket.Unmask(pay, h.Mask, 0)
		s.mu.Lock()
		switch h.Opcode {
		case websocket.OpClose:
			if len(pay) >= 2 {
				s.codes = append(s.codes, int(binary.BigEndian.Uint16(pay)))
			}
			s.mu.Unlock()
			return
		case websocket.OpText:
			s.msgs = append(s.msgs, string(pay))
		}
		s.mu.Unlock()
		if h.Opcode == websocket.OpText {
			c.Write(append([]byte{0x81, byte(len(pay))}, pay...)) // short test messages
		}
	}
}

// wsPython is the python3-websockets client (Debian's 10.4, which has
// no proxy support: the CONNECT is made by hand and the socket handed
// over). It offers permessage-deflate, as it does by default.
const wsPython = `
import asyncio, os, socket, ssl, sys
from urllib.parse import urlparse
import websockets
p = urlparse(os.environ["HTTPS_PROXY"])
s = socket.create_connection((p.hostname, p.port), timeout=20)
s.sendall(b"CONNECT allowed.test:8444 HTTP/1.1\r\nHost: allowed.test:8444\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
if b" 200 " not in head.split(b"\r\n")[0]:
    print("py_connect=" + head.split(b"\r\n")[0].decode()); sys.exit(0)
s.settimeout(None)
async def main():
    async with websockets.connect("wss://allowed.test:8444/stream", sock=s, ssl=ssl.create_default_context(), server_hostname="allowed.test") as ws:
        await ws.send('{"type":"subscribe","channel":"ticker.btc"}')
        print("py_echo=" + await asyncio.wait_for(ws.recv(), 20))
        await ws.send('{"type":"subscribe","channel":"orders.all"}')
        try:
            print("py_after=" + await asyncio.wait_for(ws.recv(), 20))
        except websockets.ConnectionClosed as e:
            print("py_close=%d" % e.code)
asyncio.run(main())
`

// TestHelperWSH2Client is the HTTP/2 WebSocket client run inside the
// sandbox (a copy of this test binary): through the proxy's CONNECT
// tunnel it opens an h2 connection and an extended CONNECT (RFC 8441)
// to $WSH2, sends an allowed message and a refused one, and prints the
// echo and the close code. It does nothing unless WSH2 is set.
func TestHelperWSH2Client(t *testing.T) {
	target := os.Getenv("WSH2")
	if target == "" {
		return
	}
	fail := func(what string, err error) { fmt.Printf("h2_error=%s: %v\n", what, err); os.Exit(0) }
	pu, err := url.Parse(os.Getenv("HTTPS_PROXY"))
	if err != nil {
		fail("proxy", err)
	}
	c, err := net.DialTimeout("tcp", pu.Host, 20*time.Second)
	if err != nil {
		fail("dial", err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", wsPort, wsPort)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		fail("connect", fmt.Errorf("%v %v", resp, err))
	}
	pool, _ := x509.SystemCertPool() // SSL_CERT_FILE: the sandbox's bundle
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", RootCAs: pool, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		fail("tls", err)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		fail("h2", err)
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodConnect, target, pr)
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	resp, err = cc.RoundTrip(req)
	if err != nil {
		fail("extended connect", err)
	}
	fmt.Printf("h2_status=%d\n", resp.StatusCode)
	rd := bufio.NewReader(resp.Body)
	send := func(msg string) {
		key := [4]byte{9, 8, 7, 6}
		p := []byte(msg)
		websocket.Unmask(p, key, 0)
		pw.Write(append([]byte{0x81, 0x80 | byte(len(p)), key[0], key[1], key[2], key[3]}, p...))
	}
	read := func() (byte, []byte, error) {
		h, _, err := websocket.ReadHeader(rd)
		if err != nil {
			return 0, nil, err
		}
		p := make([]byte, h.Length)
		_, err = io.ReadFull(rd, p)
		return h.Opcode, p, err
	}
	send(`{"type":"subscribe","channel":"ticker.eth"}`)
	if _, p, err := read(); err == nil {
		fmt.Printf("h2_echo=%s\n", p)
	}
	send(`{"channel":"ticker.eth"}`)
	for {
		op, p, err := read()
		if err != nil {
			fmt.Printf("h2_end=%v\n", err)
			return
		}
		if op == websocket.OpClose && len(p) >= 2 {
			fmt.Printf("h2_close=%d\n", binary.BigEndian.Uint16(p))
			return
		}
	}
}

// WebSocket message rules in a real sandbox, over HTTP/1.1 (Debian's
// python3-websockets) and HTTP/2 extended CONNECT (a Go client): the
// allowed message shape is echoed, the refused one closes the
// connection with 1008 and never reaches the server, which gets the
// 1008 too; permessage-deflate is never offered to the server. While the
// sandbox runs, sandbox-supervisor status shows the endpoint's last
// result, and logs shows its Endpoint Status events.
func TestWebSocketRulesInSandbox(t *testing.T) {
	testutil.RequireData(t, "python3-websockets", statErr("/usr/lib/python3/dist-packages/websockets"))
	l := newLab(t, "")
	d, err := os.MkdirTemp("/var/tmp", "palisade-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755)
	helper := filepath.Join(d, "wsclient")
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(helper, self, 0o755); err != nil {
		t.Fatal(err)
	}
	head := strings.Replace(labPolicy[:strings.Index(labPolicy, "  web:")], "/etc]", "/etc, "+d+"]", 1)
	l.write(head + fmt.Sprintf(wsNetwork, wsPort, helper))
	srv := &wsServer{}
	ln, err := l.inet.Listen("tcp", fmt.Sprintf(":%d", wsPort))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, TLSConfig: l.inet.TLSConfig(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go hs.Serve(tls.NewListener(ln, hs.TLSConfig))
	t.Cleanup(func() { hs.Close() })

	name := "ws-" + randHex(4)
	done := filepath.Join(l.wd, "done")
	pyFile := filepath.Join(l.wd, "ws.py")
	if err := os.WriteFile(pyFile, []byte(wsPython), 0o644); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`/usr/bin/python3 %s >/tmp/py 2>&1; grep '^py_' /tmp/py; echo "pyerr=$(grep -v '^py_' /tmp/py | tail -3 | tr '\n' '|')"
WSH2=https://allowed.test:%d/stream %s -test.run='^TestHelperWSH2Client$' 2>&1 | grep '^h2_'
echo ran=1
i=0; while [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`, pyFile, wsPort, helper, done)
	cmd := exec.Command(l.sup, "run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--name", name, "--upstream-ca-bundle", l.inet.CAFile(), "--workdir", l.wd,
		"--", "/bin/sh", "-c", script)
	cmd.Stderr = testutil.LogWriter(t, "sandbox-supervisor")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.WriteFile(done, nil, 0o644)
		cmd.Wait()
	}()
	r := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			r[k] = v
		}
		if r["ran"] == "1" {
			break
		}
	}
	t.Logf("sandbox output: %v", r)
	want := map[string]string{
		"py_echo": `{"type":"subscribe","channel":"ticker.btc"}`, "py_close": "1008",
		"h2_status": "200", "h2_echo": `{"type":"subscribe","channel":"ticker.eth"}`, "h2_close": "1008",
	}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("%s = %q, want %q", k, r[k], v)
		}
	}
	srv.mu.Lock()
	msgs, exts, codes := srv.msgs, srv.exts, srv.codes
	srv.mu.Unlock()
	if len(msgs) != 2 || strings.Contains(strings.Join(msgs, " "), "orders") || len(codes) != 2 || codes[0] != 1008 || codes[1] != 1008 {
		t.Errorf("the server received %q and close codes %v: want the two allowed messages, and 1008 twice", msgs, codes)
	}
	for _, x := range exts {
		if x != "" {
			t.Errorf("the server was offered extensions %q: permessage-deflate must be negotiated away", x)
		}
	}
	// status, while the sandbox runs: the endpoint's last result.
	var st struct {
		Endpoints []struct{ ID, Address, Protocol, Result string }
	}
	waitFor(t, 20*time.Second, func() bool {
		b, _ := exec.Command(l.sup, "status", "--json", "--state-dir", l.state, name).Output()
		return json.Unmarshal(b, &st) == nil && len(st.Endpoints) == 1 && st.Endpoints[0].Result == "policy_denied"
	})
	if e := st.Endpoints[0]; e.ID != "ws.endpoints[0]" || e.Address != fmt.Sprintf("allowed.test:%d", wsPort) || e.Protocol != "websocket" {
		t.Errorf("status endpoints: %+v", st.Endpoints)
	}
	human, _ := exec.Command(l.sup, "status", "--state-dir", l.state, name).Output()
	if !strings.Contains(string(human), fmt.Sprintf("endpoint:      ws.endpoints[0] allowed.test:%d websocket policy_denied", wsPort)) {
		t.Errorf("status shows no endpoint line:\n%s", human)
	}
	logs, _ := exec.Command(l.sup, "logs", "--state-dir", l.state, name).Output()
	for _, res := range []string{"http_response_received", "policy_denied"} {
		if !strings.Contains(string(logs), fmt.Sprintf("endpoint ws.endpoints[0] (allowed.test:%d, websocket): %s", wsPort, res)) {
			t.Errorf("logs has no Endpoint Status line for %s:\n%s", res, logs)
		}
	}
	denied, _ := exec.Command(l.sup, "logs", "--denied", "--state-dir", l.state, name).Output()
	if !strings.Contains(string(denied), "websocket_no_rule") {
		t.Errorf("logs --denied names no refused message:\n%s", denied)
	}
}

func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}
