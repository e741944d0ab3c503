package state

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Reserve makes the directory first; Fill writes the labels later. In
// between the sandbox is listed as unreadable and gc protects it by age.
func TestReserveThenFill(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	name, err := s.Reserve("")
	if err != nil || ValidateName(name) != nil {
		t.Fatalf("Reserve = %q, %v", name, err)
	}
	if _, err := s.Reserve(name); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("second Reserve of %s = %v, want ErrNameTaken", name, err)
	}
	if _, err := s.Reserve("../x"); err == nil {
		t.Fatal("Reserve accepted an invalid name")
	}
	ents, err := s.List()
	if err != nil || len(ents) != 1 || ents[0].Name != name || ents[0].Err == nil {
		t.Fatalf("List of a reserved sandbox = %+v, %v; want one unreadable entry", ents, err)
	}
	plan, err := s.Plan(time.Now(), time.Hour)
	if err != nil || len(plan.Decisions) != 1 || plan.Decisions[0].Collect {
		t.Fatalf("gc plan for a fresh reservation = %+v, %v; want it protected by age", plan, err)
	}
	l, err := s.Fill(name, Labels{Kind: KindTask, AgentID: "a1"})
	if err != nil || l.Name != name || l.Status != StatusCreated || l.CreatorPID != os.Getpid() {
		t.Fatalf("Fill = %+v, %v", l, err)
	}
	got, err := s.Get(name)
	if err != nil || got.Kind != KindTask || got.AgentID != "a1" {
		t.Fatalf("Get after Fill = %+v, %v", got, err)
	}
	if _, err := s.Fill(name, Labels{Kind: "bogus"}); err == nil {
		t.Fatal("Fill accepted a bad kind")
	}
	// Create of a bad kind leaves nothing behind.
	if _, err := s.Create("", Labels{Kind: "bogus"}); err == nil {
		t.Fatal("Create accepted a bad kind")
	}
	if m, _ := filepath.Glob(filepath.Join(s.Root(), "sbx-*")); len(m) != 1 {
		t.Fatalf("state dirs after a refused Create: %v", m)
	}
}
