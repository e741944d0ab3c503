//go:build linux

package testutil

import (
	"net"
	"testing"

	"github.com/vishvananda/netns"
)

func TestInNetnsIsolated(t *testing.T) {
	CheckFDLeaks(t)
	outer, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	err = InNetns(t, func(ns netns.NsHandle) error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		if cur.Equal(outer) {
			t.Error("fn ran in the test's own namespace")
		}
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" {
			t.Errorf("fresh netns has interfaces %v, want only lo", ifs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after, _ := netns.Get()
	defer after.Close()
	if !after.Equal(outer) {
		t.Fatal("test goroutine left in another namespace")
	}
}

func TestNamedNetnsCleanup(t *testing.T) {
	var name string
	t.Run("create", func(t *testing.T) {
		name, _ = NamedNetns(t, "pt")
		if _, err := netns.GetFromName(name); err != nil {
			t.Fatalf("named netns %s not found: %v", name, err)
		}
	})
	if h, err := netns.GetFromName(name); err == nil {
		h.Close()
		t.Fatalf("netns %s still exists after cleanup", name)
	}
}
