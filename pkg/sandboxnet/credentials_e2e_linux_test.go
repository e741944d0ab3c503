//go:build linux

package sandboxnet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// The credentials acceptance (issue 26 items 1 and 2) in a real sandbox:
// the agent's environment holds placeholders; curl, Python's urllib and
// requests call an HTTPS upstream with "Authorization: Bearer
// $API_TOKEN" and the upstream receives the real value; the same
// placeholder to another allowed host is refused (403, a Detection
// Finding); so is it for curl --noproxy '*', which reaches the names
// through policy DNS and the transparent listener (issue 28); a scan of the sandbox's processes (environment, command
// line, memory), of the files it can see and of every event and log
// finds no value.

const credPort = 8443

// credNetwork admits api.test (where the credentials are bound) and
// other.test, both inspected, for curl and python.
const credNetwork = `  api:
    endpoints:
      - host: api.test
        port: 8443
        protocol: rest
        access: full
      - host: other.test
        port: 8443
        protocol: rest
        access: full
    binaries:
      - path: /usr/bin/curl
      - path: /usr/bin/python3*
`

// credScript runs the clients and prints name=value lines; then a
// Python process that read the placeholder prints "done" and waits (at
// most 60 s) for the test to write "stop" while it scans.
const credScript = `
c() { n=$1; shift; printf '%s=' "$n"; curl -s -o /tmp/b -w '%{http_code}' --max-time 20 "$@"; printf ' %s\n' "$(tr -d '\n' < /tmp/b)"; }
printf 'env_token=%s\n' "$API_TOKEN"
c curl_bound -H "Authorization: Bearer $API_TOKEN" "https://api.test:8443/echo/curl?key=$ENV_TOKEN"
c curl_other -H "Authorization: Bearer $API_TOKEN" "https://other.test:8443/echo/curl"
c curl_transparent --noproxy '*' -H "Authorization: Bearer $API_TOKEN" "https://api.test:8443/echo/transparent"
c curl_transparent_other --noproxy '*' -H "Authorization: Bearer $API_TOKEN" "https://other.test:8443/echo/transparent"
printf 'urllib=%s\n' "$(/usr/bin/python3 -c '
import os, urllib.request, urllib.error
r = urllib.request.Request("https://api.test:8443/echo/urllib", headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]})
try:
    print(urllib.request.urlopen(r, timeout=20).status)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode().strip())' 2>&1 | tail -1)"
printf 'requests=%s\n' "$(/usr/bin/python3 -c '
import os, requests
r = requests.get("https://api.test:8443/echo/requests", params={"key": os.environ["ENV_TOKEN"]}, headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}, timeout=20)
print(r.status_code)' 2>&1 | tail -1)"
printf 'requests_other=%s\n' "$(/usr/bin/python3 -c '
import os, requests
r = requests.get("https://other.test:8443/echo/requests", headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}, timeout=20)
print(r.status_code, r.json()["reason"])' 2>&1 | tail -1)"
/usr/bin/python3 -c '
import os, time
t = os.environ["API_TOKEN"]
print("done", flush=True)
for i in range(600):
    if os.path.exists("stop"): break
    time.sleep(0.1)'
`

