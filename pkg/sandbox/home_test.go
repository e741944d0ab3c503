package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestSandboxPath(t *testing.T) {
	ro := []string{"/usr", "/opt/tools/", "/bin"}
	for _, c := range []struct{ caller, want string }{
		// Kept in the caller's order, then the standard entries not yet
		// listed; outside read_only, relative and empty entries go.
		{"/usr/local/go/bin:/home/me/bin:.:bin::/opt/tools/node/bin:/usr/bin:/tmp",
			"/usr/local/go/bin:/opt/tools/node/bin:/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin:/bin"},
		{"", DefaultPath},
		// Cleaned and listed once; a sibling with a common prefix is not under.
		{"/usr/local/go/bin/:/usr/local/go/bin:/usrx/bin:/opt/toolsx", "/usr/local/go/bin:" + DefaultPath},
		{"/bin:/usr/bin", "/bin:/usr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin"},
	} {
		if got := SandboxPath(c.caller, ro); got != c.want {
			t.Errorf("SandboxPath(%q)\n got %s\nwant %s", c.caller, got, c.want)
		}
	}
	if got := SandboxPath("/usr/local/go/bin", nil); got != DefaultPath {
		t.Errorf("no read_only paths: %s", got)
	}
	env, err := BuildEnv(EnvInput{Host: []string{"PATH=/usr/local/go/bin:/root/bin"}, ReadOnly: ro, Home: "/srv/h/", Workdir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	joined := "\n" + strings.Join(env, "\n") + "\n"
	for _, want := range []string{"\nPATH=/usr/local/go/bin:" + DefaultPath + "\n", "\nHOME=/srv/h\n"} {
		if !strings.Contains(joined, want) {
			t.Errorf("env lacks %q:%s", want, joined)
		}
	}
}

func TestBuildSpecBindsHome(t *testing.T) {
	base := SpecInput{Name: "s", Args: []string{"/bin/true"}, Workdir: "/srv/task", UID: 10001, GID: 10001,
		HidePaths: []string{"/var/lib/palisade/sandboxes"}}
	binds := func(s *specs.Spec) []string {
		var out []string
		for _, m := range s.Mounts {
			if m.Type == "bind" {
				out = append(out, m.Source+"->"+m.Destination)
			}
		}
		return out
	}
	in := base
	in.Home, in.HomeSource = DefaultHome, "/var/lib/palisade/sandboxes/s/home"
	s, err := BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	// HOME before the workdir (a workdir inside HOME shows through it).
	if got := strings.Join(binds(s), " "); got != "/var/lib/palisade/sandboxes/s/home->/run/palisade/home /srv/task->/srv/task" {
		t.Errorf("binds: %s", got)
	}
	in.Home, in.HomeSource = "/srv/task", "/srv/task"
	if s, _ = BuildSpec(in); len(binds(s)) != 1 {
		t.Errorf("HOME = workdir bound twice: %v", binds(s))
	}
	for _, bad := range []SpecInput{
		{Home: "/var/lib/palisade/sandboxes/x", HomeSource: "/var/lib/palisade/sandboxes/x"},
		{Home: DefaultHome},
		{Home: "rel", HomeSource: "rel"},
	} {
		in := base
		in.Home, in.HomeSource = bad.Home, bad.HomeSource
		if _, err := BuildSpec(in); err == nil {
			t.Errorf("BuildSpec accepted home %q from %q", bad.Home, bad.HomeSource)
		}
	}
}

func TestCheckHome(t *testing.T) {
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	other, otherGID := uid+4242, gid+4242 // the "sandbox identity": owns nothing here
	root := t.TempDir()
	wd := filepath.Join(root, "work")
	rw := filepath.Join(root, "rw")
	mine := filepath.Join(root, "mine")
	for _, d := range []string{wd, rw, mine} {
		os.Mkdir(d, 0o755)
	}
	os.Symlink(wd, filepath.Join(root, "to-work"))
	os.Symlink(mine, filepath.Join(root, "to-mine"))
	os.Symlink(root, filepath.Join(root, "foreign"))
	os.Lchown(filepath.Join(root, "foreign"), int(uid+4242), -1)
	for _, c := range []struct {
		home       string
		sandboxUID uint32
		want       string // "" accepted
	}{
		{filepath.Join(root, "h"), other, ""},
		{filepath.Join(root, "h") + "/", other, ""},
		{wd, other, ""},
		{filepath.Join(wd, ".home"), other, "lies inside the working directory"},
		{filepath.Join(root, "to-work", "h"), other, "lies inside the working directory"},
		{filepath.Join(rw, "h"), other, "lies inside filesystem_policy.read_write[0]"},
		{filepath.Join(mine, "h"), uid, "is owned by the sandbox identity"},
		{filepath.Join(root, "foreign", "h"), other, "symbolic link owned by uid"},
		{filepath.Join(root, "nope", "h"), other, "does not exist"},
		{"relative/h", other, "must be an absolute path"},
		{"/", other, "other than /"},
	} {
		got, _, err := CheckHome(c.home, wd, []string{rw, "/tmp"}, PrivateReadWrite, c.sandboxUID, otherGID)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckHome(%s): %v", c.home, err)
		case c.want == "" && got != filepath.Clean(c.home):
			t.Errorf("CheckHome(%s) = %s", c.home, got)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("CheckHome(%s): %v, want %q", c.home, err, c.want)
		}
	}
	// A link of this user's (root's, in the supervisor) is followed: the
	// directory to create is where it leads.
	if clean, real, err := CheckHome(filepath.Join(root, "to-mine", "h"), wd, nil, nil, other, otherGID); err != nil ||
		clean != filepath.Join(root, "to-mine", "h") || real != filepath.Join(mine, "h") {
		t.Errorf("through an own link: %s %s %v", clean, real, err)
	}
	// Group- and world-writable directories on the way are refused; a
	// sticky world-writable one (/tmp) is not.
	os.Chmod(mine, 0o777)
	if _, _, err := CheckHome(filepath.Join(mine, "h"), wd, nil, nil, other, otherGID); err == nil || !strings.Contains(err.Error(), "world-writable") {
		t.Errorf("world-writable parent: %v", err)
	}
	os.Chmod(mine, os.ModeSticky|0o777)
	if _, _, err := CheckHome(filepath.Join(mine, "h"), wd, nil, nil, other, otherGID); err != nil {
		t.Errorf("sticky parent: %v", err)
	}
	os.Chmod(mine, 0o775)
	if _, _, err := CheckHome(filepath.Join(mine, "h"), wd, nil, nil, other, gid); err == nil || !strings.Contains(err.Error(), "writable by the sandbox group") {
		t.Errorf("group-writable parent: %v", err)
	}
}
