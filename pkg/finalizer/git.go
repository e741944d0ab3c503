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

// gitConfigArgs neutralise everything in a repository's configuration that
// could run a program or change what is committed or pushed. The
// repository's own config is additionally checked against an allow-list
// (checkRepoConfig) before anything runs.
var gitConfigArgs = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.untrackedCache=false",
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	"-c", "commit.gpgSign=false",
	"-c", "rebase.autoSquash=false",
	"-c", "rebase.autoStash=false",
	"-c", "rebase.updateRefs=false",
	"-c", "protocol.ext.allow=never",
	"-c", "advice.detachedHead=false",
}

// gitRunner runs git in one directory with a controlled environment: the
// caller's base environment minus every GIT_* variable, no system or
// global config, no prompts, no optional locks (so inspection never
// rewrites the index), literal pathspecs, a no-op editor and an explicit
// identity.
type gitRunner struct {
	dir string
	env []string
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

// with returns a copy running in dir with extra environment entries.
func (g *gitRunner) with(dir string, extra ...string) *gitRunner {
	env := append(append([]string{}, g.env...), extra...)
	return &gitRunner{dir: dir, env: env}
}

// gitError carries git's exit status and stderr.
type gitError struct {
	args   []string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		msg = fmt.Sprintf("exit status %d", e.code)
	}
	return fmt.Sprintf("git %s: %s", strings.Join(e.args, " "), msg)
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
	cmd := exec.CommandContext(ctx, "git", append(append([]string{}, gitConfigArgs...), args...)...)
	cmd.Dir = g.dir
	cmd.Env = g.env
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.Bytes(), &gitError{args: args, code: ee.ExitCode(), stderr: errb.String()}
		}
		return out.Bytes(), fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return out.Bytes(), nil
}

// line runs git and returns stdout trimmed of surrounding whitespace.
func (g *gitRunner) line(ctx context.Context, args ...string) (string, error) {
	out, err := g.run(ctx, nil, args...)
	return strings.TrimSpace(string(out)), err
}

// configEntry is one line of git config --list --show-scope.
type configEntry struct {
	scope, name, value string
}

func (g *gitRunner) configList(ctx context.Context) ([]configEntry, error) {
	out, err := g.run(ctx, nil, "config", "--list", "--show-scope", "-z")
	if err != nil {
		return nil, err
	}
	var entries []configEntry
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		name, value, _ := strings.Cut(fields[i+1], "\n")
		entries = append(entries, configEntry{scope: fields[i], name: strings.ToLower(name), value: value})
	}
	return entries, nil
}

// allowedConfig reports whether a repository-scope config key is harmless:
// none of these can run a program, rewrite content or redirect a push.
func allowedConfig(name, remote string) bool {
	switch name {
	case "core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
		"core.ignorecase", "core.precomposeunicode", "core.symlinks", "extensions.objectformat",
		"user.name", "user.email":
		return true
	}
	if strings.HasPrefix(name, "branch.") && (strings.HasSuffix(name, ".remote") || strings.HasSuffix(name, ".merge")) {
		return true
	}
	r := "remote." + strings.ToLower(remote) + "."
	if strings.HasPrefix(name, r) {
		switch strings.TrimPrefix(name, r) {
		case "url", "pushurl", "fetch":
			return true
		}
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
