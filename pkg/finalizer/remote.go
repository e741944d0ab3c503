package finalizer

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// remoteTarget is where recovery fetches from and pushes to: the
// evidence's remote_url itself, never a remote name looked up in the
// agent's config, and only when it equals the URL the operator named
// (Options.Remote).
type remoteTarget struct {
	url   string // what git is given
	local bool   // a path on this host: the file protocol, hooks disabled
}

// localRemoteConfig starts the remote side of a local fetch or push with
// hooks and every configured program off (git does not pass its -c
// options to a local receive-pack or upload-pack), and with the
// repository's own receive settings overridden: the agent cannot have
// written the remote (see checkLocalRemote), but a push never checks a
// tree out anywhere (denyCurrentBranch=refuse: no updateInstead into a
// work tree or a linked worktree's directory), never deletes the
// checked-out branch, and never starts a gc.
const localRemoteConfig = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.alternateRefsCommand=true" +
	" -c receive.denyCurrentBranch=refuse -c receive.denyDeleteCurrent=refuse -c receive.autogc=false -c gc.auto=0" +
	" -c protocol.allow=never -c protocol.file.allow=always"

// remoteArgs returns the subcommand options for talking to t.
func (t remoteTarget) remoteArgs(sub string) []string {
	if !t.local {
		return nil
	}
	switch sub {
	case "push":
		return []string{"--receive-pack=" + localRemoteConfig + " receive-pack"}
	default:
		return []string{"--upload-pack=" + localRemoteConfig + " upload-pack"}
	}
}

// runner returns g set up for t: the file protocol only for an expected
// local remote, a remote's own error line only for a network remote.
func (t remoteTarget) runner(g *gitRunner) *gitRunner {
	if t.local {
		return g.withArgs(allowFileProtocol...)
	}
	c := *g
	c.remoteStderr = true
	return &c
}

// checkRemote decides where recovery may fetch and push. The evidence is
// the agent's: its remote_url counts only when it equals the remote the
// operator named (--remote), exactly; a recovery request without one is
// refused. Plain inspection may go without --remote (nothing is fetched
// or pushed); the plan then says the URL is unverified.
func checkRemote(ctx context.Context, p *Plan, opts Options) {
	evURL := p.ev.RemoteURL
	switch {
	case opts.Remote != "" && opts.Remote != evURL:
		p.refuse("remote_url %q in %s does not match --remote %q: recovery fetches from and pushes to the remote the operator names, and the evidence names another one", evURL, EvidenceFile, opts.Remote)
		return
	case opts.Remote == "" && opts.Recovery:
		p.refuse("no --remote given: name the canonical remote of this repository (from your own records, not from the evidence); recovery pushes only there, and only if remote_url %q equals it", evURL)
	}
	p.RemoteVerified = opts.Remote != ""
	if rt, err := checkRemoteURL(ctx, evURL, p.Workspace); err != nil {
		p.refuse("%v", err)
	} else {
		p.remote = rt
	}
}

// checkRemoteURL accepts https, http, ssh (also scp-like host:path) and
// git URLs whose user, host and path do not start with '-', and a local
// repository given as an absolute path or file:// URL that passes
// checkLocalRemote. Remote helpers (ext::, foo::) are refused.
func checkRemoteURL(ctx context.Context, url, ws string) (remoteTarget, error) {
	if strings.HasPrefix(url, "-") {
		return remoteTarget{}, fmt.Errorf("remote_url %q starts with '-'", url)
	}
	if scheme, rest, ok := strings.Cut(url, "://"); ok {
		switch strings.ToLower(scheme) {
		case "https", "http", "ssh", "git", "git+ssh", "ssh+git":
			authority, path, _ := strings.Cut(rest, "/")
			if err := checkHostPath(url, authority, path); err != nil {
				return remoteTarget{}, err
			}
			return remoteTarget{url: url}, nil
		case "file":
			return localRemote(ctx, rest, url, ws)
		}
		return remoteTarget{}, fmt.Errorf("remote_url %q: transport %q is not allowed (https, http, ssh, git or a local path)", url, scheme)
	}
	if strings.Contains(url, "::") {
		return remoteTarget{}, fmt.Errorf("remote_url %q: remote helpers are not allowed", url)
	}
	colon, slash := strings.IndexByte(url, ':'), strings.IndexByte(url, '/')
	if colon >= 0 && (slash < 0 || colon < slash) {
		// scp-like ssh: [user@]host:path
		if err := checkHostPath(url, url[:colon], url[colon+1:]); err != nil {
			return remoteTarget{}, err
		}
		return remoteTarget{url: url}, nil
	}
	return localRemote(ctx, url, url, ws)
}

// checkHostPath refuses a network URL whose user, host or path starts
// with '-': ssh would take ssh://-oProxyCommand=... as an option and run
// the command. Git refuses these itself; recovery does not rely on it.
func checkHostPath(url, authority, path string) error {
	user, host, found := strings.Cut(authority, "@")
	if !found {
		user, host = "", authority
	}
	host = strings.TrimPrefix(host, "[")
	switch {
	case host == "":
		return fmt.Errorf("remote_url %q: no host", url)
	case strings.HasPrefix(host, "-"):
		return fmt.Errorf("remote_url %q: the host starts with '-' (ssh would read it as an option)", url)
	case strings.HasPrefix(user, "-"):
		return fmt.Errorf("remote_url %q: the user starts with '-' (ssh would read it as an option)", url)
	case strings.HasPrefix(strings.TrimLeft(path, "/"), "-"):
		return fmt.Errorf("remote_url %q: the path starts with '-' (the remote command would read it as an option)", url)
	}
	return nil
}

func localRemote(ctx context.Context, p, url, ws string) (remoteTarget, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return remoteTarget{}, fmt.Errorf("remote_url %q: a local remote must be a clean absolute path", url)
	}
	real, err := checkLocalRemote(ctx, p, ws)
	if err != nil {
		return remoteTarget{}, fmt.Errorf("remote_url %q: %w", url, err)
	}
	return remoteTarget{url: real, local: true}, nil
}
