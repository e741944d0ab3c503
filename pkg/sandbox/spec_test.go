package sandbox

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func baseInput() SpecInput {
	return SpecInput{Name: "sbx-1", Kind: "task", Args: []string{"/bin/true"}, Env: []string{"PATH=/bin"},
		Workdir: "/tmp/work", UID: 10001, GID: 10001, Hostname: "sbx-1", PolicySHA: "abc", Compat: "hard_requirement",
		HidePaths: []string{"/run/palisade/sandboxes", "/srv/state"}}
}

func TestBuildSpec(t *testing.T) {
	s, err := BuildSpec(baseInput())
	if err != nil {
		t.Fatal(err)
	}
	ns := map[specs.LinuxNamespaceType]bool{}
	for _, n := range s.Linux.Namespaces {
		ns[n.Type] = true
	}
	for _, want := range []specs.LinuxNamespaceType{specs.MountNamespace, specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.NetworkNamespace, specs.CgroupNamespace} {
		if !ns[want] {
			t.Errorf("namespace %s missing", want)
		}
	}
	if ns[specs.UserNamespace] {
		t.Error("user namespace in spec")
	}
	if *s.Linux.Resources.Pids.Limit != DefaultPidsLimit {
		t.Errorf("pids limit %d", *s.Linux.Resources.Pids.Limit)
	}
	c := s.Process.Capabilities
	if len(c.Bounding)+len(c.Effective)+len(c.Inheritable)+len(c.Permitted)+len(c.Ambient) != 0 || !s.Process.NoNewPrivileges {
		t.Error("capabilities or no_new_privs not dropped in spec")
	}
	if s.Process.Rlimits[0].Type != "RLIMIT_CORE" || s.Process.Rlimits[0].Hard != 0 {
		t.Error("core dumps not disabled")
	}
	// The workdir is the last mount, so it shows through the fresh /tmp.
	last := s.Mounts[len(s.Mounts)-1]
	if last.Destination != "/tmp/work" || last.Type != "bind" {
		t.Errorf("last mount %+v, want the workdir bind", last)
	}
	// /run/palisade is under the fresh /run; /srv/state gets its own tmpfs.
	var hidden []string
	for _, m := range s.Mounts {
		if strings.HasPrefix(m.Destination, "/srv") || strings.HasPrefix(m.Destination, "/run/") {
			hidden = append(hidden, m.Destination)
		}
	}
	if len(hidden) != 1 || hidden[0] != "/srv/state" {
		t.Errorf("hidden mounts %v", hidden)
	}
	for _, d := range s.Linux.Devices {
		if d.Type != "c" {
			t.Errorf("device %s of type %s", d.Path, d.Type)
		}
	}
}

