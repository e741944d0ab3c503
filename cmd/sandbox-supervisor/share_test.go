package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOneSandboxShares checks what docs/sandbox.md ("What one sandbox
// shares") says: a variable given to one exec with --env is readable by
// every other process of the same sandbox (/proc/PID/environ), which can
// also read its memory (not write it) and signal it; a process of another
// sandbox sees none of it.
func TestOneSandboxShares(t *testing.T) {
	bin, wd, st := lifecycleSetup(t)
	name, _ := detached(t, bin, st, wd)
	wd2, _ := sandboxDirs(t)
	other, _ := detached(t, bin, st, wd2)
	holder := exec.Command(bin, "exec", "--state-dir", st, "--no-login-shell", "--env", "OPERATOR_TOKEN=tok-3141", name, "--", "/bin/sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { holder.Wait(); close(done) }()
	t.Cleanup(func() { holder.Process.Kill(); <-done })

	probe := `for i in $(seq 100); do p=$(pgrep -x sleep) && break; sleep 0.05; done
tr '\0' '\n' < /proc/$p/environ | grep OPERATOR_TOKEN
a=$(grep -m1 r-xp /proc/$p/maps | cut -d- -f1)
python3 -c "
f = open('/proc/$p/mem', 'rb'); f.seek(int('$a', 16)); print('read', len(f.read(16)))
try:
    open('/proc/$p/mem', 'r+b'); print('mem writable')
except OSError:
    print('mem not writable')
"
kill -TERM $p && echo signalled`
	out, code := execIn(t, bin, st, name, "--", probe)
	for _, want := range []string{"OPERATOR_TOKEN=tok-3141", "read 16", "mem not writable", "signalled"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("another exec of the same sandbox: exit %d, %q lacks %q", code, out, want)
		}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Errorf("the signalled exec did not end")
	}

	holder2 := exec.Command(bin, "exec", "--state-dir", st, "--no-login-shell", "--env", "OPERATOR_TOKEN=tok-2718", name, "--", "/bin/sleep", "30")
	if err := holder2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder2.Process.Kill(); holder2.Wait() })
	time.Sleep(300 * time.Millisecond)
	out, code = execIn(t, bin, st, other, "--", `pgrep -x sleep; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep OPERATOR_TOKEN; echo checked`)
	if code != 0 || strings.Contains(out, "tok-2718") || strings.TrimSpace(out) != "checked" {
		t.Errorf("another sandbox: exit %d, %q; want nothing of the first sandbox's processes", code, out)
	}
}