func TestCredentialPlaceholdersInSandbox(t *testing.T) {
	l := newLab(t, credNetwork)
	testutil.RequireCommand(t, "/usr/bin/python3")
	if _, err := os.Stat("/usr/lib/python3/dist-packages/requests"); err != nil {
		testutil.RequireData(t, "python3-requests (/usr/lib/python3/dist-packages/requests)", err)
	}
	l.hosts = l.inet.HostsFile(map[string]string{"api.test": l.inet.V4[0].String(), "other.test": l.inet.V4[1].String()})
	head := labPolicy[:strings.Index(labPolicy, "  web:")]
	l.write(head + credNetwork)

	secret := "sk-e2e-" + randHex(12)
	envSecret := "env-e2e-" + randHex(12)
	credPath := filepath.Join(l.dir, "credentials.yaml")
	if err := os.WriteFile(credPath, []byte(fmt.Sprintf(`version: 1
providers:
  api:
    credentials:
      API_TOKEN: {value: %q}
      ENV_TOKEN: {env: PALISADE_E2E_ENV_TOKEN}
    endpoints:
      - host: api.test
        port: %d
`, secret, credPort)), 0o600); err != nil {
		t.Fatal(err)
	}

	// The upstream: records the Authorization and the query key it got.
	var mu sync.Mutex
	var got []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Host+r.URL.Path+" auth="+r.Header.Get("Authorization")+" key="+r.URL.Query().Get("key"))
		mu.Unlock()
		w.Write([]byte("ok"))
	})
	ln, err := l.inet.Listen("tcp", fmt.Sprintf(":%d", credPort))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: l.inet.TLSConfig(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })

	name := "cred-" + randHex(4)
	cmd := exec.Command(l.sup, "run", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
		"--state-dir", l.state, "--keep", "--name", name, "--workdir", l.wd, "--log-level", "debug",
		"--upstream-ca-bundle", l.inet.CAFile(), "--credentials", credPath, "--", "/bin/sh", "-c", credScript)
	cmd.Env = append(os.Environ(), "PALISADE_E2E_ENV_TOKEN="+envSecret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	stop := func() { os.WriteFile(filepath.Join(l.wd, "stop"), nil, 0o644) }
	defer stop()
	r := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "done" {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			r[k] = v
		}
	}
	t.Logf("sandbox output: %v", r)

	// While the sandbox runs: its processes, then the files it sees.
	secrets := [][]byte{[]byte(secret), []byte(envSecret)}
	scanned := scanSandbox(t, name, secrets)
	for _, dir := range []string{filepath.Join(l.state, name), l.wd} {
		scanFiles(t, dir, func(b []byte) bool { return bytes.Contains(b, secrets[0]) || bytes.Contains(b, secrets[1]) })
	}
	proxyPID := childByExe(t, cmd.Process.Pid, "egress-proxy")
	for _, f := range []string{"environ", "cmdline"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", proxyPID, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if bytes.Contains(b, s) {
				t.Errorf("the proxy's /proc/%d/%s holds a value", proxyPID, f)
			}
		}
	}
	proxyLog, _ := os.ReadFile(filepath.Join(l.state, name, ProxyLogName))
	stop()
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	os.Remove(filepath.Join(l.wd, "stop"))
	if scanned < 3 {
		t.Errorf("scanned the memory of %d sandbox processes; want at least the init, sh and python", scanned)
	}

	if r["env_token"] != "openshell:resolve:env:API_TOKEN" {
		t.Errorf("the sandbox's API_TOKEN is %q, want its placeholder", r["env_token"])
	}
	for _, k := range []string{"curl_bound", "urllib", "requests"} {
		if !strings.HasPrefix(r[k], "200") {
			t.Errorf("%s: %q, want 200", k, r[k])
		}
	}
	for _, k := range []string{"curl_other", "curl_transparent_other"} {
		if !strings.HasPrefix(r[k], "403") || !strings.Contains(r[k], `"reason":"credential_endpoint_mismatch"`) {
			t.Errorf("%s (to other.test): %q", k, r[k])
		}
	}
	if !strings.HasPrefix(r["curl_transparent"], "200") {
		t.Errorf("curl_transparent: %q, want 200", r["curl_transparent"])
	}
	if r["requests_other"] != "403 credential_endpoint_mismatch" {
		t.Errorf("requests to other.test: %q", r["requests_other"])
	}
	mu.Lock()
	seen := strings.Join(got, "\n")
	mu.Unlock()
	for _, want := range []string{
		"api.test:8443/echo/curl auth=Bearer " + secret + " key=" + envSecret,
		"api.test:8443/echo/transparent auth=Bearer " + secret + " key=",
		"api.test:8443/echo/urllib auth=Bearer " + secret + " key=",
		"api.test:8443/echo/requests auth=Bearer " + secret + " key=" + envSecret,
	} {
		if !strings.Contains(seen, want) {
			t.Errorf("the upstream did not get %q; it got:\n%s", want, seen)
		}
	}
	if strings.Contains(seen, "other.test") {
		t.Errorf("a refused request reached the upstream:\n%s", seen)
	}

	// Events: a Credential Misuse finding and HTTP denials for other.test,
	// naming neither key, placeholder nor value; nothing anywhere holds a
	// value.
	events, _ := os.ReadFile(l.events)
	var findings, denials, transparent int
	for _, e := range l.eventLines() {
		b, _ := json.Marshal(e)
		if e["class_uid"] == 4002.0 && strings.Contains(string(b), `"listener":"transparent"`) && strings.Contains(string(b), "/echo/transparent") {
			transparent++
		}
		if e["class_uid"] == 2004.0 && strings.Contains(string(b), "Credential Misuse") {
			findings++
			if strings.Contains(string(b), "API_TOKEN") || strings.Contains(string(b), "openshell:") {
				t.Errorf("finding names the key or the placeholder: %s", b)
			}
		}
		if e["class_uid"] == 4002.0 && e["status_code"] == "policy_denied" && strings.Contains(string(b), "credential_endpoint_mismatch") {
			denials++
		}
	}
	if findings < 2 || denials < 2 {
		t.Errorf("%d Credential Misuse findings, %d denied HTTP events; want one each for curl through the proxy and through policy DNS at least", findings, denials)
	}
	if transparent < 2 {
		t.Errorf("%d HTTP events of the transparent listener for /echo/transparent, want 2: curl --noproxy did not go through it", transparent)
	}
	for what, data := range map[string][]byte{"events": events, "proxy log": proxyLog, "supervisor stderr": stderr.Bytes()} {
		if len(data) == 0 && what != "supervisor stderr" {
			t.Errorf("%s is empty", what)
		}
		for _, s := range secrets {
			if bytes.Contains(data, s) {
				t.Errorf("the %s holds a value", what)
			}
		}
	}
}

