package seccomp

import (
	"maps"
	"slices"
	"testing"
)

// wantArgRules is every rule of the default profile that is not a plain
// "deny this syscall whatever its arguments" (those are deniedWhatever),
// written out by hand with its action. The case table (cases_test.go)
// exercises each with hand-chosen arguments.
var wantArgRules = map[string]struct {
	syscall string
	action  Action
}{
	"arch":                     {"*", ActionKillProcess},
	"x32":                      {"*", ActionErrno(EPERM)},
	"clone3":                   {"clone3", ActionErrno(ENOSYS)},
	"clone-namespace":          {"clone", ActionErrno(EPERM)},
	"unshare-namespace":        {"unshare", ActionErrno(EPERM)},
	"socket-af-packet":         {"socket", ActionErrno(EPERM)},
	"socket-af-vsock":          {"socket", ActionErrno(EPERM)},
	"socket-af-bluetooth":      {"socket", ActionErrno(EPERM)},
	"socket-af-alg":            {"socket", ActionErrno(EPERM)},
	"socket-netlink-non-route": {"socket", ActionErrno(EPERM)},
	"socket-raw":               {"socket", ActionErrno(EPERM)},
	"socket-mptcp":             {"socket", ActionErrno(EPERM)},
	"ioctl-tiocsti":            {"ioctl", ActionErrno(EPERM)},
	"ioctl-tioclinux":          {"ioctl", ActionErrno(EPERM)},
	"ioctl-tiocsetd":           {"ioctl", ActionErrno(EPERM)},
}

// The default profile is exactly the hand-written deny list: no rule of
// the list is missing from the profile (or has another action), and the
// profile has no rule the list lacks. Together with the case table, which
// runs every listed syscall and argument rule through the compiled filter
// (TestFilterTableInVM) and the kernel (TestFilterTableInKernel), dropping
// a syscall or a rule from profile.go fails a test.
func TestProfileMatchesTheDenyList(t *testing.T) {
	got := map[string]Rule{}
	for _, r := range DefaultProfile().Rules() {
		got[r.Name] = r
	}
	want := maps.Clone(wantArgRules)
	for s := range deniedWhatever {
		if _, dup := want[s]; dup {
			t.Fatalf("%s is listed both as an argument rule and as denied whatever its arguments", s)
		}
		want[s] = struct {
			syscall string
			action  Action
		}{s, ActionErrno(EPERM)}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w := want[name]
		r, ok := got[name]
		switch {
		case !ok:
			t.Errorf("rule %q (%s, %v) is missing from the default profile", name, w.syscall, w.action)
		case r.Syscall != w.syscall || r.Action != w.action:
			t.Errorf("rule %q is %s -> %v, want %s -> %v", name, r.Syscall, r.Action, w.syscall, w.action)
		}
		if _, whatever := deniedWhatever[name]; ok && whatever && r.Condition != "" {
			t.Errorf("rule %q has a condition (%s); the list denies %s whatever its arguments", name, r.Condition, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			t.Errorf("the default profile has rule %q (%s -> %v) that the hand-written deny list lacks: add it to deniedWhatever or wantArgRules", name, got[name].Syscall, got[name].Action)
		}
	}
	// Every listed rule has a case that expects the filter to refuse.
	denied := map[string]bool{}
	for _, c := range cases() {
		if c.want != allow {
			denied[c.rule] = true
		}
	}
	denied["arch"] = true // TestFilterForeignArchKills runs every arch
	for name := range want {
		if !denied[name] {
			t.Errorf("rule %q has no refusing case in the case table", name)
		}
	}
}
