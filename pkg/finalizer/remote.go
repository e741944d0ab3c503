package finalizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// remoteTarget is where recovery fetches from and pushes to: the
// evidence's remote_url itself, never a remote name looked up in the
// agent's config.
type remoteTarget struct {
	url   string // what git is given
	local bool   // a path on this host: the file protocol, hooks disabled
}

// localPackArgs make git run the remote side of a local fetch or push
// with hooks and other configured programs disabled: git does not pass
// its -c options to a local receive-pack or upload-pack.
const localRemoteConfig = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.alternateRefsCommand=true -c protocol.allow=never -c protocol.file.allow=always"

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

// checkRemoteURL accepts https, http, ssh (also scp-like host:path) and
// git URLs, and a local repository given as an absolute path or file://
// URL that is a directory outside the workspace (the agent could have
// planted a repository with hooks inside it). Remote helpers (ext::,
// foo::) are refused.
func checkRemoteURL(url, ws string) (remoteTarget, error) {
	if strings.HasPrefix(url, "-") {
		return remoteTarget{}, fmt.Errorf("remote_url %q starts with '-'", url)
	}
	if scheme, _, ok := strings.Cut(url, "://"); ok {
		switch strings.ToLower(scheme) {
		case "https", "http", "ssh", "git", "git+ssh", "ssh+git":
			return remoteTarget{url: url}, nil
		case "file":
			return localRemote(strings.TrimPrefix(url, url[:len(scheme)+3]), url, ws)
		}
		return remoteTarget{}, fmt.Errorf("remote_url %q: transport %q is not allowed (https, http, ssh, git or a local path)", url, scheme)
	}
	if strings.Contains(url, "::") {
		return remoteTarget{}, fmt.Errorf("remote_url %q: remote helpers are not allowed", url)
	}
	colon, slash := strings.IndexByte(url, ':'), strings.IndexByte(url, '/')
	if colon >= 0 && (slash < 0 || colon < slash) {
		return remoteTarget{url: url}, nil // scp-like ssh: host:path
	}
	return localRemote(url, url, ws)
}

func localRemote(p, url, ws string) (remoteTarget, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return remoteTarget{}, fmt.Errorf("remote_url %q: a local remote must be a clean absolute path", url)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return remoteTarget{}, fmt.Errorf("remote_url %q: %w", url, err)
	}
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return remoteTarget{}, err
	}
	if real == realWS || strings.HasPrefix(real, realWS+string(filepath.Separator)) || strings.HasPrefix(realWS, real+string(filepath.Separator)) {
		return remoteTarget{}, fmt.Errorf("remote_url %q: a local remote must lie outside the workspace (it resolves to %s)", url, quotePath(real))
	}
	st, err := os.Stat(real)
	if err != nil || !st.IsDir() {
		return remoteTarget{}, fmt.Errorf("remote_url %q: not a local repository directory", url)
	}
	return remoteTarget{url: real, local: true}, nil
}