func TestBuildSpecRejects(t *testing.T) {
	for name, mod := range map[string]func(*SpecInput){
		"root uid":         func(i *SpecInput) { i.UID = 0 },
		"root gid":         func(i *SpecInput) { i.GID = 0 },
		"no command":       func(i *SpecInput) { i.Args = nil },
		"relative workdir": func(i *SpecInput) { i.Workdir = "work" },
		"workdir /":        func(i *SpecInput) { i.Workdir = "/" },
		"workdir in state": func(i *SpecInput) { i.Workdir = "/srv/state/x" },
	} {
		in := baseInput()
		mod(&in)
		if _, err := BuildSpec(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestBuildSpecProfileAndLimits(t *testing.T) {
	in := baseInput()
	in.Profile = ProfileBoundedTmpfs
	in.MemoryBytes = 1 << 30
	in.CPUs = 1.5
	s, err := BuildSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range s.Mounts {
		if m.Destination == BoundedStoragePath && m.Type == "tmpfs" && strings.Contains(strings.Join(m.Options, ","), "size=8g") && strings.Contains(strings.Join(m.Options, ","), "mode=1777") {
			found = true
		}
	}
	if !found {
		t.Error("bounded-tmpfs storage mount missing")
	}
	if *s.Linux.Resources.Memory.Limit != 1<<30 || *s.Linux.Resources.CPU.Quota != 150000 {
		t.Errorf("limits %+v %+v", s.Linux.Resources.Memory, s.Linux.Resources.CPU)
	}
}

func TestBuildEnv(t *testing.T) {
	env, err := BuildEnv(EnvInput{
		Host:        []string{"SECRET=x", "MAC_HUB_URL=http://hub", "TERM=xterm-256color", "HOME=/root"},
		Set:         []string{"CI=1", "PATH=/opt/bin:/usr/bin"},
		Passthrough: []string{"MAC_HUB_URL", "NOT_SET"},
		Workdir:     "/w", Name: "sbx", TTY: true,
		Reserved: []string{"HTTP_PROXY=http://10.0.0.1:3128"},
	})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(env, "\n")
	for _, want := range []string{"CI=1", "PATH=/opt/bin:/usr/bin", "MAC_HUB_URL=http://hub", "HOME=" + DefaultHome, "TERM=xterm-256color", "HTTP_PROXY=http://10.0.0.1:3128", "PALISADE_SANDBOX=sbx"} {
		if !strings.Contains(joined+"\n", want+"\n") {
			t.Errorf("env lacks %s", want)
		}
	}
	for _, bad := range []string{"SECRET", "NOT_SET", "HOME=/root", "HOME=/w"} {
		if strings.Contains(joined, bad) {
			t.Errorf("env carries %s", bad)
		}
	}
	for _, c := range []EnvInput{
		{Set: []string{"HTTP_PROXY=http://evil"}},
		{Set: []string{"https_proxy=http://evil"}},
		{Set: []string{"NOEQUALS"}},
		{Set: []string{"1BAD=x"}},
		{Passthrough: []string{"ALL_PROXY"}},
		{Passthrough: []string{"bad-name"}},
	} {
		if _, err := BuildEnv(c); err == nil {
			t.Errorf("BuildEnv(%+v) accepted", c)
		}
	}
}

func TestScanIDs(t *testing.T) {
	db := "root:x:0:0::/root:/bin/sh\nsandbox:x:2345:2345::/:/bin/false\n"
	id, ok, err := scanIDs(strings.NewReader(db), "sandbox")
	if err != nil || !ok || id != 2345 {
		t.Fatalf("scanIDs = %d %v %v", id, ok, err)
	}
	if _, ok, _ := scanIDs(strings.NewReader(db), "nobody"); ok {
		t.Fatal("found a missing name")
	}
	for _, bad := range []string{"0", "root", "-1", "4294967295", "abc"} {
		if _, err := resolveID(bad, "/nonexistent", "run_as_user"); err == nil {
			t.Errorf("resolveID(%q) accepted", bad)
		}
	}
	if id, err := resolveID("sandbox", "/nonexistent", "run_as_user"); err != nil || id != SandboxID {
		t.Fatalf("sandbox without passwd entry = %d, %v", id, err)
	}
	if id, err := resolveID("4242", "/nonexistent", "run_as_user"); err != nil || id != 4242 {
		t.Fatalf("numeric = %d, %v", id, err)
	}
}

func TestDecide(t *testing.T) {
	all := func(missing ...string) Preflight {
		var pf Preflight
		for _, n := range PreflightFeatures {
			r := FeatureResult{Name: n, OK: true}
			for _, m := range missing {
				if m == n {
					r.OK, r.Detail = false, "absent"
				}
			}
			pf.Results = append(pf.Results, r)
		}
		pf.LandlockABI = 7
		return pf
	}
	if p, err := Decide(all(), true, false, false, false); err != nil || !p.Landlock || !p.Seccomp || len(p.Degraded) != 0 {
		t.Fatalf("full kernel: %+v %v", p, err)
	}
	if _, err := Decide(all("nftables"), true, false, false, true); err == nil {
		t.Fatal("network policies without nftables accepted")
	}
	if _, err := Decide(all("nftables"), true, false, false, false); err != nil {
		t.Fatalf("nftables required without network policies: %v", err)
	}
	pf := all()
	pf.LandlockABI = 2
	if _, err := Decide(pf, true, false, false, false); err == nil || !strings.Contains(err.Error(), "ABI 2") {
		t.Fatalf("ABI 2 under hard_requirement: %v", err)
	}
	if p, err := Decide(all("bpf:sock_ops"), true, false, false, false); err != nil || len(p.Degraded) != 0 {
		t.Fatalf("optional eBPF missing: %+v %v", p, err)
	}
}
