package actionevent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// The OCSF examples in docs/events.md are generated from pkg/ocsf and
// validated there; mapping every one of them checks this package against
// what the producers really emit.
var (
	ocsfExample   = regexp.MustCompile("(?s)<!-- ocsf-example: ([a-z0-9-]+) -->\n```json\n(.*?)```\n")
	recordExample = regexp.MustCompile("(?s)<!-- action-event-example: ([a-z0-9-]+) ([A-Za-z0-9._-]+) -->\n```json\n(.*?)```\n")
)

func eventsDoc(t *testing.T) (string, []byte) {
	t.Helper()
	p, err := filepath.Abs("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, doc
}

func ocsfExamples(t *testing.T, doc []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, m := range ocsfExample.FindAllSubmatch(doc, -1) {
		var line bytes.Buffer
		if err := json.Compact(&line, m[2]); err != nil {
			t.Fatalf("OCSF example %s is not JSON: %v", m[1], err)
		}
		out[string(m[1])] = line.Bytes()
	}
	return out
}

func TestMapsEveryDocumentedOCSFExample(t *testing.T) {
	_, doc := eventsDoc(t)
	exs := ocsfExamples(t, doc)
	if len(exs) < 5 {
		t.Fatalf("found only %d OCSF examples in docs/events.md", len(exs))
	}
	classesSeen := map[int]bool{}
	for name, line := range exs {
		r, err := FromOCSF(line, "agent-7")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := r.Validate(); err != nil {
			t.Errorf("%s: record invalid: %v", name, err)
		}
		var src struct {
			ClassUID     int    `json:"class_uid"`
			ActivityID   int    `json:"activity_id"`
			ActivityName string `json:"activity_name"`
			ActionID     int    `json:"action_id"`
			StatusCode   string `json:"status_code"`
			Metadata     struct {
				UID string `json:"uid"`
			} `json:"metadata"`
		}
		json.Unmarshal(line, &src)
		classesSeen[src.ClassUID] = true
		if r.Source.ClassUID != src.ClassUID || r.Category != classes[src.ClassUID].category {
			t.Errorf("%s: class %d mapped to %d/%s", name, src.ClassUID, r.Source.ClassUID, r.Category)
		}
		if r.SandboxID != src.Metadata.UID || r.SandboxID == "" {
			t.Errorf("%s: sandbox_id %q, metadata.uid %q", name, r.SandboxID, src.Metadata.UID)
		}
		if want := map[int]string{1: ActionAllow, 2: ActionDeny}[src.ActionID]; want != "" && r.Action != want {
			t.Errorf("%s: action_id %d mapped to %s", name, src.ActionID, r.Action)
		}
		if src.ActivityID == activityOther && r.Source.ActivityName != src.ActivityName {
			// 99 (Other): the producer's name (Policy Load, Confinement
			// Applied) is the only thing that says what happened.
			t.Errorf("%s: activity 99 %q mapped to activity_name %q", name, src.ActivityName, r.Source.ActivityName)
		}
		if r.Reason == "" {
			t.Errorf("%s: no reason", name)
		}
		switch src.ClassUID {
		case 4001, 4002:
			if src.StatusCode == "client_gone" {
				// Never attributed nor decided: no actor, no rule, and
				// not a denial.
				if r.Target.Host == "" || r.Action != ActionAudit {
					t.Errorf("%s: client_gone record: %+v, want a target and action audit", name, r)
				}
				break
			}
			if r.Target.Host == "" || r.Target.Port == 0 || r.Actor.PID == 0 || r.Policy.Rule == "" {
				t.Errorf("%s: network record lacks target, actor or rule: %+v", name, r)
			}
		case 5019:
			if strings.Contains(string(line), `"policy":`) && !strings.HasPrefix(r.Policy.Checksum, "sha256:") {
				t.Errorf("%s: policy checksum not carried: %+v", name, r.Policy)
			}
		}
	}
	for _, uid := range []int{1007, 2004, 4001, 4002, 5019} {
		if !classesSeen[uid] {
			t.Errorf("no documented OCSF example of class %d", uid)
		}
	}
}

func indentRecord(t *testing.T, r Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, r.AppendJSON(nil), "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// TestDocsExamples: each mac.action_event.v1 example in docs/events.md is
// exactly what FromOCSF makes of the OCSF example it names.
func TestDocsExamples(t *testing.T) {
	path, doc := eventsDoc(t)
	exs := ocsfExamples(t, doc)
	want := func(name, agent string) ([]byte, bool) {
		line, ok := exs[name]
		if !ok {
			return nil, false
		}
		r, err := FromOCSF(line, agent)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return indentRecord(t, r), true
	}
	if os.Getenv("PALISADE_UPDATE_DOCS") == "1" {
		doc = recordExample.ReplaceAllFunc(doc, func(m []byte) []byte {
			sm := recordExample.FindSubmatch(m)
			body, ok := want(string(sm[1]), string(sm[2]))
			if !ok {
				return m
			}
			return []byte("<!-- action-event-example: " + string(sm[1]) + " " + string(sm[2]) + " -->\n```json\n" + string(body) + "```\n")
		})
		if err := fsutil.WriteFileAtomic(path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found := 0
	for _, m := range recordExample.FindAllSubmatch(doc, -1) {
		found++
		name, agent, body := string(m[1]), string(m[2]), m[3]
		exp, ok := want(name, agent)
		if !ok {
			t.Errorf("docs/events.md maps OCSF example %q, which the file does not have", name)
			continue
		}
		if !bytes.Equal(body, exp) {
			t.Errorf("docs/events.md record example %q is stale; run PALISADE_UPDATE_DOCS=1 go test -run TestDocsExamples ./pkg/actionevent\nhave:\n%s\nwant:\n%s", name, body, exp)
		}
		var compact bytes.Buffer
		json.Compact(&compact, body)
		r, err := Parse(compact.Bytes())
		if err != nil {
			t.Errorf("example %q: %v", name, err)
		} else if err := r.Validate(); err != nil {
			t.Errorf("example %q: %v", name, err)
		}
	}
	if found < 2 {
		t.Errorf("docs/events.md has %d mac.action_event.v1 examples, want at least 2", found)
	}
}
