//go:build linux

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// A fence whose sandbox state is gone (a crash between the removals, a
// removed state root) used to stay for ever: gc lists it ("collect
// fence"), and --apply removes its host table and record once its
// namespace is gone; a live one is left alone.
func TestGCCollectsFenceWithoutState(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "nftables")
	bin := testutil.Binary(t, "sandbox-supervisor")
	_, st := sandboxDirs(t)
	start := func() (*exec.Cmd, *fence.Fence) {
		sleep := exec.Command("sleep", "60")
		sleep.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		if err := sleep.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
		f, err := fence.Setup(context.Background(), fence.Config{
			Sandbox:   testutil.UniqueName("gcf-"),
			NetnsPath: fmt.Sprintf("/proc/%d/ns/net", sleep.Process.Pid),
			ProxyPort: 3128, FencePort: 3129,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fence.Collect(f.Sandbox) })
		return sleep, f
	}
	_, live := start()
	deadProc, dead := start()
	deadProc.Process.Kill()
	deadProc.Wait()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, err := net.InterfaceByName(dead.HostIf); err != nil {
			break
		}
	}
	out, _ := supervise(t, bin, "gc", "--state-dir", st)
	if !lineHas(out, "collect fence "+dead.Sandbox, "network namespace is gone") || strings.Contains(out, live.Sandbox) {
		t.Errorf("gc (dry run):\n%s\nwant %s listed as a fence to collect and %s not listed", out, dead.Sandbox, live.Sandbox)
	}
	if !hostTable(t, dead.Table) {
		t.Fatal("the dry run removed the table")
	}
	out, code := supervise(t, bin, "gc", "--state-dir", st, "--apply", "--json")
	if code != 0 || !lineHas(out, `"name":"`+dead.Sandbox+`"`, `"removed":true`, `"fence":true`) {
		t.Errorf("gc --apply --json: exit %d\n%s", code, out)
	}
	if hostTable(t, dead.Table) {
		t.Error("the dead fence's host table is still there")
	}
	if _, err := os.Stat(filepath.Join(fence.DefaultStateDir, dead.Sandbox+".json")); !os.IsNotExist(err) {
		t.Errorf("the dead fence's record: %v", err)
	}
	if !hostTable(t, live.Table) {
		t.Error("gc removed a live fence's table")
	}
}

// hostTable reports whether the host namespace has the inet table.
func hostTable(t *testing.T, name string) bool {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatalf("list inet tables: %v", err)
	}
	for _, tb := range tables {
		if tb.Name == name {
			return true
		}
	}
	return false
}
