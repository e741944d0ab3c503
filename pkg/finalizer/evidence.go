// Package finalizer inspects and recovers a preserved task workspace whose
// unattended finalizer refused untracked or staged-new files, or was
// interrupted after its gates passed (seed 000: mac task recover-finalizer,
// mac task recover-stalled-finalizer).
//
// Everything in the workspace is the agent's, and the tool usually runs as
// root: files are read descriptor-relative without following symlinks or
// blocking, size-capped; .git and the working tree are scanned for special
// files before any git command; git never runs in the agent's .git but in
// a private mirror holding copies of its objects, index and HEAD, and
// fetches from and pushes to the evidence's remote_url itself.
//
// Inspect is read-only: it reads mac-evidence.json and
// finalizer-progress.json, looks at the preserved git repository without
// taking any lock or refreshing the index, judges the preserved test
// evidence by gate semantics, and returns a Plan. Recover, given the
// original evidence id and an exact approval for every new path, commits
// the pending work with provenance trailers in the mirror (the preserved
// checkout is never modified), rebases onto the
// canonical branch, reruns the contract and verification commands in a
// throwaway clone of the rebased commit inside sandbox-supervisor (on the
// host only with the explicit UnsandboxedGates opt-in, which the record
// notes), pushes with --force-with-lease on the fetched remote sha, and
// writes a recovery record. It never runs the coding agent. Formats are
// documented in docs/finalizer.md.
package finalizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// File names inside a workspace.
const (
	EvidenceFile = "mac-evidence.json"
	ProgressFile = "finalizer-progress.json"
	RecordFile   = "finalizer-recovery.json"
)

// Schemas.
const (
	EvidenceSchema = "mac.task_evidence.v1"
	ProgressSchema = "mac.finalizer_progress.v1"
	RecordSchema   = "palisade.finalizer_recovery.v1"
)

// Evidence statuses.
const (
	EvidenceRefused   = "refused"   // finalizer refused; see refusal_reason
	EvidencePartial   = "partial"   // written by an interrupted finalizer
	EvidencePublished = "published" // terminal success: nothing to recover
	EvidenceFailed    = "failed"    // gates failed: nothing to recover
)

// RefusalNewFiles is the refusal_reason of a finalizer that refused
// untracked or staged-new files.
const RefusalNewFiles = "new_files"

// Progress statuses. Terminal ones end a finalizer run.
var (
	progressNonTerminal = []string{"started", "harvested", "gates_passed", "committing", "rebasing", "pushing"}
	progressTerminal    = []string{"pushed", "refused", "failed", "recovered"}
)

// ProgressRecovered is the status Recover leaves in finalizer-progress.json.
const ProgressRecovered = "recovered"

// Evidence is mac-evidence.json. Unknown fields are ignored: the executor
// records more than recovery needs (coding_agents, for one).
type Evidence struct {
	Schema               string         `json:"schema"`
	EvidenceID           string         `json:"evidence_id"`
	TaskID               string         `json:"task_id"`
	Repository           string         `json:"repository"`
	PreparedBaseSHA      string         `json:"prepared_base_sha"`
	PreservedHeadSHA     string         `json:"preserved_head_sha"`
	CanonicalBranch      string         `json:"canonical_branch"`
	Remote               string         `json:"remote"`
	RemoteURL            string         `json:"remote_url"`
	ContractCommand      []string       `json:"contract_command"`
	VerificationCommands [][]string     `json:"verification_commands"`
	TestEvidence         []TestEvidence `json:"test_evidence"`
	Status               string         `json:"status"`
	RefusalReason        string         `json:"refusal_reason,omitempty"`
	FinalizerInterrupted bool           `json:"finalizer_interrupted"`
}

// TestEvidence is one preserved test run.
type TestEvidence struct {
	Argv         []string `json:"argv"`
	ExitCode     *int     `json:"exit_code"`
	StartedAt    string   `json:"started_at,omitempty"`
	DurationMS   int64    `json:"duration_ms,omitempty"`
	OutputSHA256 string   `json:"output_sha256,omitempty"`
}

// Progress is finalizer-progress.json.
type Progress struct {
	Schema     string `json:"schema"`
	EvidenceID string `json:"evidence_id"`
	TaskID     string `json:"task_id,omitempty"`
	Status     string `json:"status"`
	UpdatedAt  string `json:"updated_at,omitempty"`
}

// Terminal reports whether status ends a finalizer run, and whether status
// is known at all.
func Terminal(status string) (terminal, known bool) {
	for _, s := range progressTerminal {
		if s == status {
			return true, true
		}
	}
	for _, s := range progressNonTerminal {
		if s == status {
			return false, true
		}
	}
	return false, false
}

var (
	objectIDRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
	idRE       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	remoteRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// ValidID reports whether s is an acceptable evidence or task id: 1-128
// characters of letters, digits, . _ : - starting with a letter or digit,
// so that it is safe in a commit trailer.
func ValidID(s string) bool { return idRE.MatchString(s) }

func decodeJSON(path string, data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: not valid JSON: %w", quotePath(path), err)
	}
	if dec.More() {
		return fmt.Errorf("%s: trailing data after the JSON object", quotePath(path))
	}
	return nil
}

