package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/proposal"
)

const proposeBase = `version: 1
filesystem_policy:
  read_only: [/usr, /etc]
  read_write: [/tmp]
network_policies:
  api:
    endpoints:
      - host: api.test
        port: 80
        protocol: rest
        rules: [{allow: {method: GET, path: "/v1/**"}}]
    binaries: [{path: /usr/bin/curl}]
`

// Two denials as the proxy and the supervisor write them.
const proposeEvents = `{"class_uid":4001,"activity_id":1,"action_id":2,"time":1767225600000,"status_code":"policy_denied","status_detail":"no_matching_endpoint","metadata":{"uid":"task-1"},"firewall_rule":{"name":"default-deny"},"actor":{"process":{"pid":4,"file":{"path":"/usr/bin/curl"}}},"dst_endpoint":{"hostname":"one.test","port":443},"unmapped":{"egress_proxy":{"kind":"connect","reason":"no_matching_endpoint"}}}
{"class_uid":4002,"activity_id":6,"action_id":2,"time":1767225600100,"status_code":"policy_denied","status_detail":"l7_no_rule","metadata":{"uid":"task-1"},"firewall_rule":{"name":"api"},"actor":{"process":{"pid":4,"file":{"path":"/usr/bin/curl"}}},"http_request":{"http_method":"POST","url":{"hostname":"api.test","port":80,"path":"/v1/items"}}}
{"class_uid":1001,"activity_id":2,"action_id":2,"time":1767225600200,"status_code":"landlock_denied","metadata":{"uid":"other"},"actor":{"process":{"file":{"path":"/usr/bin/cat"}}},"file":{"path":"/opt/x"},"unmapped":{"landlock":{"blockers":["fs.read_file"]}}}
`

func proposalEvent(t *testing.T, stderr string) map[string]any {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, `"activity_name":"Policy Proposal"`) {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no Policy Proposal event on stderr:\n%s", stderr)
	return nil
}

// propose prints the proposal (deterministically), emits the generated
// event; apply-proposal installs it atomically once, refuses it once the
// base changed, and each outcome is an event.
func TestProposeAndApply(t *testing.T) {
	t.Setenv(policy.EnvPolicy, "")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(proposeBase), 0o600)
	events := filepath.Join(dir, "events.jsonl")
	os.WriteFile(events, []byte(proposeEvents), 0o600)
	log := filepath.Join(dir, "proposal-events.jsonl")

	out, errOut, code := runCmd(t, "", "propose", "--events", events, "--sandbox", "task-1", "--policy", pol, "--event-log", log)
	if code != 0 {
		t.Fatalf("propose: %d\n%s", code, errOut)
	}
	out2, _, _ := runCmd(t, proposeEvents, "propose", "--events", "-", "--sandbox", "task-1", "--policy", pol)
	if out != out2 {
		t.Error("the same events from a file and from stdin give other bytes")
	}
	p, err := proposal.Parse([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Patch) != 2 || p.Patch[0].Op != proposal.OpAddRule || p.Patch[1].Op != proposal.OpAddEntry || len(p.Unanswered) != 0 {
		t.Fatalf("proposal:\n%s", out)
	}
	ev := proposalEvent(t, errOut)
	if get(ev, "unmapped", "proposal", "stage") != "generated" || get(ev, "metadata", "uid") != "task-1" || get(ev, "status") != "Success" {
		t.Errorf("generated event: %v", ev)
	}
	if data, _ := os.ReadFile(log); !strings.Contains(string(data), `"stage":"generated"`) {
		t.Errorf("--event-log: %s", data)
	}
	prop := filepath.Join(dir, "proposal.yaml")
	os.WriteFile(prop, []byte(out), 0o600)

	if _, _, code := runCmd(t, "", "apply-proposal", prop); code != cli.ExitUsage {
		t.Errorf("without --approve: %d", code)
	}
	dry, _, code := runCmd(t, "", "apply-proposal", prop, "--dry-run", "--policy", pol)
	if code != 0 || !strings.Contains(dry, "/v1/items") {
		t.Fatalf("dry run: %d\n%s", code, dry)
	}
	if data, _ := os.ReadFile(pol); string(data) != proposeBase {
		t.Fatal("the dry run wrote")
	}

	_, errOut, code = runCmd(t, "", "apply-proposal", prop, "--approve", "--policy", pol, "--event-log", log)
	if code != 0 {
		t.Fatalf("apply: %d\n%s", code, errOut)
	}
	installed, err := policy.LoadFile(pol)
	if err != nil || installed.Checksum() != p.Result {
		t.Fatalf("installed: %v", err)
	}
	if st, _ := os.Stat(pol); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	if ev := proposalEvent(t, errOut); get(ev, "unmapped", "proposal", "stage") != "approved" || get(ev, "policy", "uid") != "sha256:"+p.Result {
		t.Errorf("approved event: %v", ev)
	}

	// Again: the base is no longer the proposal's.
	_, errOut, code = runCmd(t, "", "apply-proposal", prop, "--approve", "--policy", pol, "--event-log", log)
	if code != cli.ExitFailed {
		t.Fatalf("second apply: %d", code)
	}
	if ev := proposalEvent(t, errOut); get(ev, "unmapped", "proposal", "stage") != "refused" ||
		!strings.Contains(get(ev, "status_detail").(string), "not the proposal's base") {
		t.Errorf("refused event: %v", ev)
	}
	if after, _ := policy.LoadFile(pol); after.Checksum() != p.Result {
		t.Error("a refused apply changed the policy")
	}
	data, _ := os.ReadFile(log)
	if n := strings.Count(string(data), `"activity_name":"Policy Proposal"`); n != 3 {
		t.Errorf("%d events in --event-log, want generated, approved, refused", n)
	}
}

// With only the bundled default in force, the result is installed where
// the hub install puts a policy: ~/.mac/openshell-policy.yaml.
func TestApplyInstallsAtHomePath(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv(policy.EnvPolicy, "")
	events := filepath.Join(t.TempDir(), "events.jsonl")
	os.WriteFile(events, []byte(`{"class_uid":1001,"action_id":2,"time":1,"metadata":{"uid":"s"},"actor":{"process":{"file":{"path":"/usr/bin/cat"}}},"file":{"path":"/opt/x"},"unmapped":{"landlock":{"blockers":["fs.read_file"]}}}`+"\n"), 0o600)
	out, errOut, code := runCmd(t, "", "propose", "--events", events)
	if code != 0 {
		t.Fatalf("%d %s", code, errOut)
	}
	prop := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(prop, []byte(out), 0o600)
	if _, errOut, code := runCmd(t, "", "apply-proposal", prop, "--approve"); code != 0 {
		t.Fatalf("%d %s", code, errOut)
	}
	p, err := policy.LoadFile(filepath.Join(home, ".mac", "openshell-policy.yaml"))
	if err != nil || !strings.Contains(strings.Join(p.Filesystem.ReadOnly, " "), "/opt/x") {
		t.Fatalf("%v %v", p, err)
	}
	if st, _ := os.Stat(filepath.Join(home, ".mac")); st.Mode().Perm() != 0o700 {
		t.Errorf("~/.mac mode %v", st.Mode().Perm())
	}
}

func get(m map[string]any, path ...string) any {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}
