package ocsf_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

// UpdateDocsEnv regenerates the examples in docs/events.md from the code
// when set to 1: PALISADE_UPDATE_DOCS=1 go test -run TestDocsExamples ./pkg/ocsf
const updateDocsEnv = "PALISADE_UPDATE_DOCS"

// exampleBlock matches a marked example: the marker comment, then a json
// code block.
var exampleBlock = regexp.MustCompile("(?s)<!-- ocsf-example: ([a-z0-9-]+) -->\n```json\n(.*?)```\n")

func docsPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func indented(t *testing.T, ev ocsf.Event) []byte {
	t.Helper()
	line, err := ocsf.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, line, "", "  "); err != nil {
		t.Fatal(err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

// TestDocsExamples: every example in docs/events.md is exactly what the
// code emits for that case, and validates against the OCSF definitions;
// every example the code defines is documented.
func TestDocsExamples(t *testing.T) {
	path := docsPath(t)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, ex := range examples() {
		want[ex.Name] = indented(t, ex.Ev)
	}
	if os.Getenv(updateDocsEnv) == "1" {
		doc = exampleBlock.ReplaceAllFunc(doc, func(m []byte) []byte {
			name := string(exampleBlock.FindSubmatch(m)[1])
			body, ok := want[name]
			if !ok {
				return m
			}
			return []byte("<!-- ocsf-example: " + name + " -->\n```json\n" + string(body) + "```\n")
		})
		if err := fsutil.WriteFileAtomic(path, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found := map[string]bool{}
	for _, m := range exampleBlock.FindAllSubmatch(doc, -1) {
		name, body := string(m[1]), m[2]
		found[name] = true
		exp, ok := want[name]
		if !ok {
			t.Errorf("docs/events.md has example %q that no code produces", name)
		} else if !bytes.Equal(body, exp) {
			t.Errorf("docs/events.md example %q differs from the code (%s); run %s=1 go test -run TestDocsExamples ./pkg/ocsf", name, firstDiff(body, exp), updateDocsEnv)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			t.Errorf("example %q is not JSON: %v", name, err)
			continue
		}
		ocsftest.Validate(t, compact.Bytes())
	}
	for name := range want {
		if !found[name] {
			t.Errorf("example %q is not in docs/events.md (add <!-- ocsf-example: %s --> and a json block)", name, name)
		}
	}
}

// firstDiff describes the first line where doc and code differ.
func firstDiff(doc, code []byte) string {
	dl, cl := bytes.Split(doc, []byte("\n")), bytes.Split(code, []byte("\n"))
	for i := 0; i < len(dl) || i < len(cl); i++ {
		var d, c []byte
		if i < len(dl) {
			d = dl[i]
		}
		if i < len(cl) {
			c = cl[i]
		}
		if !bytes.Equal(d, c) {
			return fmt.Sprintf("line %d: doc %q, code %q", i+1, bytes.TrimSpace(d), bytes.TrimSpace(c))
		}
	}
	return "equal"
}