// scanSandbox reads, for every process of the sandbox's cgroup, its
// environment, command line and every readable mapping of its memory,
// and every file under the places of its own the sandbox sees (its /tmp
// and /run/palisade: HOME and the trust bundle, through /proc/PID/root);
// it fails the test on any secret. It returns how many processes'
// memory it read.
func scanSandbox(t *testing.T, name string, secrets [][]byte) int {
	t.Helper()
	g, err := cgroup.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	pids, err := g.Procs()
	if err != nil {
		t.Fatal(err)
	}
	has := func(b []byte) bool {
		for _, s := range secrets {
			if bytes.Contains(b, s) {
				return true
			}
		}
		return false
	}
	// A control: the scanner must find what the sandbox does hold (the
	// placeholder, in the environment and memory of its processes).
	placeholder := []byte("openshell:resolve:env:API_TOKEN")
	control := 0
	scanned := 0
	for _, pid := range pids {
		if _, found := scanMemory(pid, func(b []byte) bool { return bytes.Contains(b, placeholder) }); found {
			control++
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		for _, f := range []string{"environ", "cmdline"} {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f)); err == nil && has(b) {
				t.Errorf("sandbox process %d (%s): /proc/%d/%s holds a value", pid, exe, pid, f)
			}
		}
		n, found := scanMemory(pid, has)
		if found {
			t.Errorf("sandbox process %d (%s): its memory holds a value", pid, exe)
		}
		if n > 0 {
			scanned++
		}
	}
	if control == 0 {
		t.Errorf("the memory scan found the placeholder in none of the %d sandbox processes: the scan does not work", len(pids))
	}
	t.Logf("scanned %d sandbox processes; %d hold the placeholder", scanned, control)
	if len(pids) > 0 {
		root := fmt.Sprintf("/proc/%d/root", pids[len(pids)-1])
		for _, dir := range []string{"/tmp", "/run/palisade"} {
			scanFiles(t, filepath.Join(root, dir), has)
		}
	}
	return scanned
}

// scanMemory reads every readable mapping of pid's memory; it returns the
// bytes read and whether has matched (overlapping chunk edges so a value
// across two chunks is seen).
func scanMemory(pid int, has func([]byte) bool) (int64, bool) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, false
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return 0, false
	}
	defer mem.Close()
	var total int64
	buf := make([]byte, 1<<20)
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[1][0] != 'r' || len(f) >= 6 && (f[5] == "[vvar]" || f[5] == "[vsyscall]" || f[5] == "[vvar_vclock]") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		const overlap = 256
		for off := start; off < end; {
			n := min(uint64(len(buf)), end-off)
			k, _ := mem.ReadAt(buf[:n], int64(off))
			total += int64(k)
			if k > 0 && has(buf[:k]) {
				return total, true
			}
			if n <= overlap || uint64(k) < n {
				break
			}
			off += n - overlap
		}
	}
	return total, false
}

// scanFiles fails the test when a regular file under dir holds a value.
func scanFiles(t *testing.T, dir string, has func([]byte) bool) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && has(b) {
			t.Errorf("file %s holds a value", p)
		}
		return nil
	})
}
