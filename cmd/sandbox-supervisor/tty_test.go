package main

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// Issue 16 item 2: `head -c 1M /dev/zero | run --tty -- sh -c 'wc -c'`
// hung for ever (the pipe's end never reached the terminal). As with
// docker run -it, --tty with a stdin that is not a terminal is a usage
// error that says what to do, at once.
func TestTTYWithPipedStdinIsRefused(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--tty", "--", "sh", "-c", "wc -c")
	cmd.Stdin = io.LimitReader(zeros{}, 1<<20)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("--tty with piped stdin still running after 20 s")
	}
	if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(errb.String(), "stdin is not a terminal") || !strings.Contains(errb.String(), "drop --tty") {
		t.Fatalf("exit %d, stderr %q; want 2 saying stdin is not a terminal", code, errb.String())
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Issue 16 item 2: with --tty, a line ends "\r\n" as on the host, with
// stdin and stdout on the caller's one terminal or on two. The caller's
// terminal kept output processing on in raw mode and translated the
// sandbox terminal's "\r\n" again: "\r\r\n".
func TestTTYLineEndsOnce(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFeature(t, "landlock")
	for _, separate := range []bool{false, true} {
		ttyLineEnds(t, separate)
	}
}

func ttyLineEnds(t *testing.T, separate bool) {
	bin := testutil.Binary(t, "sandbox-supervisor")
	wd, st := sandboxDirs(t)
	outMaster, outSlave := testutil.Pty(t)
	inSlave := outSlave
	if separate {
		_, inSlave = testutil.Pty(t)
	}
	cmd := exec.Command(bin, "run", "--state-dir", st, "--workdir", wd, "--tty", "--", "printf", `a\nb\n`)
	cmd.Stdin, cmd.Stdout = inSlave, outSlave
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	chunks := make(chan []byte, 16)
	go func() {
		for {
			buf := make([]byte, 256)
			n, err := outMaster.Read(buf)
			if n > 0 {
				chunks <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	var b bytes.Buffer
	deadline := time.After(10 * time.Second)
	var settle <-chan time.Time
	for {
		select {
		case c := <-chunks:
			b.Write(c)
			if settle == nil && strings.Contains(b.String(), "b\r") {
				// Let a doubled translation's last bytes arrive too.
				settle = time.After(200 * time.Millisecond)
			}
			continue
		case <-settle:
		case <-deadline:
		}
		break
	}
	if b.String() != "a\r\nb\r\n" {
		t.Fatalf("separate terminals %v: output %q, want %q", separate, b.String(), "a\r\nb\r\n")
	}
}
