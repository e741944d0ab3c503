package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "run", "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenMakesRootOnlyDir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("root mode %v, want 0700", fi.Mode().Perm())
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := Open(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Open(file) = %v, want not-a-directory error", err)
	}
}

// TestOpenRefusesRepointablePaths (issue 24, item 2): root creates every
// sandbox's state below the root, so a state root reached through
// another user's symbolic link, or below a directory another user can
// change, is refused before anything is created, naming the culprit.
func TestOpenRefusesRepointablePaths(t *testing.T) {
	testutil.RequireRoot(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	os.Mkdir(target, 0o755)
	link := filepath.Join(dir, "agent-link")
	os.Symlink(target, link)
	os.Lchown(link, 10001, 10001)
	if _, err := Open(filepath.Join(link, "state")); err == nil || !strings.Contains(err.Error(), link+" is a symbolic link owned by uid 10001") {
		t.Errorf("through another user's link: %v", err)
	}
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := Open(filepath.Join(open, "state")); err == nil || !strings.Contains(err.Error(), open+" is writable by others") {
		t.Errorf("below a world-writable directory: %v", err)
	}
	owned := filepath.Join(dir, "owned")
	os.Mkdir(owned, 0o755)
	os.Chown(owned, 10001, 10001)
	if _, err := Open(filepath.Join(owned, "state")); err == nil || !strings.Contains(err.Error(), "owned by uid 10001") {
		t.Errorf("below another user's directory: %v", err)
	}
	for _, d := range []string{target, open, owned} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("something was created in %s", d)
		}
	}
	// A link of root's own is followed.
	rootLink := filepath.Join(dir, "root-link")
	os.Symlink(target, rootLink)
	s, err := Open(filepath.Join(rootLink, "state"))
	if err != nil || s.Root() != filepath.Join(target, "state") {
		t.Errorf("through root's own link: %v, root %v", err, s)
	}
}

