package finalizer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Identity is the name and e-mail recorded as author and committer of the
// recovery commit and of rebased commits.
type Identity struct {
	Name  string
	Email string
}

// DefaultIdentity is used when the caller names none.
var DefaultIdentity = Identity{Name: "Palisade finalizer-recover", Email: "finalizer-recover@palisade.invalid"}

// gitConfigArgs neutralise everything that could run a program, change
// what is committed or pushed, or write outside the private mirror. Git
// never runs in the agent's .git: recovery works in a fresh mirror (see
// mirror.go), and the agent's config is only parsed and checked against an
// allow-list (checkRepoConfig).
var gitConfigArgs = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.untrackedCache=false",
	"-c", "core.logAllRefUpdates=false",
	"-c", "core.commitGraph=false",
	"-c", "core.alternateRefsCommand=true",
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	"-c", "fetch.writeCommitGraph=false",
	"-c", "fetch.recurseSubmodules=false",
	"-c", "submodule.recurse=false",
	"-c", "commit.gpgSign=false",
	"-c", "rebase.autoSquash=false",
	"-c", "rebase.autoStash=false",
	"-c", "rebase.updateRefs=false",
	"-c", "protocol.allow=never",
	"-c", "protocol.https.allow=always",
	"-c", "protocol.http.allow=always",
	"-c", "protocol.ssh.allow=always",
	"-c", "protocol.git.allow=always",
	"-c", "protocol.file.allow=never",
	"-c", "protocol.ext.allow=never",
	"-c", "advice.detachedHead=false",
}

// allowFileProtocol is appended (it wins over gitConfigArgs) only for the
// local transports recovery expects: the private mirror, and a canonical
// remote that is a local path outside the workspace.
var allowFileProtocol = []string{"-c", "protocol.file.allow=always"}

// gitRunner runs git in one directory with a controlled environment: the
// caller's base environment minus every GIT_* variable, no system or
// global config, no prompts, no optional locks (so inspection never
// rewrites the index), literal pathspecs, a no-op editor and an explicit
// identity.
type gitRunner struct {
	dir string
	env []string
	// pre goes between the config and the subcommand: --git-dir,
	// --work-tree, extra -c.
	pre []string
	// remoteStderr lets a sanitized line of git's stderr into errors:
	// only for commands that talk to a network remote, whose messages
	// come from the remote, never from a workspace file.
	remoteStderr bool
}

func newGitRunner(dir string, base []string, id Identity) *gitRunner {
	env := make([]string, 0, len(base)+16)
	for _, kv := range base {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "LC_ALL=") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_OPTIONAL_LOCKS=0",
		"GIT_LITERAL_PATHSPECS=1",
		"GIT_EDITOR=true",
		"GIT_SEQUENCE_EDITOR=true",
		"GIT_MERGE_AUTOEDIT=no",
		"LC_ALL=C",
		"GIT_AUTHOR_NAME="+id.Name,
		"GIT_AUTHOR_EMAIL="+id.Email,
		"GIT_COMMITTER_NAME="+id.Name,
		"GIT_COMMITTER_EMAIL="+id.Email,
	)
	return &gitRunner{dir: dir, env: env}
}

// with returns a copy running in dir with extra environment entries and
// without the global options.
func (g *gitRunner) with(dir string, extra ...string) *gitRunner {
	env := append(append([]string{}, g.env...), extra...)
	return &gitRunner{dir: dir, env: env}
}

// withArgs returns a copy with extra global options (after g's).
func (g *gitRunner) withArgs(pre ...string) *gitRunner {
	c := *g
	c.pre = append(append([]string{}, g.pre...), pre...)
	return &c
}

// withEnv returns a copy with extra environment entries.
func (g *gitRunner) withEnv(extra ...string) *gitRunner {
	c := *g
	c.env = append(append([]string{}, g.env...), extra...)
	return &c
}

// gitError carries git's exit status. Its message never includes git's
// stderr, which can quote the files git read (a config line, a ref file);
// only a sanitized last line from a network remote is shown.
type gitError struct {
	sub    string
	code   int
	detail string
}

func (e *gitError) Error() string {
	msg := fmt.Sprintf("git %s failed (exit status %d)", e.sub, e.code)
	if e.detail != "" {
		msg += ": " + e.detail
	}
	return msg
}

