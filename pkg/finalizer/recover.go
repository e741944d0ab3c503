package finalizer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

// Record statuses.
const (
	RecordPushed = "pushed"
	RecordFailed = "failed"
)

// Steps named in a failed record.
const (
	StepCommit = "commit"
	StepFetch  = "fetch"
	StepRebase = "rebase"
	StepGate   = "gate"
	// StepGateSandbox is a gate that could not be run confined: the gate
	// clone could not be prepared, or sandbox-supervisor exited 125.
	StepGateSandbox = "gate_sandbox"
	StepPush        = "push"
	StepRecord      = "record"
)

// GateRun is one rerun of a gate command.
type GateRun struct {
	Gate         string   `json:"gate"` // "contract" or "verification[N]"
	Argv         []string `json:"argv"`
	ExitCode     int      `json:"exit_code"`
	TimedOut     bool     `json:"timed_out"`
	DurationMS   int64    `json:"duration_ms"`
	OutputSHA256 string   `json:"output_sha256"`
}

// Record is the recovery record JSON.
type Record struct {
	Schema                string          `json:"schema"`
	Tool                  string          `json:"tool"`
	Status                string          `json:"status"`
	FailedStep            string          `json:"failed_step,omitempty"`
	Error                 string          `json:"error,omitempty"`
	Mode                  string          `json:"mode"`
	EvidenceID            string          `json:"evidence_id"`
	TaskID                string          `json:"task_id"`
	Workspace             string          `json:"workspace"`
	Repository            string          `json:"repository"`
	PreservedHead         string          `json:"preserved_head"`
	PreparedBase          string          `json:"prepared_base"`
	CommittedModified     []string        `json:"committed_modified_files"`
	ApprovedNewFiles      []string        `json:"approved_new_files"`
	PreservedTestEvidence *JudgedEvidence `json:"preserved_test_evidence"`
	RecoveryCommit        string          `json:"recovery_commit,omitempty"`
	Remote                string          `json:"remote"`
	RemoteURL             string          `json:"remote_url"`
	CanonicalBranch       string          `json:"canonical_branch"`
	LeaseSHA              string          `json:"lease_sha,omitempty"`
	RebasedHead           string          `json:"rebased_head,omitempty"`
	GatesSandboxed        bool            `json:"gates_sandboxed"`
	GateSandbox           string          `json:"gate_sandbox,omitempty"`
	GatePolicy            string          `json:"gate_policy,omitempty"`
	GatePolicySHA256      string          `json:"gate_policy_sha256,omitempty"`
	GateUID               int             `json:"gate_uid"`
	GateGID               int             `json:"gate_gid"`
	Gates                 []GateRun       `json:"gates"`
	PushedCommit          string          `json:"pushed_commit,omitempty"`
	StartedAt             string          `json:"started_at"`
	FinishedAt            string          `json:"finished_at"`
}