func TestCreateGetUpdateRemove(t *testing.T) {
	s := openStore(t)
	before := time.Now().UTC().Truncate(time.Second)
	l, err := s.Create("", Labels{Kind: KindTask, AgentID: "agent_hub", PolicySHA256: strings.Repeat("ab", 32), PolicySource: "bundled"})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^sbx-[0-9a-f]{12}$`).MatchString(l.Name) {
		t.Fatalf("generated name %q, want sbx-<12 hex>", l.Name)
	}
	myStart, err := ProcStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if l.CreatorPID != os.Getpid() || l.CreatorStartTime != myStart {
		t.Fatalf("creator %d/%d, want %d/%d", l.CreatorPID, l.CreatorStartTime, os.Getpid(), myStart)
	}
	if l.Owner == "" || l.Kind != KindTask || l.Status != StatusCreated || l.Keep {
		t.Fatalf("defaults not filled: %+v", l)
	}
	if l.Created.Before(before) || l.Created.After(time.Now()) || l.Created.Location() != time.UTC {
		t.Fatalf("created %v not now in UTC", l.Created)
	}

	dir := filepath.Join(s.Root(), l.Name)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("sandbox dir: %v %v, want mode 0700", fi.Mode(), err)
	}
	p := filepath.Join(dir, LabelsFile)
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("labels.json: %v, want mode 0600", err)
	}
	raw, _ := os.ReadFile(p)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "owner", "kind", "creator_pid", "creator_start_time", "keep", "created", "agent_id", "policy_sha256", "policy_source", "status"} {
		if _, ok := m[k]; !ok {
			t.Errorf("labels.json lacks %q: %s", k, raw)
		}
	}
	if c, _ := m["created"].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(c) {
		t.Errorf("created %q is not RFC3339 UTC", c)
	}
	if _, ok := m["exit_code"]; ok {
		t.Errorf("unset exit_code written: %s", raw)
	}

	got, err := s.Get(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(l) {
		t.Fatalf("Get = %+v, want %+v", got, l)
	}

	code := 3
	u, err := s.Update(l.Name, func(l *Labels) {
		l.Status = StatusExited
		l.InitPID = 4242
		l.ExitCode = &code
		l.Extra = map[string]string{"fence": "veth-abc"}
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = s.Get(l.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusExited || got.InitPID != 4242 || got.ExitCode == nil || *got.ExitCode != 3 || got.Extra["fence"] != "veth-abc" || got.AgentID != "agent_hub" {
		t.Fatalf("after Update, Get = %+v (Update returned %+v)", got, u)
	}
	if _, err := s.Update(l.Name, func(l *Labels) { l.Name = "other" }); err == nil {
		t.Fatal("Update renamed the sandbox")
	}
	if _, err := s.Update(l.Name, func(l *Labels) { l.Kind = "weird" }); err == nil {
		t.Fatal("Update accepted kind \"weird\"")
	}
	if got2, _ := s.Get(l.Name); got2.Name != l.Name || got2.Kind != KindTask {
		t.Fatalf("rejected update was written: %+v", got2)
	}

	if err := s.Remove(l.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir still there after Remove: %v", err)
	}
	if _, err := s.Get(l.Name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Remove = %v, want ErrNotFound", err)
	}
	if _, err := s.Update(l.Name, func(*Labels) {}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Update after Remove = %v, want ErrNotFound", err)
	}
	if err := s.Remove(l.Name); err != nil {
		t.Fatalf("second Remove = %v, want nil", err)
	}
}

func TestCreateTakenName(t *testing.T) {
	s := openStore(t)
	first, err := s.Create("box-1", Labels{Kind: KindVerify, AgentID: "first"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Create("box-1", Labels{Kind: KindTask, AgentID: "second"})
	if err == nil || err.Error() != `sandbox name "box-1" is taken` {
		t.Fatalf("second Create = %v, want taken error", err)
	}
	got, err := s.Get("box-1")
	if err != nil || got.AgentID != "first" || got.Kind != first.Kind {
		t.Fatalf("first sandbox changed: %+v %v", got, err)
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	s := openStore(t)
	if _, err := s.Create("Bad/Name", Labels{}); err == nil || !strings.Contains(err.Error(), "sandbox name") {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := s.Create("ok", Labels{Kind: "daemon"}); err == nil || !strings.Contains(err.Error(), "kind") {
		t.Fatalf("bad kind: %v", err)
	}
	if _, err := s.Create("ok2", Labels{CreatorPID: deadPID(t)}); err == nil || !strings.Contains(err.Error(), "creator_pid") {
		t.Fatalf("dead creator without start time: %v", err)
	}
	ents, err := s.List()
	if err != nil || len(ents) != 0 {
		t.Fatalf("failed creates left %d entries (%v)", len(ents), err)
	}
}

func TestValidateName(t *testing.T) {
	good := []string{"a", "0", "sbx-0123456789ab", "a.b_c-d", strings.Repeat("x", 63)}
	bad := []string{"", ".", "..", "-a", "_a", ".hidden", "A", "a/b", "../x", "a b", "a\x00", strings.Repeat("x", 64), "é"}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateName(n); err == nil {
			t.Errorf("ValidateName(%q) accepted", n)
		}
	}
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		n := GenerateName()
		if ValidateName(n) != nil || seen[n] {
			t.Fatalf("GenerateName gave %q (invalid or repeated)", n)
		}
		seen[n] = true
	}
}

func TestListReportsUnreadable(t *testing.T) {
	s := openStore(t)
	if _, err := s.Create("good", Labels{}); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(s.Root(), "nolabels"), 0o700)
	os.Mkdir(filepath.Join(s.Root(), "corrupt"), 0o700)
	os.WriteFile(filepath.Join(s.Root(), "corrupt", LabelsFile), []byte("{not json"), 0o600)
	os.Mkdir(filepath.Join(s.Root(), "wrongname"), 0o700)
	os.WriteFile(filepath.Join(s.Root(), "wrongname", LabelsFile), []byte(`{"name":"other","kind":"task"}`), 0o600)
	os.WriteFile(filepath.Join(s.Root(), "plainfile"), nil, 0o600)
	os.Mkdir(filepath.Join(s.Root(), ".tmp-x"), 0o700)

	ents, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
		if (e.Err == nil) != (e.Name == "good") {
			t.Errorf("%s: Err = %v", e.Name, e.Err)
		}
	}
	if got := strings.Join(names, ","); got != "corrupt,good,nolabels,wrongname" {
		t.Fatalf("List names = %s", got)
	}
	if _, err := s.Get("nolabels"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(nolabels) = %v, want an unreadable (not not-found) error", err)
	}
}

func TestConcurrentUpdatesAreNotLost(t *testing.T) {
	s := openStore(t)
	if _, err := s.Create("busy", Labels{}); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Update("busy", func(l *Labels) {
				if l.Extra == nil {
					l.Extra = map[string]string{}
				}
				c, _ := strconv.Atoi(l.Extra["count"])
				l.Extra["count"] = strconv.Itoa(c + 1)
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := s.Get("busy")
	if err != nil {
		t.Fatal(err)
	}
	if l.Extra["count"] != strconv.Itoa(n) {
		t.Fatalf("count = %s after %d concurrent updates", l.Extra["count"], n)
	}
}

func TestParseStatStartTime(t *testing.T) {
	// Field 22 is 987654; the command name contains spaces and ')'.
	line := "1234 (evil) name (x) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 18446744073709551615"
	v, err := parseStatStartTime(line)
	if err != nil || v != 987654 {
		t.Fatalf("parseStatStartTime = %d, %v; want 987654", v, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 notanumber"} {
		if _, err := parseStatStartTime(bad); err == nil {
			t.Errorf("parseStatStartTime(%q) accepted", bad)
		}
	}
	// A child started after us has a start time no earlier than ours.
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	mine, err := ProcStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	child, err := ProcStartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if child < mine || mine == 0 {
		t.Fatalf("child start %d < own start %d", child, mine)
	}
}

func TestStaleAfterFromEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": DefaultStaleAfter, "0": 0, "3600": time.Hour, " 86400 ": 24 * time.Hour} {
		got, err := StaleAfterFromEnv(func(k string) string {
			if k != StaleAfterEnv {
				t.Fatalf("read %s", k)
			}
			return v
		})
		if err != nil || got != want {
			t.Errorf("%q: got %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"-1", "1h", "abc", "1.5", "99999999999999999999"} {
		if _, err := StaleAfterFromEnv(func(string) string { return v }); err == nil || !strings.Contains(err.Error(), StaleAfterEnv) {
			t.Errorf("%q: err = %v, want error naming %s", v, err, StaleAfterEnv)
		}
	}
}
