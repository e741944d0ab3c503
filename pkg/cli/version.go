package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Build stamps that `make build` passes with -ldflags -X when Go's own
// VCS stamp is missing. go build stamps vcs.revision, vcs.time and
// vcs.modified only when it finds the repository's .git directory; in a
// linked git worktree .git is a file and nothing is stamped (or, nested
// in another checkout, that checkout's commit: golang/go#58218), so the
// Makefile builds with -buildvcs=false and stamps what git says about
// the tree it builds instead.
var (
	stampRevision string // full commit hash
	stampTime     string // commit time, RFC 3339
	stampModified string // "true" when the tree had uncommitted changes
)

// BuildInfo is what --version reports about a binary.
type BuildInfo struct {
	Program   string `json:"program"`
	Module    string `json:"module,omitempty"`
	Version   string `json:"version"`  // module version; "(devel)" for a local build without one
	Revision  string `json:"revision"` // commit, "" when unknown
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified"` // built from a tree with uncommitted changes
	GoVersion string `json:"go"`
	Platform  string `json:"platform"`
}

// ReadBuildInfo returns prog's build information: module version and Go
// version from runtime/debug.ReadBuildInfo, the commit from its vcs.*
// settings or, when they are absent, from the stamps make build passed.
func ReadBuildInfo(prog string) BuildInfo {
	b := BuildInfo{Program: prog, Version: "(devel)", GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.Module = bi.Main.Path
		if bi.Main.Version != "" {
			b.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Revision == "" && stampRevision != "" {
		b.Revision, b.Time, b.Modified = stampRevision, stampTime, stampModified == "true"
	}
	return b
}

// String is the one-line form --version prints:
//
//	sandbox-supervisor (devel) commit 7487d130898a+modified (2026-12-01T21:08:06Z) go1.26.0 linux/amd64
func (b BuildInfo) String() string {
	commit := "commit unknown"
	if b.Revision != "" {
		commit = "commit " + b.Revision
		if b.Modified {
			commit += "+modified"
		}
		if b.Time != "" {
			commit += " (" + b.Time + ")"
		}
	}
	return fmt.Sprintf("%s %s %s %s %s", b.Program, b.Version, commit, b.GoVersion, b.Platform)
}

// IsVersion reports whether args asks for the version: a first argument
// of --version (or -version, as the flag package spells every flag).
func IsVersion(args []string) bool {
	return len(args) > 0 && (args[0] == "--version" || args[0] == "-version")
}

// PrintVersion writes prog's version line to w.
func PrintVersion(w io.Writer, prog string) error {
	_, err := fmt.Fprintln(w, ReadBuildInfo(prog))
	return err
}
