package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// sleeper starts a process that stands in for a sandbox's owner and is
// killed when the test ends.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	c := exec.Command("/bin/sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	return c
}

// The lifecycle lock lives in the state directory the owner removes when
// it ends, so the name is free again before delete collects what the
// owner left. A new sandbox that takes the name in that moment has
// another id: `delete --expect-id OLD NAME` must leave it alone.
func TestDeleteExpectIDSparesTheNamesNewSandbox(t *testing.T) {
	testutil.RequireRoot(t)
	st := t.TempDir()
	store, err := state.Open(st)
	if err != nil {
		t.Fatal(err)
	}
	name := testutil.UniqueName("race-")
	oldOwner := sleeper(t)
	old, err := store.Create(name, state.Labels{CreatorPID: oldOwner.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	newOwner := sleeper(t)
	var fresh state.Labels
	afterOwnerStopped = func() {
		// What the old owner does as it ends, then a new `run --name`.
		oldOwner.Wait()
		if err := store.Remove(name); err != nil {
			t.Error(err)
		}
		if fresh, err = store.Create(name, state.Labels{CreatorPID: newOwner.Process.Pid}); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterOwnerStopped = nil }()

	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"delete", "--state-dir", st, "--expect-id", old.ID, name}, nil, &out, &errb); err != nil {
		t.Fatalf("delete --expect-id %s: %v: %s", old.ID, err, errb.String())
	}
	if fresh.ID == "" || fresh.ID == old.ID {
		t.Fatalf("the stand-in for the new sandbox was not made (id %q)", fresh.ID)
	}
	got, err := store.Get(name)
	if errors.Is(err, state.ErrNotFound) {
		t.Fatalf("delete --expect-id %s removed the new sandbox %s (id %s) that took the name", old.ID, name, fresh.ID)
	}
	if err != nil || got.ID != fresh.ID {
		t.Fatalf("after delete: %+v, %v; want the new sandbox (id %s) untouched", got, err, fresh.ID)
	}
	if !store.CreatorAlive(got) {
		t.Fatalf("the new sandbox's owner was stopped")
	}
}
