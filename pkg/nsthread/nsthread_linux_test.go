//go:build linux

package nsthread

import (
	"errors"
	"net"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

func TestRunEntersAndLeaves(t *testing.T) {
	name, ns := testutil.NamedNetns(t, "nst")
	_ = name
	testutil.CheckFDLeaks(t)
	before, _ := netns.Get()
	defer before.Close()
	var ifs []net.Interface
	err := Run(ns, func() error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		if !cur.Equal(ns) {
			return errors.New("not in the target namespace")
		}
		ifs, err = net.Interfaces()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ifs) != 1 || ifs[0].Name != "lo" {
		t.Fatalf("interfaces in the new namespace: %v", ifs)
	}
	after, _ := netns.Get()
	defer after.Close()
	if !after.Equal(before) {
		t.Fatal("caller moved")
	}
	want := errors.New("boom")
	if err := Run(ns, func() error { return want }); !errors.Is(err, want) {
		t.Fatalf("fn error not returned: %v", err)
	}
}
