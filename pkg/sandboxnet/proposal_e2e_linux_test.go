//go:build linux

package sandboxnet

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/landlockaudit"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/proposal"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

const proposalBasePolicy = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /bin, /sbin, /lib, /lib64, /etc]
  read_write: [/tmp]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: sandbox
  run_as_group: sandbox
network_policies:
  web:
    endpoints:
      - host: allowed.test
        port: 80
        protocol: rest
        rules:
          - allow: {method: GET, path: "/**"}
    binaries:
      - path: /usr/bin/curl
`

// The five accesses of the acceptance run, each printing name=outcome.
const proposalScript = `
code() { printf '%s=%s\n' "$1" "$(shift; curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@")"; }
code host_one http://one.test/
code host_two http://two.test/
code post curl_unused -X POST --data x http://allowed.test/submit
printf 'python=%s\n' "$(python3 -c '
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://allowed.test/", timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    print("error", e)
')"
printf 'file=%s\n' "$(cat DATA 2>/dev/null || echo denied)"
`

// The acceptance run of proposals, in real sandboxes: a run that is
// refused two hosts, one L7 method, one binary and one filesystem path
// yields a proposal equal to the hand-written patch below (nothing more);
// logs --denied --summary shows the five; applied with apply-proposal,
// the same run in a new sandbox passes with no denial at all.
func TestProposalFromRealRun(t *testing.T) {
	l := newLab(t, "")
	if _, err := landlockaudit.GetStatus(); err != nil {
		testutil.RequireData(t, "the kernel's audit netlink interface (filesystem denial events)", err)
	}
	testutil.HostLock(t, "audit")
	testutil.RequireCommand(t, "python3")
	syncBin := testutil.Binary(t, "policy-sync")
	python, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		testutil.RequireData(t, "/usr/bin/python3", err)
	}
	cat, _ := filepath.EvalSymlinks("/usr/bin/cat")
	l.hosts = l.inet.HostsFile(map[string]string{
		"allowed.test": l.inet.V4[0].String(),
		"one.test":     l.inet.V4[1].String(),
		"two.test":     l.inet.V4[2].String(),
	})
	l.write(proposalBasePolicy)
	// A file the sandbox user may read by its mode: Landlock alone stops it.
	dataDir, err := os.MkdirTemp("/var/tmp", "palisade-proposal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	os.Chmod(dataDir, 0o755)
	data := filepath.Join(dataDir, "data.txt")
	os.WriteFile(data, []byte("the-data\n"), 0o644)
	script := strings.ReplaceAll(strings.ReplaceAll(proposalScript, "DATA", data), "curl_unused ", "")

	runIn := func(name string, started func()) map[string]string {
		t.Helper()
		det := exec.Command(l.sup, "run", "--detach", "--policy", l.policy, "--hosts-file", l.hosts, "--events", l.events,
			"--state-dir", l.state, "--workdir", l.wd, "--name", name)
		if out, err := det.CombinedOutput(); err != nil {
			t.Fatalf("run --detach %s: %v: %s", name, err, out)
		}
		t.Cleanup(func() { exec.Command(l.sup, "delete", "--state-dir", l.state, name).Run() })
		started()
		cmd := exec.Command(l.sup, "exec", "--state-dir", l.state, name, "--", script)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("exec in %s: %v: %s%s", name, err, out, errb.String())
		}
		return results(out)
	}

	// logs --denied --summary --follow shows the table live: empty at
	// first, then with the denials as they come, and a last time when the
	// sandbox is deleted.
	first := testutil.UniqueName("prop-")
	var live bytes.Buffer
	follow := exec.Command(l.sup, "logs", "--denied", "--summary", "--follow", "--interval", "200ms", "--state-dir", l.state, first)
	follow.Stdout = &live
	r := runIn(first, func() {
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	})
	want := map[string]string{"host_one": "403", "host_two": "403", "post": "403", "python": "403", "file": "denied"}
	for k, v := range want {
		if r[k] != v {
			t.Fatalf("first run: %s=%q, want %q (all: %v)", k, r[k], v, r)
		}
	}
	// The filesystem denial reaches the events file through the audit
	// netlink socket: wait for it (bounded).
	waitFor(t, 10e9, func() bool {
		b, _ := os.ReadFile(l.events)
		return bytes.Contains(b, []byte(`"path":"`+data+`"`))
	})

	sum, err := exec.Command(l.sup, "logs", "--denied", "--summary", "--state-dir", l.state, first).Output()
	if err != nil {
		t.Fatalf("logs --denied --summary: %v", err)
	}
	for _, line := range []string{
		"/usr/bin/curl -> one.test:80 (no_matching_endpoint)",
		"/usr/bin/curl -> two.test:80 (no_matching_endpoint)",
		"/usr/bin/curl -> POST allowed.test:80/submit (l7_no_rule)",
		python + " -> allowed.test:80 (binary_not_allowed)",
		cat + " " + data + " (fs.read_file)",
		"5 denials in 5 groups",
	} {
		if !strings.Contains(string(sum), line) {
			t.Errorf("logs --denied --summary lacks %q:\n%s", line, sum)
		}
	}

	if out, err := exec.Command(l.sup, "delete", "--state-dir", l.state, first).CombinedOutput(); err != nil {
		t.Fatalf("delete: %v %s", err, out)
	}
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs --follow: %v", err)
	}
	tables := strings.Split(live.String(), "== denials of "+first)
	if len(tables) < 3 || !strings.Contains(tables[1], "0 denials in 0 groups") || !strings.Contains(tables[len(tables)-1], "5 denials in 5 groups") {
		t.Errorf("logs --denied --summary --follow:\n%s", live.String())
	}
	var propOut, propErr bytes.Buffer
	propose := exec.Command(syncBin, "propose", "--events", l.events, "--sandbox", first, "--policy", l.policy)
	propose.Stdout, propose.Stderr = &propOut, &propErr
	if err := propose.Run(); err != nil {
		t.Fatalf("propose: %v\n%s", err, propErr.String())
	}
	p, err := proposal.Parse(propOut.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := renderPatch(p), expectedPatch(data, python); got != want {
		t.Fatalf("the proposal is not the hand-written patch:\n%s\n--- want:\n%s\n--- proposal:\n%s", got, want, propOut.String())
	}
	t.Logf("logs --denied --summary:\n%s\nproposal:\n%s", sum, propOut.String())
	if len(p.Unanswered) != 0 {
		t.Errorf("unanswered: %+v", p.Unanswered)
	}
	propFile := filepath.Join(l.dir, "proposal.yaml")
	os.WriteFile(propFile, propOut.Bytes(), 0o600)
	if out, err := exec.Command(syncBin, "apply-proposal", propFile, "--approve", "--policy", l.policy).CombinedOutput(); err != nil {
		t.Fatalf("apply-proposal: %v\n%s", err, out)
	}
	applied, err := policy.LoadFile(l.policy)
	if err != nil || applied.Checksum() != p.Result {
		t.Fatalf("applied policy: %v", err)
	}

	second := testutil.UniqueName("prop-")
	r = runIn(second, func() {})
	want = map[string]string{"host_one": "200", "host_two": "200", "post": "200", "python": "200", "file": "the-data"}
	for k, v := range want {
		if r[k] != v {
			t.Errorf("after the proposal: %s=%q, want %q (all: %v)", k, r[k], v, r)
		}
	}
	if out, _ := exec.Command(l.sup, "logs", "--denied", "--state-dir", l.state, second).Output(); len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("the second run was denied:\n%s", out)
	}
}

// renderPatch is the patch without times and counts: what each operation
// changes and which denials it answers.
func renderPatch(p *proposal.Proposal) string {
	var b strings.Builder
	for _, op := range p.Patch {
		fmt.Fprintf(&b, "%s", op.Op)
		if op.Path != "" {
			fmt.Fprintf(&b, " %s", op.Path)
		}
		if op.Entry != "" {
			fmt.Fprintf(&b, " %s", op.Entry)
		}
		if op.Endpoint != nil {
			fmt.Fprintf(&b, " endpoints[%d]", *op.Endpoint)
		}
		if op.Rule != nil {
			fmt.Fprintf(&b, " allow %s %s", op.Rule.Allow.Method, op.Rule.Allow.Path)
		}
		if v := op.Value; v != nil {
			for _, e := range v.Endpoints {
				fmt.Fprintf(&b, " endpoint{%s %v %s %d rules}", e.Host, e.Ports, e.Protocol, len(e.Rules))
			}
			for _, bin := range v.Binaries {
				fmt.Fprintf(&b, " binary %s", bin.Path)
			}
		}
		b.WriteString("\n")
		for _, d := range op.Answers {
			fmt.Fprintf(&b, "  answers %s\n", d.String())
		}
	}
	return b.String()
}

func expectedPatch(data, python string) string {
	cat, _ := filepath.EvalSymlinks("/usr/bin/cat")
	return "add_read_only " + data + "\n" +
		"  answers " + cat + " " + data + " (fs.read_file)\n" +
		"add_rule web endpoints[0] allow POST /submit\n" +
		"  answers /usr/bin/curl -> POST allowed.test:80/submit (l7_no_rule)\n" +
		"add_entry proposed_curl endpoint{one.test [80]  0 rules} endpoint{two.test [80]  0 rules} binary /usr/bin/curl\n" +
		"  answers /usr/bin/curl -> one.test:80 (no_matching_endpoint)\n" +
		"  answers /usr/bin/curl -> two.test:80 (no_matching_endpoint)\n" +
		"add_entry proposed_" + strings.ReplaceAll(filepath.Base(python), ".", "_") + " endpoint{allowed.test [80] rest 1 rules} binary " + python + "\n" +
		"  answers " + python + " -> allowed.test:80 (binary_not_allowed)\n"
}