// loadRecord reads a recovery record safely: WORKSPACE/finalizer-recovery.json
// through the workspace descriptor, another --record path through its
// directory; never through a symlink, never blocking, size-capped.
func loadRecord(wsd *safeDir, path string) (*Record, error) {
	var data []byte
	var err error
	if filepath.Dir(path) == wsd.path {
		data, err = wsd.readFile(filepath.Base(path), maxJSONBytes)
	} else {
		var d *safeDir
		if d, err = openWorkspaceDir(filepath.Dir(path)); err == nil {
			data, err = d.readFile(filepath.Base(path), maxJSONBytes)
			d.close()
		}
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := decodeJSON(path, data, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Trailer keys of the recovery commit.
const (
	TrailerRecovery   = "Finalizer-Recovery"
	TrailerEvidenceID = "MAC-Evidence-Id"
	TrailerTaskID     = "MAC-Task-Id"
	TrailerHead       = "Preserved-Head"
	TrailerBase       = "Prepared-Base"
	TrailerNewFile    = "Approved-New-File"
)

// Recover inspects the workspace with opts.Recovery set and, when the plan
// has no refusals and opts.Execute is set, carries it out. Without Execute
// it is a dry run returning the plan. A refused plan returns a
// *RefusedError and changes nothing. Once execution has started, the
// outcome is always written to the recovery record, and a failure returns
// the record with Status "failed" and an error naming the step.
//
// gateOutput receives the gates' stdout and stderr (nil discards them).
func Recover(ctx context.Context, workspace string, opts Options, gateOutput io.Writer) (*Plan, *Record, error) {
	opts.Recovery = true
	w := &wsHandles{}
	defer w.close()
	plan, m, err := inspect(ctx, workspace, opts, w)
	defer m.remove()
	if err != nil {
		return nil, nil, err
	}
	if !plan.Recoverable {
		return plan, nil, &RefusedError{Plan: plan}
	}
	if !opts.Execute {
		return plan, nil, nil
	}
	if gateOutput == nil {
		gateOutput = io.Discard
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	ev := plan.ev
	rec := &Record{
		Schema: RecordSchema, Tool: "finalizer-recover", Mode: plan.Mode,
		EvidenceID: ev.EvidenceID, TaskID: ev.TaskID,
		Workspace: plan.Workspace, Repository: plan.Repository,
		PreservedHead: plan.Head, PreparedBase: plan.PreparedBase,
		CommittedModified: plan.ModifiedFiles, ApprovedNewFiles: plan.ApprovedNewFiles,
		PreservedTestEvidence: plan.PreservedEvidence,
		Remote:                plan.Remote, RemoteURL: plan.RemoteURL, CanonicalBranch: plan.CanonicalBranch,
		Gates:     []GateRun{},
		StartedAt: now().UTC().Format(time.RFC3339),
	}
	gs := plan.gates
	rec.GatesSandboxed, rec.GateSandbox, rec.GatePolicy = gs.Sandboxed, gs.Sandbox, gs.Policy
	rec.GatePolicySHA256, rec.GateUID, rec.GateGID = gs.PolicySHA256, gs.UID, gs.GID
	step, err := execute(ctx, plan, opts, rec, gateOutput, m, w)
	rec.FinishedAt = now().UTC().Format(time.RFC3339)
	if err != nil {
		rec.Status, rec.FailedStep, rec.Error = RecordFailed, step, err.Error()
	} else {
		rec.Status = RecordPushed
	}
	if werr := writeJSONAtomic(recordPath(plan.Workspace, opts), rec); werr != nil {
		if err == nil {
			return plan, rec, fmt.Errorf("%s: pushed %s but could not write the record: %w", StepRecord, rec.PushedCommit, werr)
		}
		err = fmt.Errorf("%w (and writing the record failed: %v)", err, werr)
	}
	if err != nil {
		return plan, rec, fmt.Errorf("%s: %w", step, err)
	}
	if err := markProgressRecovered(w.ws, plan, rec, now()); err != nil {
		return plan, rec, fmt.Errorf("%s: pushed %s but could not update %s: %w", StepRecord, rec.PushedCommit, ProgressFile, err)
	}
	return plan, rec, nil
}

func execute(ctx context.Context, plan *Plan, opts Options, rec *Record, gateOutput io.Writer, m *mirror, w *wsHandles) (string, error) {
	ev := plan.ev
	base := envOrDefault(opts.Env)
	g := m.git

	// 1. Commit the pending work in the mirror, with a copy of the
	// preserved index, reading the working tree: nothing of the preserved
	// checkout is written.
	commit := plan.Head
	if len(plan.ModifiedFiles)+len(plan.ApprovedNewFiles) > 0 {
		c, err := commitPending(ctx, m, w.repo, plan)
		if err != nil {
			return StepCommit, err
		}
		if !w.repoStillSame() {
			return StepCommit, fmt.Errorf("repository %s changed while it was being committed", quotePath(plan.Repository))
		}
		commit, rec.RecoveryCommit = c, c
	}

	// 2. Fetch the canonical branch from the evidence's URL (not a remote
	// name from the agent's config) into the mirror; its sha is the lease.
	rt := plan.remote
	rg := rt.runner(g)
	lease := "refs/finalizer/lease"
	args := append([]string{"fetch", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules"}, rt.remoteArgs("fetch")...)
	args = append(args, "--end-of-options", rt.url, "+refs/heads/"+ev.CanonicalBranch+":"+lease)
	if _, err := rg.run(ctx, nil, args...); err != nil {
		return StepFetch, fmt.Errorf("fetching %s from %q: %w", ev.CanonicalBranch, ev.RemoteURL, err)
	}
	leaseSHA, err := g.line(ctx, "rev-parse", "--verify", "--end-of-options", lease+"^{commit}")
	if err != nil {
		return StepFetch, err
	}
	rec.LeaseSHA = leaseSHA

	// 3. Rebase in a worktree of the mirror (all of it in the private
	// directory, removed with it).
	wt := filepath.Join(m.tmp, "worktree")
	if _, err := g.run(ctx, nil, "worktree", "add", "--detach", "--end-of-options", wt, commit); err != nil {
		return StepRebase, err
	}
	wg := g.with(wt)
	if _, err := wg.run(ctx, nil, "rebase", "--no-autosquash", "--no-autostash", "--onto", leaseSHA, ev.PreparedBaseSHA); err != nil {
		wg.run(context.WithoutCancel(ctx), nil, "rebase", "--abort")
		return StepRebase, fmt.Errorf("rebase onto %s/%s (%s) failed; resolve by hand: %w", ev.Remote, ev.CanonicalBranch, short(leaseSHA), err)
	}
	rebased, err := wg.line(ctx, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return StepRebase, err
	}
	rec.RebasedHead = rebased
	if _, err := g.run(ctx, nil, "update-ref", "refs/heads/finalizer-rebased", rebased); err != nil {
		return StepRebase, err
	}

	// 4. Both gates, on the rebased tree: a throwaway clone of the mirror
	// checked out at the rebased commit, inside the sandbox unless the
	// operator opted out.
	if step, err := runGates(ctx, g, m.gitDir, plan, opts, rec, base, gateOutput); err != nil {
		return step, err
	}

	// 5. Guarded push to the evidence's URL, then confirm the remote ref.
	ref := "refs/heads/" + ev.CanonicalBranch
	args = append([]string{"push", "--porcelain", "--no-verify", "--force-with-lease=" + ref + ":" + leaseSHA}, rt.remoteArgs("push")...)
	args = append(args, "--end-of-options", rt.url, rebased+":"+ref)
	if _, err := rg.run(ctx, nil, args...); err != nil {
		return StepPush, fmt.Errorf("guarded push refused (did %s move since it was fetched at %s?): %w", ref, short(leaseSHA), err)
	}
	args = append([]string{"ls-remote"}, rt.remoteArgs("ls-remote")...)
	out, err := rg.run(ctx, nil, append(args, "--end-of-options", rt.url, ref)...)
	if err != nil {
		return StepPush, err
	}
	got := ""
	for _, line := range strings.Split(string(out), "\n") {
		if oid, name, ok := strings.Cut(line, "\t"); ok && name == ref {
			got = oid
		}
	}
	if got != rebased {
		return StepPush, fmt.Errorf("push reported success but %s at %q is %q, not %s", ref, ev.RemoteURL, got, rebased)
	}
	rec.PushedCommit = rebased
	return "", nil
}

// commitPending builds the recovery commit on HEAD from a copy of the
// preserved index plus the tracked changes and the approved new files,
// and checks that it adds exactly the approved paths. git add reads a
// private snapshot of exactly those paths, copied through the checked
// repository descriptor (see snapshotPath), never the agent's working
// tree: a live agent could swap the repository directory by name, or
// entries in it, between git's lstat and open.
func commitPending(ctx context.Context, m *mirror, repo *safeDir, plan *Plan) (string, error) {
	tmpIdx := filepath.Join(m.tmp, "index-commit")
	if data, err := os.ReadFile(m.index); err == nil {
		if err := os.WriteFile(tmpIdx, data, 0o600); err != nil {
			return "", err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	snap := filepath.Join(m.tmp, "snapshot")
	if err := os.Mkdir(snap, 0o700); err != nil {
		return "", err
	}
	paths := append(append([]string{}, plan.ModifiedFiles...), plan.ApprovedNewFiles...)
	budget := MaxObjectBytes
	for _, p := range paths {
		n, err := repo.snapshotPath(ctx, p, snap, budget)
		if err != nil {
			return "", err
		}
		budget -= n
	}
	// --all: a listed tracked path missing from the snapshot is a removal.
	// The paths go on stdin (literal, NUL-separated): no argv limit.
	gi := m.workTree(snap, tmpIdx)
	spec := strings.NewReader(strings.Join(paths, "\x00") + "\x00")
	if _, err := gi.run(ctx, spec, "add", "--all", "--pathspec-from-file=-", "--pathspec-file-nul"); err != nil {
		return "", err
	}
	tree, err := gi.line(ctx, "write-tree")
	if err != nil {
		return "", err
	}
	out, err := m.git.run(ctx, nil, "diff-tree", "-r", "-z", "--no-renames", "--name-status", plan.Head, tree)
	if err != nil {
		return "", err
	}
	var added, changed []string
	f := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		if unsafeRepoPath(f[i+1]) {
			return "", fmt.Errorf("the recovery commit would hold %s, a path outside the working tree or inside a .git", quotePath(f[i+1]))
		}
		if f[i] == "A" {
			added = append(added, f[i+1])
		} else {
			changed = append(changed, f[i+1])
		}
	}
	slices.Sort(added)
	if !slices.Equal(added, plan.ApprovedNewFiles) {
		return "", fmt.Errorf("the recovery commit would add %s, not exactly the approved %s", quotePaths(added), quotePaths(plan.ApprovedNewFiles))
	}
	for _, c := range changed {
		if !slices.Contains(plan.ModifiedFiles, c) {
			return "", fmt.Errorf("the recovery commit would change %s, which the plan did not list", quotePath(c))
		}
	}
	msg := commitMessage(plan)
	return m.git.line(ctx, "commit-tree", tree, "-p", plan.Head, "-m", msg)
}

func commitMessage(p *Plan) string {
	kind, why := "stalled-finalizer", "The finalizer was interrupted after its gates passed; this commit holds\nthe work it left pending."
	if p.Mode == ModeRefusedNewFiles {
		kind, why = "refused-new-files", "The unattended finalizer refused untracked or staged-new files; this\ncommit holds the pending work, with every new path approved explicitly."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Recover finalizer of task %s (%s)\n\n%s\n\n", p.TaskID, kind, why)
	fmt.Fprintf(&b, "%s: %s\n", TrailerRecovery, kind)
	fmt.Fprintf(&b, "%s: %s\n", TrailerEvidenceID, p.EvidenceID)
	fmt.Fprintf(&b, "%s: %s\n", TrailerTaskID, p.TaskID)
	fmt.Fprintf(&b, "%s: %s\n", TrailerHead, p.Head)
	fmt.Fprintf(&b, "%s: %s\n", TrailerBase, p.PreparedBase)
	for _, n := range p.ApprovedNewFiles {
		fmt.Fprintf(&b, "%s: %s\n", TrailerNewFile, n)
	}
	return b.String()
}

// markProgressRecovered sets finalizer-progress.json's status to
// "recovered", keeping every other field the executor wrote: the fields
// come from the bytes inspection read and checked, never from whatever
// the name points at now. The file is replaced through a new temporary
// file (O_EXCL) renamed over it, so a symlink planted meanwhile is
// replaced, not followed.
func markProgressRecovered(wsd *safeDir, plan *Plan, rec *Record, now time.Time) error {
	doc := map[string]any{}
	if plan.progressRaw != nil {
		if err := json.Unmarshal(plan.progressRaw, &doc); err != nil {
			return err
		}
	}
	doc["schema"] = ProgressSchema
	doc["evidence_id"] = plan.EvidenceID
	doc["task_id"] = plan.TaskID
	doc["status"] = ProgressRecovered
	doc["updated_at"] = now.UTC().Format(time.RFC3339)
	doc["recovered_commit"] = rec.PushedCommit
	return writeJSONAtomic(wsd.join(ProgressFile), doc)
}

// writeJSONAtomic writes v as indented JSON. The record quotes names and
// argv the agent chose: no control, line-separator or bidi rune is stored
// raw (termsafe.JSON escapes them; the values are unchanged), so a record
// shown with cat cannot drive a terminal.
func writeJSONAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, append(termsafe.JSON(data), '\n'), 0o644)
}

// runGates prepares the gate clone, runs every gate in it and checks after
// each one that the clone still holds the rebased commit, unmodified.
func runGates(ctx context.Context, g *gitRunner, repo string, plan *Plan, opts Options, rec *Record, base []string, gateOutput io.Writer) (string, error) {
	ev, gs := plan.ev, plan.gates
	gt, err := prepareGateTree(ctx, g, repo, rec.RebasedHead, gs)
	if gt != nil {
		defer os.RemoveAll(gt.dir)
	}
	if err != nil {
		return StepGateSandbox, fmt.Errorf("preparing the gate clone: %w", err)
	}
	base = gateEnv(base)
	gates := [][]string{ev.ContractCommand}
	gates = append(gates, ev.VerificationCommands...)
	for i, argv := range gates {
		name := "contract"
		if i > 0 {
			name = fmt.Sprintf("verification[%d]", i-1)
		}
		run, status := runGate(ctx, gs.command(gt.dir, argv, base), gateTimeout(opts), gateOutput, name)
		run.Gate, run.Argv = name, argv
		rec.Gates = append(rec.Gates, run)
		switch {
		case run.TimedOut:
			return StepGate, fmt.Errorf("%s gate %q timed out after %s", name, argv, gateTimeout(opts))
		case gs.Sandboxed && status == nil:
			return StepGateSandbox, fmt.Errorf("%s gate %q: %s exited %d without reporting its outcome on --status-fd (is it a sandbox-supervisor of this release?); %s (no fallback without --unsandboxed-gates)",
				name, argv, filepath.Base(gs.Sandbox), run.ExitCode, errNoGateSandbox)
		case gs.Sandboxed && !status.FromCommand:
			return StepGateSandbox, fmt.Errorf("%s gate %q: %s exited %d: the sandbox was not created%s; %s (no fallback without --unsandboxed-gates)",
				name, argv, filepath.Base(gs.Sandbox), run.ExitCode, status.reason(), errNoGateSandbox)
		case run.ExitCode != 0:
			return StepGate, fmt.Errorf("%s gate %q failed with exit code %d", name, argv, run.ExitCode)
		}
		if err := gt.verify(); err != nil {
			var moved *HeadMovedError
			var changed *TreeMismatchError
			switch {
			case errors.As(err, &moved):
				return StepGate, fmt.Errorf("the %s gate moved HEAD of the gate clone (%q, want %s), so the tested tree is not the one to push", name, moved.Got, moved.Want)
			case errors.As(err, &changed):
				return StepGate, fmt.Errorf("the %s gate modified tracked files, so the tested tree is not the one to push: %v", name, changed)
			}
			return StepGate, fmt.Errorf("after the %s gate: %w", name, err)
		}
	}
	return "", nil
}

// gateStatus is what sandbox-supervisor run --status-fd reported: its
// own outcome, on a descriptor the gate never holds. The gate's output
// (which can print anything, the supervisor's error line included)
// never enters an error or a record.
type gateStatus struct {
	ExitCode    int    `json:"exit_code"`
	FromCommand bool   `json:"from_command"`
	Error       string `json:"error"`
}

// reason is the supervisor's message for an error, escaped (it can quote
// an argv the agent chose) and bounded.
func (s *gateStatus) reason() string {
	if s.Error == "" {
		return ""
	}
	msg := s.Error
	if len(msg) > 1024 {
		msg = msg[:1024] + "..."
	}
	return ": " + termsafe.String(strings.ToValidUTF8(msg, "\ufffd"))
}

// runGate runs one gate command with a timeout; on timeout a host gate's
// whole process group is killed, a sandboxed gate's supervisor is
// terminated. The gate's output reaches out only through an escaping
// writer, every line prefixed with the gate's name: the agent wrote the
// gate and could otherwise drive the operator's terminal (OSC 52, a
// title, a cleared screen) or forge a line of the tool's own. A
// sandboxed gate's supervisor reports its outcome on descriptor 3; the
// status is nil when it reported none (a host gate, a killed
// supervisor).
func runGate(ctx context.Context, gc gateCommand, timeout time.Duration, out io.Writer, name string) (GateRun, *gateStatus) {
	run := GateRun{Argv: gc.argv}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h := sha256.New()
	esc := termsafe.NewWriter(out, "["+name+"] ")
	var mu lockedWriter
	mu.w = io.MultiWriter(h, esc)
	cmd := exec.CommandContext(gctx, gc.argv[0], gc.argv[1:]...)
	cmd.Dir = gc.dir
	cmd.Env = gc.env
	cmd.Stdin = bytes.NewReader(nil)
	cmd.Stdout, cmd.Stderr = &mu, &mu
	cmd.WaitDelay = 10 * time.Second
	setProcessGroup(cmd, gc.sandboxed)
	var statusR *os.File
	if gc.sandboxed {
		r, w, err := os.Pipe()
		if err != nil {
			run.ExitCode = -1
			return run, nil
		}
		defer w.Close()
		statusR = r
		defer r.Close()
		cmd.ExtraFiles = []*os.File{w}
	}
	start := time.Now()
	err := cmd.Start()
	if err == nil {
		if len(cmd.ExtraFiles) > 0 {
			cmd.ExtraFiles[0].Close() // the supervisor holds the only write end
		}
		err = cmd.Wait()
	}
	esc.Close()
	run.DurationMS = time.Since(start).Milliseconds()
	run.OutputSHA256 = hex.EncodeToString(h.Sum(nil))
	switch {
	case gctx.Err() == context.DeadlineExceeded:
		run.TimedOut, run.ExitCode = true, -1
	case err == nil:
	default:
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() >= 0 {
			run.ExitCode = ee.ExitCode()
		} else {
			run.ExitCode = -1 // could not start, or killed by a signal
		}
	}
	return run, readGateStatus(statusR)
}

// readGateStatus reads the supervisor's status line (its write end is
// closed by now: the supervisor exited, and nothing else held it).
func readGateStatus(r *os.File) *gateStatus {
	if r == nil {
		return nil
	}
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	data, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	var s gateStatus
	if len(bytes.TrimSpace(data)) == 0 || json.Unmarshal(data, &s) != nil {
		return nil
	}
	return &s
}
