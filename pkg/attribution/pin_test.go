package attribution

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestPinnerTOFU(t *testing.T) {
	p, err := NewPinner("", 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := hexSum("a"), hexSum("b")
	if err := p.Pin("/usr/bin/curl", a); err != nil {
		t.Fatalf("first pin: %v", err)
	}
	if err := p.Pin("/usr/bin/curl", a); err != nil {
		t.Fatalf("same hash again: %v", err)
	}
	if err := p.Pin("/usr/bin/python3", b); err != nil {
		t.Fatalf("other path: %v", err)
	}
	err = p.Pin("/usr/bin/curl", b)
	var me *MismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
		t.Fatalf("changed hash: err %v, want *MismatchError", err)
	}
	if me.Path != "/usr/bin/curl" || me.Pinned != a || me.Seen != b {
		t.Errorf("mismatch %+v", me)
	}
	if got, _ := p.Pinned("/usr/bin/curl"); got != a {
		t.Errorf("a mismatch replaced the pin: now %s", got)
	}
	if n := len(p.Pins()); n != 2 {
		t.Errorf("%d pins, want 2", n)
	}
}

func TestPinnerRejectsBadInput(t *testing.T) {
	p, _ := NewPinner("", 0)
	for _, c := range []struct{ path, sum, want string }{
		{"", hexSum("x"), "exe path"},
		{"usr/bin/curl", hexSum("x"), "exe path"},
		{"/usr/bin/curl", "abc", "sha256"},
		{"/usr/bin/curl", strings.ToUpper(hexSum("x")), "sha256"},
		{"/usr/bin/curl", hexSum("x")[:63] + "g", "sha256"},
	} {
		if err := p.Pin(c.path, c.sum); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Pin(%q, %q): err %v, want one naming %s", c.path, c.sum, err, c.want)
		}
	}
	if len(p.Pins()) != 0 {
		t.Errorf("bad input was pinned: %v", p.Pins())
	}
	if _, err := NewPinner("", -1); err == nil {
		t.Error("negative maxPins accepted")
	}
}

// Concurrent first uses of one path: exactly one hash wins and every
// other caller sees a mismatch against the winner.
func TestPinnerConcurrentFirstUse(t *testing.T) {
	p, _ := NewPinner("", 0)
	const n = 32
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Pin("/tmp/agent", hexSum(string(rune('A'+i))))
		}()
	}
	wg.Wait()
	winner, ok := p.Pinned("/tmp/agent")
	if !ok {
		t.Fatal("nothing pinned")
	}
	wins := 0
	for i, err := range errs {
		var me *MismatchError
		switch {
		case err == nil:
			wins++
			if hexSum(string(rune('A'+i))) != winner {
				t.Errorf("caller %d succeeded with a hash that is not the pin", i)
			}
		case errors.As(err, &me):
			if me.Pinned != winner {
				t.Errorf("caller %d: mismatch against %s, pin is %s", i, me.Pinned, winner)
			}
		default:
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if wins != 1 {
		t.Errorf("%d callers pinned, want exactly 1", wins)
	}
}

func TestPinnerPersists(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pins.json")
	p, err := NewPinner(file, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pin("/usr/bin/curl", hexSum("curl")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatalf("pin file not written: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("pin file mode %v, want 0600", st.Mode().Perm())
	}
	// A restarted proxy keeps the pin.
	q, err := NewPinner(file, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Pin("/usr/bin/curl", hexSum("evil")); !errors.Is(err, ErrMismatch) {
		t.Fatalf("after reload: err %v, want a mismatch", err)
	}
	if err := q.Pin("/usr/bin/curl", hexSum("curl")); err != nil {
		t.Fatalf("after reload, pinned hash: %v", err)
	}
}

func TestPinnerBadFileFailsClosed(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"garbage":  "{not json",
		"unknown":  `{"version":1,"pins":{},"extra":1}`,
		"version":  `{"version":2,"pins":{}}`,
		"bad hash": `{"version":1,"pins":{"/usr/bin/curl":"xyz"}}`,
		"relative": `{"version":1,"pins":{"curl":"` + hexSum("c") + `"}}`,
		"trailing": `{"version":1,"pins":{}} {}`,
	} {
		file := filepath.Join(dir, name+".json")
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewPinner(file, 0); err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: err %v, want an error naming the file", name, err)
		}
	}
	file := filepath.Join(dir, "full.json")
	os.WriteFile(file, []byte(`{"version":1,"pins":{"/a":"`+hexSum("a")+`","/b":"`+hexSum("b")+`"}}`), 0o600)
	if _, err := NewPinner(file, 1); err == nil {
		t.Error("a file with more pins than the limit was accepted")
	}
}

// A pin that cannot be saved is not kept, so the caller denies now and a
// later attempt (after the operator fixes the disk) tries again.
func TestPinnerSaveFailureKeepsNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "missing-dir", "pins.json")
	p, err := NewPinner(file, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pin("/usr/bin/curl", hexSum("c")); err == nil {
		t.Fatal("save into a missing directory succeeded")
	}
	if _, ok := p.Pinned("/usr/bin/curl"); ok {
		t.Error("unsaved pin kept in memory")
	}
	if err := os.Mkdir(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := p.Pin("/usr/bin/curl", hexSum("other")); err != nil {
		t.Fatalf("retry after the directory exists: %v", err)
	}
}

func TestPinnerLimit(t *testing.T) {
	p, _ := NewPinner("", 2)
	if err := p.Pin("/a", hexSum("a")); err != nil {
		t.Fatal(err)
	}
	if err := p.Pin("/b", hexSum("b")); err != nil {
		t.Fatal(err)
	}
	if err := p.Pin("/c", hexSum("c")); !errors.Is(err, ErrTooManyPins) {
		t.Fatalf("third path: err %v, want ErrTooManyPins", err)
	}
	if err := p.Pin("/a", hexSum("a")); err != nil {
		t.Fatalf("known path when full: %v", err)
	}
}
