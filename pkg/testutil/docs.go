package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// DocSection returns the text of the "## heading" section of the
// repository's Markdown file rel (README.md, docs/hub-api.md), up to the
// next "## " heading. Tests that run what a document tells a reader to
// run read it from there, so that a change to the document is a change
// to the test.
func DocSection(t testing.TB, rel, heading string) string {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("%s has no ## %s section", rel, heading)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// DocShBlocks returns the ```sh blocks of DocSection(rel, heading), in
// order; a section without one fails the test.
func DocShBlocks(t testing.TB, rel, heading string) []string {
	t.Helper()
	var blocks []string
	for _, m := range shBlock.FindAllStringSubmatch(DocSection(t, rel, heading), -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) == 0 {
		t.Fatalf("%s's ## %s has no sh block", rel, heading)
	}
	return blocks
}