// remoteDetail returns the last non-empty line of a remote's stderr,
// printable characters only, at most 200 bytes.
func remoteDetail(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	l := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8RuneError {
			return -1
		}
		return r
	}, strings.ToValidUTF8(lines[len(lines)-1], ""))
	if len(l) > 200 {
		l = l[:200]
	}
	return strings.TrimSpace(l)
}

func exitCode(err error) int {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.code
	}
	return -1
}

// run runs git with args and returns stdout.
func (g *gitRunner) run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	argv := append(append(append([]string{}, gitConfigArgs...), g.pre...), args...)
	cmd := exec.CommandContext(ctx, "git", argv...)
	cmd.Dir = g.dir
	cmd.Env = g.env
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if ctx.Err() != nil {
			return out.Bytes(), fmt.Errorf("git %s: %w", args[0], ctx.Err())
		}
		if errors.As(err, &ee) {
			ge := &gitError{sub: args[0], code: ee.ExitCode()}
			if g.remoteStderr {
				ge.detail = remoteDetail(errb.String())
			}
			return out.Bytes(), ge
		}
		return out.Bytes(), fmt.Errorf("git %s: %w", args[0], err)
	}
	return out.Bytes(), nil
}

// line runs git and returns stdout trimmed of surrounding whitespace.
func (g *gitRunner) line(ctx context.Context, args ...string) (string, error) {
	out, err := g.run(ctx, nil, args...)
	return strings.TrimSpace(string(out)), err
}

// configEntry is one variable of a config file: section and key are
// lower case (git folds them), subsection keeps its case (git compares it
// exactly), as git itself reads them.
type configEntry struct {
	section, subsection, key, value string
}

func (e configEntry) name() string {
	if e.subsection == "" {
		return e.section + "." + e.key
	}
	return e.section + "." + e.subsection + "." + e.key
}

// configFile parses a private copy of a config file with git's own parser
// (--file: no other file is read; --no-includes: include directives are
// listed, not followed).
func (g *gitRunner) configFile(ctx context.Context, path string) ([]configEntry, error) {
	out, err := g.run(ctx, nil, "config", "--file", path, "--no-includes", "--list", "-z")
	if err != nil {
		return nil, err
	}
	var entries []configEntry
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		name, value, _ := strings.Cut(rec, "\n")
		entries = append(entries, splitConfigName(name, value))
	}
	return entries, nil
}

// splitConfigName splits section[.subsection].key: the section ends at
// the first dot, the key starts after the last one.
func splitConfigName(name, value string) configEntry {
	first, last := strings.IndexByte(name, '.'), strings.LastIndexByte(name, '.')
	if first < 0 {
		return configEntry{section: strings.ToLower(name), value: value}
	}
	e := configEntry{section: strings.ToLower(name[:first]), key: strings.ToLower(name[last+1:]), value: value}
	if last > first {
		e.subsection = name[first+1 : last]
	}
	return e
}

// allowedConfig reports whether a repository config variable is harmless:
// none of these can run a program, rewrite content or redirect a push.
// Subsection names compare exactly, as git compares them: [remote "ORIGIN"]
// is not the remote "origin".
func allowedConfig(e configEntry, remote string) bool {
	switch e.section {
	case "core":
		switch e.key {
		case "repositoryformatversion", "filemode", "bare", "logallrefupdates",
			"ignorecase", "precomposeunicode", "symlinks":
			return e.subsection == ""
		}
	case "extensions":
		return e.subsection == "" && e.key == "objectformat"
	case "user":
		return e.subsection == "" && (e.key == "name" || e.key == "email")
	case "branch":
		return e.subsection != "" && (e.key == "remote" || e.key == "merge")
	case "remote":
		return e.subsection == remote && (e.key == "url" || e.key == "pushurl" || e.key == "fetch")
	}
	return false
}

// statusEntry is one line of git status --porcelain=v1.
type statusEntry struct {
	x, y byte
	path string
}

func (g *gitRunner) status(ctx context.Context) ([]statusEntry, error) {
	out, err := g.run(ctx, nil, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=all")
	if err != nil {
		return nil, err
	}
	var entries []statusEntry
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		if len(rec) < 4 || rec[2] != ' ' {
			return nil, fmt.Errorf("git status: unexpected record %q", rec)
		}
		entries = append(entries, statusEntry{x: rec[0], y: rec[1], path: rec[3:]})
	}
	return entries, nil
}