// LoadEvidence reads and validates WORKSPACE/mac-evidence.json. Every error
// names the file and the field.
func LoadEvidence(workspace string) (*Evidence, error) {
	wsd, err := openWorkspaceDir(workspace)
	if err != nil {
		return nil, err
	}
	defer wsd.close()
	return loadEvidence(wsd)
}

// loadEvidence reads the evidence through the workspace descriptor: never
// through a symlink, never blocking, size-capped.
func loadEvidence(wsd *safeDir) (*Evidence, error) {
	path := wsd.join(EvidenceFile)
	data, err := wsd.readFile(EvidenceFile, maxJSONBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: missing; is %s a preserved task workspace?", quotePath(path), quotePath(wsd.path))
		}
		return nil, err
	}
	var ev Evidence
	if err := decodeJSON(path, data, &ev); err != nil {
		return nil, err
	}
	if ev.Repository == "" {
		ev.Repository = "repo"
	}
	if err := ev.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", quotePath(path), err)
	}
	return &ev, nil
}

func (ev *Evidence) validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if ev.Schema != EvidenceSchema {
		bad("schema: %q, want %q", ev.Schema, EvidenceSchema)
	}
	if !ValidID(ev.EvidenceID) {
		bad("evidence_id: %q is not a valid id", ev.EvidenceID)
	}
	if !ValidID(ev.TaskID) {
		bad("task_id: %q is not a valid id", ev.TaskID)
	}
	if r := ev.Repository; hasControl(r) || filepath.IsAbs(r) || filepath.Clean(r) != r || r == "." || r == ".." || strings.HasPrefix(r, "../") {
		bad("repository: %q must be a relative directory inside the workspace", r)
	}
	if !objectIDRE.MatchString(ev.PreparedBaseSHA) {
		bad("prepared_base_sha: %q is not a full lowercase object id", ev.PreparedBaseSHA)
	}
	if !objectIDRE.MatchString(ev.PreservedHeadSHA) {
		bad("preserved_head_sha: %q is not a full lowercase object id", ev.PreservedHeadSHA)
	}
	if ev.CanonicalBranch == "" || hasControl(ev.CanonicalBranch) || strings.HasPrefix(ev.CanonicalBranch, "-") || strings.HasPrefix(ev.CanonicalBranch, "refs/") || strings.ContainsAny(ev.CanonicalBranch, " \t\n\x00~^:?*[\\") || strings.Contains(ev.CanonicalBranch, "..") || quotePath(ev.CanonicalBranch) != ev.CanonicalBranch {
		bad("canonical_branch: %q is not a branch name (give it without refs/heads/)", ev.CanonicalBranch)
	}
	if !remoteRE.MatchString(ev.Remote) {
		bad("remote: %q is not a remote name", ev.Remote)
	}
	if ev.RemoteURL == "" {
		bad("remote_url: required")
	} else if hasControl(ev.RemoteURL) {
		bad("remote_url: %q contains a control character", ev.RemoteURL)
	}
	if err := validArgv(ev.ContractCommand); err != nil {
		bad("contract_command: %v", err)
	}
	if len(ev.VerificationCommands) == 0 {
		bad("verification_commands: at least one verification command is required")
	}
	for i, c := range ev.VerificationCommands {
		if err := validArgv(c); err != nil {
			bad("verification_commands[%d]: %v", i, err)
		}
	}
	for i, te := range ev.TestEvidence {
		if len(te.Argv) == 0 {
			bad("test_evidence[%d].argv: empty", i)
		}
		if te.ExitCode == nil {
			bad("test_evidence[%d].exit_code: missing", i)
		}
	}
	switch ev.Status {
	case EvidenceRefused, EvidencePartial, EvidencePublished, EvidenceFailed:
	default:
		bad("status: %q, want one of refused, partial, published, failed", ev.Status)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func validArgv(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("empty argv")
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("argument contains NUL")
		}
	}
	return nil
}

// LoadProgress reads WORKSPACE/finalizer-progress.json; a missing file is
// (nil, nil).
func LoadProgress(workspace string) (*Progress, error) {
	wsd, err := openWorkspaceDir(workspace)
	if err != nil {
		return nil, err
	}
	defer wsd.close()
	p, _, err := loadProgress(wsd)
	return p, err
}

// loadProgress reads the progress file once, through the workspace
// descriptor, and returns it with the exact bytes it was parsed from:
// recovery later rewrites the file from those bytes, never from whatever
// the name points at by then.
func loadProgress(wsd *safeDir) (*Progress, []byte, error) {
	path := wsd.join(ProgressFile)
	data, err := wsd.readFile(ProgressFile, maxJSONBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	var p Progress
	if err := decodeJSON(path, data, &p); err != nil {
		return nil, nil, err
	}
	if p.Schema != ProgressSchema {
		return nil, nil, fmt.Errorf("%s: schema: %q, want %q", quotePath(path), p.Schema, ProgressSchema)
	}
	if _, known := Terminal(p.Status); !known {
		return nil, nil, fmt.Errorf("%s: status: unknown value %q (terminal: %s; non-terminal: %s)", quotePath(path), p.Status,
			strings.Join(progressTerminal, ", "), strings.Join(progressNonTerminal, ", "))
	}
	return &p, data, nil
}

// hasControl reports whether s has a control character (or is not UTF-8).
func hasControl(s string) bool {
	return !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) })
}
