// Package binaries says what a policy's listed binaries really are on
// this host, because the proxy matches the file the kernel runs
// (/proc/PID/exe: a symlink resolved, a script's interpreter, never the
// script) against network_policies.*.binaries. A policy that lists
// /usr/bin/npm (a link to a script node runs) passes validation and then
// matches nothing: every request is refused as binary_not_allowed for
// /usr/bin/node. Notes finds those cases, a listed path that does not
// exist, and a listed general interpreter (python, node, sh...), whose
// access any code it runs inherits. policy-sync check, sandbox-supervisor
// run and egress-proxy's policy load all report them through Notes; they
// are warnings, never a reason to refuse a policy.
package binaries

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Kind is what a note is about.
type Kind string

// The kinds of note.
const (
	// Missing: the path (or every file a glob could match) does not exist
	// here, or is not a file the kernel could run.
	Missing Kind = "missing"
	// Script: a "#!" script, or a symlink to one. The kernel runs its
	// interpreter, which is what the proxy sees connect.
	Script Kind = "script"
	// Symlink: a symlink to an executable. The kernel names the target.
	Symlink Kind = "symlink"
	// Interpreter: a general interpreter (or a glob matching one): any
	// code it runs, and every program started under it, gets the access.
	Interpreter Kind = "interpreter"
)

// Note is one finding about one listed path, however many entries list
// it.
type Note struct {
	Kind Kind   `json:"kind"`
	Path string `json:"path"` // as listed (normalised)
	// Fields are the lists that name Path (network_policies.KEY.binaries),
	// in key order.
	Fields []string `json:"fields"`
	// Runs is the file the kernel runs instead, for Script and Symlink:
	// the path to list.
	Runs    string `json:"runs,omitempty"`
	Message string `json:"message"`
}

// Actionable reports whether the note calls for a change to the policy
// (warn level): a script or symlink the entry never matches, a general
// interpreter's reach. A missing path is often meant (a policy written
// for several kinds of host lists /usr/bin/node and /usr/local/bin/node),
// so it is said at info level where a sandbox is run.
func (n Note) Actionable() bool { return n.Kind != Missing }

// String is the note as one line: the lists naming the path, then the
// message.
func (n Note) String() string { return strings.Join(n.Fields, ", ") + ": " + n.Message }

// Options tune Notes.
type Options struct {
	// Path is the PATH in which "#!/usr/bin/env NAME" finds NAME ("": the
	// sandbox's standard PATH).
	Path string
}

// standardPath is the end of every sandbox's PATH (sandbox.DefaultPath).
const standardPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Notes analyses every binary the policy's network entries list, as this
// host's filesystem has them now, and returns one note per listed path
// that deserves one, in the order of the entries' keys. A script or
// symlink whose real program the same entries list too gets no note (it
// is merely redundant).
func Notes(p *policy.Policy, opt Options) []Note {
	if opt.Path == "" {
		opt.Path = standardPath
	}
	keys := make([]string, 0, len(p.NetworkPolicies))
	for k := range p.NetworkPolicies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	byPath := map[string]*Note{}
	var order []string
	listedIn := map[string][]string{} // path -> entry keys
	for _, k := range keys {
		for _, b := range p.NetworkPolicies[k].Binaries {
			field := "network_policies." + k + ".binaries"
			listedIn[b.Path] = append(listedIn[b.Path], k)
			if n, ok := byPath[b.Path]; ok {
				if n != nil {
					n.Fields = append(n.Fields, field)
				}
				continue
			}
			n := analyse(b.Path, opt)
			if n != nil {
				n.Fields = []string{field}
				order = append(order, b.Path)
			}
			byPath[b.Path] = n
		}
	}
	var out []Note
	for _, bin := range order {
		n := byPath[bin]
		if n.Runs != "" && coveredBy(p, listedIn[bin], n.Runs) {
			continue
		}
		out = append(out, *n)
	}
	return out
}

// coveredBy reports whether every one of the entries also lists a
// pattern matching exe.
func coveredBy(p *policy.Policy, entries []string, exe string) bool {
	for _, k := range entries {
		found := false
		for _, b := range p.NetworkPolicies[k].Binaries {
			if policy.MatchBinary(b.Path, exe) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// analyse is the note about one listed path, or nil.
func analyse(bin string, opt Options) *Note {
	if strings.ContainsAny(bin, "*?[") {
		return analyseGlob(bin)
	}
	fi, err := os.Lstat(bin)
	if errors.Is(err, fs.ErrNotExist) {
		return &Note{Kind: Missing, Path: bin, Message: bin + " does not exist on this host: this entry matches nothing through it until it does"}
	}
	if err != nil {
		return nil // unreadable here: nothing true to say
	}
	real, via := bin, ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if real, err = filepath.EvalSymlinks(bin); err != nil {
			target, _ := os.Readlink(bin)
			return &Note{Kind: Missing, Path: bin, Message: fmt.Sprintf("%s is a symlink to %s, which does not exist on this host: this entry matches nothing through it", bin, target)}
		}
		via = fmt.Sprintf("%s is a symlink to %s", bin, real)
		if fi, err = os.Stat(real); err != nil {
			return nil
		}
	}
	if !fi.Mode().IsRegular() {
		return &Note{Kind: Missing, Path: bin, Message: fmt.Sprintf("%s is not a file the kernel could run (%s): this entry matches nothing through it", bin, fi.Mode().Type())}
	}
	if interp, line, ok := scriptInterpreter(real, opt.Path); ok {
		what := bin + " is a script"
		if via != "" {
			what = via + ", a script"
		}
		if interp == "" {
			return &Note{Kind: Script, Path: bin, Message: fmt.Sprintf("%s (%s) whose interpreter is not found on this host: the proxy never sees %s connect, so this entry matches nothing through it", what, line, bin)}
		}
		return &Note{Kind: Script, Path: bin, Runs: interp, Message: fmt.Sprintf(
			"%s run by %s (%s): the proxy sees %s connect (or a program it starts), never %s, so this entry never matches it; list %s instead%s",
			what, interp, line, interp, bin, interp, interpreterClause(interp))}
	}
	if via != "" {
		return &Note{Kind: Symlink, Path: bin, Runs: real, Message: fmt.Sprintf(
			"%s: the kernel names the file it runs, so the proxy sees %s connect, never %s, and this entry never matches it; list %s instead%s",
			via, real, bin, real, interpreterClause(real))}
	}
	if IsInterpreter(bin) {
		return &Note{Kind: Interpreter, Path: bin, Message: bin + " is a general interpreter: " + interpreterRisk}
	}
	return nil
}

const interpreterRisk = "any code it runs, a script the agent writes included, and every program started under it get this entry's access"

func interpreterClause(exe string) string {
	if !IsInterpreter(exe) {
		return ""
	}
	return "; it is a general interpreter: " + interpreterRisk
}

// analyseGlob notes a glob that matches no file here, or that matches a
// general interpreter. A "**" pattern is not expanded.
func analyseGlob(bin string) *Note {
	if strings.Contains(bin, "**") {
		return nil
	}
	matches, err := filepath.Glob(bin)
	if err != nil {
		return nil
	}
	if len(matches) == 0 {
		return &Note{Kind: Missing, Path: bin, Message: bin + " matches no file on this host: this entry matches nothing through it until one exists"}
	}
	for _, m := range matches {
		real, err := filepath.EvalSymlinks(m)
		if err != nil {
			continue
		}
		if IsInterpreter(m) || IsInterpreter(real) {
			return &Note{Kind: Interpreter, Path: bin, Message: fmt.Sprintf("%s matches %s, a general interpreter: %s", bin, m, interpreterRisk)}
		}
	}
	return nil
}

// interpreterName matches the base names of general interpreters and
// launchers: programs that run code or programs they are handed. It is
// compiled on first use, not at package initialisation: every start of
// every binary that links this package (the sandbox's init among them)
// paid about 0.1 ms for it (GODEBUG=inittrace=1, median of 40 starts).
var interpreterName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(?:` +
		`(?:python|pypy)[0-9.]*|node|nodejs|deno|bun|` +
		`sh|bash|dash|zsh|ksh|ksh93|mksh|yash|fish|csh|tcsh|busybox|` +
		`perl[0-9.]*|ruby[0-9.]*|php[0-9.]*|lua(?:jit|[0-9.]*)|tclsh[0-9.]*|` +
		`java|jshell|julia|Rscript|guile[0-9.]*|osascript|env)$`)
})

// IsInterpreter reports whether the executable at exe is, by its name, a
// general interpreter (python, node, sh, bash, perl, ruby, php, lua, ...)
// or env, which runs whatever it is given.
func IsInterpreter(exe string) bool { return interpreterName().MatchString(path.Base(exe)) }

// maxScriptDepth bounds following a script's interpreter when that is a
// script too (the kernel stops at 4 levels).
const maxScriptDepth = 4

// scriptInterpreter reports whether file is a "#!" script, with the
// executable the kernel ends up running for it (symlinks resolved,
// "/usr/bin/env NAME" looked up in PATH, nested scripts followed; ""
// when it cannot be found) and the "#!" line.
func scriptInterpreter(file, pathList string) (string, string, bool) {
	first := ""
	for depth := 0; depth < maxScriptDepth; depth++ {
		line, ok := shebang(file)
		if !ok {
			if depth == 0 {
				return "", "", false
			}
			return file, first, true
		}
		if depth == 0 {
			first = line
		}
		next := shebangProgram(line, pathList)
		if next == "" {
			return "", first, true
		}
		real, err := filepath.EvalSymlinks(next)
		if err != nil {
			return "", first, true
		}
		file = real
	}
	return "", first, true
}

// shebang reads the "#!" line of file (at most the kernel's 256 bytes).
func shebang(file string) (string, bool) {
	f, err := os.Open(file)
	if err != nil {
		return "", false
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	buf = buf[:n]
	if !bytes.HasPrefix(buf, []byte("#!")) {
		return "", false
	}
	if i := bytes.IndexByte(buf, '\n'); i >= 0 {
		buf = buf[:i]
	}
	return strings.TrimSpace(string(buf)), true
}

// shebangProgram is the program a "#!" line runs: the interpreter, or
// for env the first operand (after options, -S splitting its argument,
// and NAME=VALUE assignments) looked up in pathList. "" when there is
// none.
func shebangProgram(line, pathList string) string {
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	if len(fields) == 0 {
		return ""
	}
	interp := fields[0]
	if path.Base(interp) != "env" {
		return interp
	}
	// The kernel passes everything after the interpreter as one
	// argument; env -S splits it, and without -S env sees the words as
	// Linux hands them only when there is one.
	args := fields[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			continue
		case a == "-S" || a == "--split-string", a == "-i", a == "--ignore-environment", a == "-0", a == "--null":
			continue
		case strings.HasPrefix(a, "-S"):
			args = append([]string{a[2:]}, args[i+1:]...)
			i = -1
			continue
		case a == "-u" || a == "--unset" || a == "-C" || a == "--chdir":
			i++
			continue
		case strings.HasPrefix(a, "-"):
			continue
		case strings.Contains(a, "="):
			continue // NAME=VALUE
		}
		return lookPath(a, pathList)
	}
	return ""
}

// lookPath finds name as a shell would: a name with a slash as it is,
// else the first executable regular file in pathList's directories.
func lookPath(name, pathList string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}
