package finalizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestInspectMakesNoMutation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	// Make the index stale for a tracked, unmodified file, so that any git
	// command allowed to refresh the index would rewrite it.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(f.repo, "feature.txt"), future, future); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, f.dir)
	state := f.repoState()

	plan, err := Inspect(context.Background(), f.ws, Options{Env: f.env})
	if err != nil {
		t.Fatal(err)
	}
	// A dry run of the recovery is just as read-only.
	if _, rec, err := Recover(context.Background(), f.ws, f.opts(), nil); err != nil || rec != nil {
		t.Fatalf("dry run: record %v, err %v", rec, err)
	}
	if d := diffSnapshots(before, snapshot(t, f.dir)); len(d) > 0 {
		t.Fatalf("inspection changed the workspace or remote: %s", strings.Join(d, ", "))
	}
	if got := f.repoState(); got != state {
		t.Fatalf("repository state changed:\n%s\n---\n%s", state, got)
	}

	if plan.Mode != ModeRefusedNewFiles || !plan.Recoverable || len(plan.Refusals) != 0 {
		t.Fatalf("plan mode %s recoverable %v refusals %q", plan.Mode, plan.Recoverable, plan.Refusals)
	}
	if plan.Head != f.head || plan.PreservedHead != f.head || plan.PreparedBase != f.base {
		t.Errorf("plan head %s / preserved %s / base %s", plan.Head, plan.PreservedHead, plan.PreparedBase)
	}
	if !slices.Equal(plan.ModifiedFiles, []string{"README.md"}) {
		t.Errorf("modified files %q, want README.md only", plan.ModifiedFiles)
	}
	if !slices.Equal(plan.NewFiles, []string{"docs/added.md", "src/new.go"}) {
		t.Errorf("new files %q, want the staged-new and the untracked file", plan.NewFiles)
	}
	if plan.PreservedEvidence == nil || plan.PreservedEvidence.Kind != KindContract || !plan.PreservedEvidence.Accepted {
		t.Errorf("preserved_test_evidence = %+v", plan.PreservedEvidence)
	}
	if plan.EvidenceStatus != EvidenceRefused || plan.ProgressStatus != "refused" || !plan.ProgressTerminal {
		t.Errorf("evidence %s progress %s terminal %v", plan.EvidenceStatus, plan.ProgressStatus, plan.ProgressTerminal)
	}
	js, err := json.Marshal(plan)
	if err != nil || !strings.Contains(string(js), `"preserved_test_evidence":{`) {
		t.Errorf("plan JSON lacks preserved_test_evidence: %s", js)
	}
}

// refused runs Recover with opts, expects a refusal mentioning want, and
// checks that nothing at all changed: workspace, repository, remote.
func refused(t *testing.T, f *fixture, opts Options, want string) *Plan {
	t.Helper()
	before := snapshot(t, f.dir)
	opts.Execute = true
	plan, rec, err := Recover(context.Background(), f.ws, opts, nil)
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("Recover = %v, want a refusal mentioning %q", err, want)
	}
	if rec != nil {
		t.Errorf("a refused recovery produced a record")
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not mention %q", err, want)
	}
	if plan.Recoverable {
		t.Errorf("refused plan says recoverable")
	}
	if d := diffSnapshots(before, snapshot(t, f.dir)); len(d) > 0 {
		t.Errorf("a refused recovery changed files: %s", strings.Join(d, ", "))
	}
	return plan
}

func TestRecoverApprovalRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	o := f.opts()
	o.Approve = []string{"src/new.go"}
	p := refused(t, f, o, "unapproved new files (approve each exactly with --approve-new-file): docs/added.md")
	if !slices.Equal(p.UnapprovedNewFiles, []string{"docs/added.md"}) {
		t.Errorf("unapproved = %q", p.UnapprovedNewFiles)
	}

	o.Approve = []string{}
	refused(t, f, o, "docs/added.md, src/new.go")

	// Approving a directory is not approving the file in it.
	o.Approve = []string{"docs/added.md", "src"}
	refused(t, f, o, "src/new.go")

	// An approved path that is not new: a tracked file, or nothing at all.
	o.Approve = []string{"docs/added.md", "src/new.go", "README.md", "ghost.txt"}
	p = refused(t, f, o, "not untracked or staged-new files: README.md, ghost.txt")
	if !slices.Equal(p.ApprovedNotNew, []string{"README.md", "ghost.txt"}) {
		t.Errorf("approved_not_new = %q", p.ApprovedNotNew)
	}

	o.Approve = []string{"docs/added.md", "./src/new.go"}
	refused(t, f, o, "not a clean repository path")
	o.Approve = []string{"docs/added.md", "src/new.go", "/etc/passwd"}
	refused(t, f, o, "must be relative")
}

func TestRecoverWrongEvidenceID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	o := f.opts()
	o.EvidenceID = "ev_0002"
	refused(t, f, o, `--evidence-id "ev_0002" does not match the preserved evidence id "ev_0001"`)
	o.EvidenceID = ""
	refused(t, f, o, "--evidence-id")
}

func TestRecoverPreservedHeadMismatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	f.ev.PreservedHeadSHA = f.base
	f.saveEvidence()
	refused(t, f, f.opts(), "preserved HEAD mismatch: repository HEAD is "+f.head)
}

func TestRecoverStaleBase(t *testing.T) {
	t.Parallel()
	t.Run("wrapper names another base", func(t *testing.T) {
		f := newFixture(t, fixtureOpts{commitWrapper: true})
		// An older commit on canonical: not this task's prepared base.
		other := f.git(f.other, "rev-parse", "HEAD")
		f.ev.TestEvidence = []TestEvidence{{Argv: []string{SanityWrapper, "--base", other}, ExitCode: exitCodeP(0)}}
		f.saveEvidence()
		p := refused(t, f, f.opts(), "no preserved test evidence counts")
		if p.TestEvidence[0].Accepted || !strings.Contains(p.TestEvidence[0].Reason, "stale base: --base "+other) {
			t.Errorf("judged %+v", p.TestEvidence[0])
		}
		if p.PreservedEvidence != nil {
			t.Errorf("preserved_test_evidence = %+v, want none", p.PreservedEvidence)
		}
	})
	t.Run("wrapper without base", func(t *testing.T) {
		f := newFixture(t, fixtureOpts{commitWrapper: true})
		f.ev.TestEvidence = []TestEvidence{{Argv: []string{SanityWrapper, "--changed-file", "feature.txt"}, ExitCode: exitCodeP(0)}}
		f.saveEvidence()
		p := refused(t, f, f.opts(), "no preserved test evidence counts")
		if !strings.Contains(p.TestEvidence[0].Reason, "missing --base") {
			t.Errorf("judged %+v", p.TestEvidence[0])
		}
	})
	t.Run("prepared base not an ancestor", func(t *testing.T) {
		f := newFixture(t, fixtureOpts{})
		// A commit the repository has, off the preserved history.
		f.ev.PreparedBaseSHA = f.git(f.repo, "commit-tree", f.base+"^{tree}", "-m", "side")
		f.saveEvidence()
		refused(t, f, f.opts(), "stale base: prepared base "+f.ev.PreparedBaseSHA+" is not an ancestor")
	})
	t.Run("prepared base unknown to the repository", func(t *testing.T) {
		f := newFixture(t, fixtureOpts{})
		f.ev.PreparedBaseSHA = f.git(f.other, "rev-parse", "HEAD")
		f.saveEvidence()
		refused(t, f, f.opts(), "prepared base "+f.ev.PreparedBaseSHA+" is not a commit in the repository")
	})
}

func TestRecoverWrapperNotCommitted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	// The agent wrote the wrapper but never committed it.
	f.write(f.repo, SanityWrapper, sanityWrapper, 0o755)
	f.ev.TestEvidence = []TestEvidence{{Argv: []string{SanityWrapper, "--base", f.base}, ExitCode: exitCodeP(0)}}
	f.saveEvidence()
	o := f.opts()
	o.Approve = append(o.Approve, SanityWrapper)
	p := refused(t, f, o, "no preserved test evidence counts")
	if !strings.Contains(p.TestEvidence[0].Reason, "not committed in the preserved HEAD") {
		t.Errorf("judged %+v", p.TestEvidence[0])
	}
}

func TestRecoverWrapperModifiedInWorkspace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{commitWrapper: true})
	f.write(f.repo, SanityWrapper, "#!/bin/sh\nexit 0\n", 0o755)
	f.ev.TestEvidence = []TestEvidence{{Argv: []string{SanityWrapper, "--base", f.base}, ExitCode: exitCodeP(0)}}
	f.saveEvidence()
	p := refused(t, f, f.opts(), "no preserved test evidence counts")
	if !strings.Contains(p.TestEvidence[0].Reason, "uncommitted changes") {
		t.Errorf("judged %+v", p.TestEvidence[0])
	}
}

func TestRecoverWrapperExtraArgument(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{commitWrapper: true})
	f.ev.TestEvidence = []TestEvidence{{Argv: []string{SanityWrapper, "--base", f.base, "--changed-file", "feature.txt", "-k", "smoke"}, ExitCode: exitCodeP(0)}}
	f.saveEvidence()
	p := refused(t, f, f.opts(), "no preserved test evidence counts")
	if !strings.Contains(p.TestEvidence[0].Reason, `argument "-k" is outside --base/--changed-file`) {
		t.Errorf("judged %+v", p.TestEvidence[0])
	}
}

func TestWrapperEvidenceAccepted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{commitWrapper: true})
	f.ev.TestEvidence = []TestEvidence{
		{Argv: []string{"pytest", "-k", "smoke"}, ExitCode: exitCodeP(0)},
		{Argv: []string{"./" + SanityWrapper, "--base=" + f.base, "--changed-file", "feature.txt", "--changed-file=README.md"}, ExitCode: exitCodeP(0)},
	}
	f.saveEvidence()
	p, err := Inspect(context.Background(), f.ws, Options{Env: f.env})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Recoverable || p.PreservedEvidence == nil || p.PreservedEvidence.Index != 1 || p.PreservedEvidence.Kind != KindSanityWrapper {
		t.Fatalf("refusals %q, preserved_test_evidence %+v", p.Refusals, p.PreservedEvidence)
	}
	if p.TestEvidence[0].Accepted || p.TestEvidence[0].Kind != KindOther {
		t.Errorf("an arbitrary command counted: %+v", p.TestEvidence[0])
	}

	// The same wrapper run, failed, does not count.
	f.ev.TestEvidence[1].ExitCode = exitCodeP(1)
	f.saveEvidence()
	refused(t, f, f.opts(), "no preserved test evidence counts")

	// A later failing contract run supersedes an earlier pass.
	f.ev.TestEvidence = []TestEvidence{
		{Argv: f.ev.ContractCommand, ExitCode: exitCodeP(0)},
		{Argv: f.ev.ContractCommand, ExitCode: exitCodeP(2)},
	}
	f.saveEvidence()
	refused(t, f, f.opts(), "test evidence #1 (contract_command) failed after #0 passed")
}

func TestRecoverFailingGate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	f.ev.VerificationCommands = [][]string{{"sh", "-c", "echo verifying; exit 3"}}
	f.saveEvidence()
	remoteBefore := f.remoteMain()
	headBefore := f.git(f.repo, "rev-parse", "HEAD")
	statusBefore := f.git(f.repo, "--no-optional-locks", "status", "--porcelain=v1", "--untracked-files=all")
	o := f.opts()
	o.Execute = true
	var out bytes.Buffer
	_, rec, err := Recover(context.Background(), f.ws, o, &out)
	if err == nil || !strings.Contains(err.Error(), `verification[0] gate ["sh" "-c" "echo verifying; exit 3"] failed with exit code 3`) {
		t.Fatalf("Recover = %v", err)
	}
	if rec == nil || rec.Status != RecordFailed || rec.FailedStep != StepGate || len(rec.Gates) != 2 || rec.Gates[0].ExitCode != 0 || rec.Gates[1].ExitCode != 3 {
		t.Fatalf("record %+v", rec)
	}
	if !strings.Contains(out.String(), "verifying") {
		t.Errorf("gate output not relayed: %q", out.String())
	}
	if got := f.remoteMain(); got != remoteBefore {
		t.Fatalf("remote moved to %s after a failing gate", got)
	}
	if f.git(f.repo, "rev-parse", "HEAD") != headBefore || f.git(f.repo, "--no-optional-locks", "status", "--porcelain=v1", "--untracked-files=all") != statusBefore {
		t.Errorf("the preserved checkout changed")
	}
	if wl := f.git(f.repo, "worktree", "list", "--porcelain"); strings.Count(wl, "worktree ") != 1 {
		t.Errorf("temporary worktree left behind:\n%s", wl)
	}
	var disk Record
	data, _ := os.ReadFile(filepath.Join(f.ws, RecordFile))
	if json.Unmarshal(data, &disk) != nil || disk.Status != RecordFailed || disk.FailedStep != StepGate {
		t.Errorf("record on disk: %s", data)
	}
	// A failed attempt does not block a corrected retry, and progress is untouched.
	if p, err := LoadProgress(f.ws); err != nil || p.Status != "refused" {
		t.Errorf("progress after failure: %+v, %v", p, err)
	}
}

func TestRecoverHappyPath(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	canonical := f.remoteMain()
	before := f.repoState()
	o := f.opts()
	o.Execute = true
	o.Now = func() time.Time { return time.Date(2026, 10, 3, 9, 0, 0, 0, time.UTC) }
	plan, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	pushed := f.remoteMain()
	if rec.Status != RecordPushed || rec.PushedCommit != pushed || rec.LeaseSHA != canonical || rec.RebasedHead != pushed {
		t.Fatalf("record %+v; remote main %s, canonical was %s", rec, pushed, canonical)
	}
	// History: canonical <- rebased agent commit <- recovery commit.
	if got := f.git(f.other, "fetch", "-q", "origin"); got != "" {
		t.Logf("fetch: %s", got)
	}
	if parent := f.git(f.other, "rev-parse", pushed+"~2"); parent != canonical {
		t.Errorf("pushed~2 = %s, want the canonical tip %s", parent, canonical)
	}
	if subj := f.git(f.other, "log", "-1", "--format=%s", pushed+"~1"); subj != "agent: implement feature" {
		t.Errorf("pushed~1 is %q, want the rebased agent commit", subj)
	}
	for key, want := range map[string]string{
		TrailerRecovery:   "refused-new-files",
		TrailerEvidenceID: "ev_0001",
		TrailerTaskID:     "task_b1828d67",
		TrailerHead:       f.head,
		TrailerBase:       f.base,
		TrailerNewFile:    "docs/added.md\nsrc/new.go",
	} {
		got := f.git(f.other, "log", "-1", "--format=%(trailers:key="+key+",valueonly)", pushed)
		if got != want {
			t.Errorf("trailer %s = %q, want %q", key, got, want)
		}
	}
	files := f.git(f.other, "ls-tree", "-r", "--name-only", pushed)
	for _, want := range []string{"README.md", "canon.txt", "docs/added.md", "feature.txt", "scripts/contract.sh", "src/new.go"} {
		if !strings.Contains("\n"+files+"\n", "\n"+want+"\n") {
			t.Errorf("pushed tree lacks %s:\n%s", want, files)
		}
	}
	if readme := f.git(f.other, "show", pushed+":README.md"); !strings.Contains(readme, "agent notes") {
		t.Errorf("modified tracked file not committed: %q", readme)
	}
	if len(rec.Gates) != 2 || rec.Gates[0].Gate != "contract" || rec.Gates[0].ExitCode != 0 || rec.Gates[1].Gate != "verification[0]" {
		t.Errorf("gates %+v", rec.Gates)
	}
	if rec.PreservedTestEvidence == nil || rec.PreservedTestEvidence.Kind != KindContract {
		t.Errorf("record preserved_test_evidence %+v", rec.PreservedTestEvidence)
	}
	// The preserved checkout itself (HEAD, index, working tree) is untouched;
	// only the remote-tracking ref moved with the fetch.
	after := f.repoState()
	strip := func(s string) string {
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "refs/remotes/origin/") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	if strip(after) != strip(before) {
		t.Errorf("preserved checkout changed:\n%s\n---\n%s", before, after)
	}
	if plan.Mode != ModeRefusedNewFiles {
		t.Errorf("mode %s", plan.Mode)
	}
	var disk Record
	data, _ := os.ReadFile(filepath.Join(f.ws, RecordFile))
	if json.Unmarshal(data, &disk) != nil || disk.Status != RecordPushed || disk.PushedCommit != pushed || disk.FinishedAt != "2026-10-03T09:00:00Z" {
		t.Errorf("record on disk: %s", data)
	}
	var prog map[string]any
	data, _ = os.ReadFile(filepath.Join(f.ws, ProgressFile))
	if json.Unmarshal(data, &prog) != nil || prog["status"] != ProgressRecovered || prog["recovered_commit"] != pushed || prog["executor_pid"] != float64(4242) {
		t.Errorf("progress after recovery: %s", data)
	}
	// Recovering twice is refused.
	refused(t, f, f.opts(), "not recoverable")
}

func TestRecoverRemoteMovedMeanwhile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	// The contract gate runs after the fetch; while it runs, another
	// contributor pushes to canonical.
	mover := filepath.Join(f.dir, "mover.sh")
	f.write(f.dir, "mover.sh", `#!/bin/sh
set -e
sh scripts/contract.sh
cd "$1"
echo interloper >> canon.txt
GIT_AUTHOR_NAME=I GIT_AUTHOR_EMAIL=i@example.invalid GIT_COMMITTER_NAME=I GIT_COMMITTER_EMAIL=i@example.invalid git commit -q -am interloper
git push -q origin main
`, 0o755)
	f.ev.ContractCommand = []string{"sh", mover, f.other}
	f.ev.TestEvidence = []TestEvidence{{Argv: f.ev.ContractCommand, ExitCode: exitCodeP(0)}}
	f.saveEvidence()
	fetched := f.remoteMain()
	o := f.opts()
	o.Execute = true
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err == nil || !strings.Contains(err.Error(), "guarded push refused") {
		t.Fatalf("Recover = %v, want the lease to fail", err)
	}
	interloper := f.git(f.other, "rev-parse", "HEAD")
	if got := f.remoteMain(); got != interloper || got == fetched {
		t.Fatalf("remote main = %s, want the interloper's %s (fetched %s)", got, interloper, fetched)
	}
	if rec.Status != RecordFailed || rec.FailedStep != StepPush || rec.LeaseSHA != fetched || rec.PushedCommit != "" {
		t.Fatalf("record %+v", rec)
	}
	// Nothing of ours reached the remote.
	if out := f.git(f.dir, "--git-dir", f.remote, "log", "--all", "--format=%H", "--grep", "Finalizer-Recovery"); out != "" {
		t.Fatalf("recovery commits reached the remote: %s", out)
	}
}

func TestRecoverStalledFinalizer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	// The finalizer had committed the new files itself, then stalled while
	// pushing; only a tracked edit is still pending.
	f.git(f.repo, "add", "src/new.go")
	f.git(f.repo, "commit", "-q", "-m", "agent: add files")
	f.head = f.git(f.repo, "rev-parse", "HEAD")
	f.ev.PreservedHeadSHA = f.head
	f.ev.Status, f.ev.RefusalReason, f.ev.FinalizerInterrupted = EvidencePartial, "", true
	f.saveEvidence()
	f.saveProgress("pushing")

	plan, err := Inspect(context.Background(), f.ws, Options{Env: f.env})
	if err != nil || plan.Mode != ModeStalled || !plan.Recoverable {
		t.Fatalf("inspect: %v, mode %s, refusals %q", err, plan.Mode, plan.Refusals)
	}
	o := f.opts()
	o.Approve = nil
	refused(t, f, o, "recover it with --stalled")

	o.Stalled, o.Execute = true, true
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err != nil {
		t.Fatalf("Recover --stalled: %v", err)
	}
	pushed := f.remoteMain()
	if rec.PushedCommit != pushed || rec.Mode != ModeStalled || rec.RecoveryCommit == "" {
		t.Fatalf("record %+v, remote %s", rec, pushed)
	}
	f.git(f.other, "fetch", "-q", "origin")
	if got := f.git(f.other, "log", "-1", "--format=%(trailers:key="+TrailerRecovery+",valueonly)", pushed); got != "stalled-finalizer" {
		t.Errorf("trailer %s = %q", TrailerRecovery, got)
	}
	if readme := f.git(f.other, "show", pushed+":README.md"); !strings.Contains(readme, "agent notes") {
		t.Errorf("pending tracked edit not committed")
	}
	if p, _ := LoadProgress(f.ws); p == nil || p.Status != ProgressRecovered {
		t.Errorf("progress %+v", p)
	}
}

func TestStalledWithNothingPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	f.git(f.repo, "add", "-A")
	f.git(f.repo, "commit", "-q", "-m", "everything")
	f.head = f.git(f.repo, "rev-parse", "HEAD")
	f.ev.PreservedHeadSHA = f.head
	f.ev.Status, f.ev.RefusalReason, f.ev.FinalizerInterrupted = EvidencePartial, "", true
	f.saveEvidence()
	f.saveProgress("gates_passed")
	o := f.opts()
	o.Approve, o.Stalled, o.Execute = nil, true, true
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec.RecoveryCommit != "" || f.remoteMain() != rec.PushedCommit {
		t.Fatalf("record %+v", rec)
	}
	if subj := f.git(f.dir, "--git-dir", f.remote, "log", "-1", "--format=%s", "main"); subj != "everything" {
		t.Errorf("remote tip subject %q", subj)
	}
}

func TestModes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		status      string
		reason      string
		interrupted bool
		progress    string
		stalled     bool
		want        string
	}{
		{"published", EvidencePublished, "", false, "pushed", false, `evidence status "published"`},
		{"refused for another reason", EvidenceRefused, "gate_failed", false, "refused", false, `refused for "gate_failed"`},
		{"interrupted but progress terminal", EvidencePartial, "", true, "pushed", true, `progress is terminal ("pushed")`},
		{"interrupted without progress", EvidencePartial, "", true, "", true, "finalizer-progress.json is missing"},
		{"interrupted but not partial", EvidenceRefused, RefusalNewFiles, true, "pushing", true, `not "partial"`},
		{"refused but progress running", EvidenceRefused, RefusalNewFiles, false, "pushing", false, `finalizer progress is "pushing"`},
		{"--stalled on a refused workspace", EvidenceRefused, RefusalNewFiles, false, "refused", true, "drop --stalled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, fixtureOpts{})
			f.ev.Status, f.ev.RefusalReason, f.ev.FinalizerInterrupted = c.status, c.reason, c.interrupted
			f.saveEvidence()
			f.saveProgress(c.progress)
			o := f.opts()
			o.Stalled = c.stalled
			refused(t, f, o, c.want)
		})
	}
}

func TestUntrustedRepositoryConfig(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	marker := filepath.Join(f.dir, "pwned")
	f.git(f.repo, "config", "filter.x.clean", "touch "+marker+"; cat")
	f.write(f.repo, ".gitattributes", "* filter=x\n", 0o644)
	f.git(f.repo, "config", "core.fsmonitor", "touch "+marker)
	o := f.opts()
	o.Approve = append(o.Approve, ".gitattributes")
	refused(t, f, o, "sets keys recovery does not trust")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a program from the repository config ran")
	}

	g := newFixture(t, fixtureOpts{})
	g.git(g.repo, "remote", "set-url", "origin", filepath.Join(g.dir, "elsewhere.git"))
	refused(t, g, g.opts(), "does not match the evidence's remote_url")
}

func TestEvidenceValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	f.ev.PreparedBaseSHA = "abc"
	f.ev.Remote = "-oops"
	f.ev.ContractCommand = nil
	f.ev.VerificationCommands = nil
	f.ev.TestEvidence = []TestEvidence{{Argv: []string{"x"}}}
	f.ev.Repository = "../elsewhere"
	f.saveEvidence()
	_, err := Inspect(context.Background(), f.ws, Options{Env: f.env})
	if err == nil {
		t.Fatal("malformed evidence accepted")
	}
	for _, want := range []string{"prepared_base_sha", "remote:", "contract_command", "verification_commands", "test_evidence[0].exit_code", "repository:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// Control characters could forge lines of the text plan.
	g := newFixture(t, fixtureOpts{})
	g.ev.CanonicalBranch = "main\rrecoverable: true"
	g.ev.RemoteURL = g.remote + "\x1b[2K"
	g.ev.Repository = "repo\nx"
	g.saveEvidence()
	_, err = Inspect(context.Background(), g.ws, Options{Env: g.env})
	for _, want := range []string{"canonical_branch", "remote_url", "repository:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("control characters: error %v does not name %s", err, want)
		}
	}

	f.write(f.ws, EvidenceFile, "{", 0o644)
	if _, err := Inspect(context.Background(), f.ws, Options{Env: f.env}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("truncated evidence: %v", err)
	}
	os.Remove(filepath.Join(f.ws, EvidenceFile))
	if _, err := Inspect(context.Background(), f.ws, Options{Env: f.env}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing evidence: %v", err)
	}
	f.write(f.ws, ProgressFile, `{"schema":"mac.finalizer_progress.v1","evidence_id":"ev_0001","status":"thinking"}`, 0o644)
	if _, err := LoadProgress(f.ws); err == nil || !strings.Contains(err.Error(), `unknown value "thinking"`) {
		t.Errorf("unknown progress status: %v", err)
	}
}

func TestGateTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	start := time.Now()
	gc := gateCommand{argv: []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"}, dir: dir, env: []string{"PATH=" + os.Getenv("PATH")}}
	run, _ := runGate(context.Background(), gc, 500*time.Millisecond, nil_writer{}, "verification[0]")
	if !run.TimedOut || run.ExitCode != -1 {
		t.Fatalf("run %+v, want a timeout", run)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("timeout took %s", el)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(data))
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break // gone, or a zombie awaiting its reaper
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %s survived the gate timeout", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type nil_writer struct{}

func (nil_writer) Write(p []byte) (int, error) { return len(p), nil }

func TestRecoverRebaseConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	f.write(f.other, "feature.txt", "base\ncanonical rewrite\n", 0o644)
	f.git(f.other, "commit", "-q", "-am", "conflicting change")
	f.git(f.other, "push", "-q", "origin", "main")
	remoteBefore := f.remoteMain()
	o := f.opts()
	o.Execute = true
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err == nil || !strings.Contains(err.Error(), "rebase onto origin/main") {
		t.Fatalf("Recover = %v, want a rebase failure", err)
	}
	if rec.FailedStep != StepRebase || len(rec.Gates) != 0 {
		t.Fatalf("record %+v: gates must not run after a failed rebase", rec)
	}
	if f.remoteMain() != remoteBefore {
		t.Fatal("remote moved after a failed rebase")
	}
	if wl := f.git(f.repo, "worktree", "list", "--porcelain"); strings.Count(wl, "worktree ") != 1 {
		t.Errorf("temporary worktree left behind:\n%s", wl)
	}
}

func TestSubmodulesRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	// A staged gitlink, as "git submodule add" would leave it.
	f.git(f.repo, "update-index", "--add", "--cacheinfo", "160000,"+f.base+",vendor/lib")
	o := f.opts()
	o.Approve = append(o.Approve, "vendor/lib")
	refused(t, f, o, "the repository has submodules (vendor/lib)")
}

// FuzzJudgeWrapper: the wrapper-argument judge never panics, and whatever
// it accepts names exactly this base once and nothing outside
// --base/--changed-file.
func FuzzJudgeWrapper(f *testing.F) {
	base := strings.Repeat("a", 40)
	f.Add("--base\x00"+base, 0)
	f.Add("--base="+base+"\x00--changed-file\x00x", 0)
	f.Add("--changed-file=y\x00--base\x00"+base+"\x00-k", 0)
	f.Add("--base", 1)
	f.Fuzz(func(t *testing.T, joined string, exit int) {
		args := strings.Split(joined, "\x00")
		reason := judgeWrapper(args, exit, base, wrapperState{committed: true})
		if reason != "" {
			return
		}
		if exit != 0 {
			t.Fatalf("accepted a failed run: %q", args)
		}
		bases := 0
		for i := 0; i < len(args); i++ {
			switch a := args[i]; {
			case a == "--base":
				if args[i+1] != base {
					t.Fatalf("accepted --base %q", args[i+1])
				}
				bases++
				i++
			case a == "--changed-file":
				i++
			case a == "--base="+base:
				bases++
			case strings.HasPrefix(a, "--changed-file="):
			default:
				t.Fatalf("accepted argument %q", a)
			}
		}
		if bases != 1 {
			t.Fatalf("accepted %d --base in %q", bases, args)
		}
	})
}

// TestRecoverCommitsWhatTheWorkingTreeHolds: the recovery commit, built
// from a snapshot of the listed paths, records what git add --update
// would: a deleted tracked file as removed, a new executable bit, a
// tracked file replaced by a symlink as a link, a tracked file replaced
// by a directory as removed (its new content an approved new file), and
// the content of modified and approved files byte for byte.
func TestRecoverCommitsWhatTheWorkingTreeHolds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	f.write(f.repo, "gone.txt", "gone\n", 0o644)
	f.write(f.repo, "tool.sh", "#!/bin/sh\n", 0o644)
	f.write(f.repo, "link.txt", "was a file\n", 0o644)
	f.write(f.repo, "dir.txt", "was a file\n", 0o644)
	f.git(f.repo, "add", "gone.txt", "tool.sh", "link.txt", "dir.txt")
	f.git(f.repo, "commit", "-q", "-m", "agent: more files", "--", "gone.txt", "tool.sh", "link.txt", "dir.txt")
	f.ev.PreservedHeadSHA = f.git(f.repo, "rev-parse", "HEAD")
	f.saveEvidence()
	os.Remove(filepath.Join(f.repo, "gone.txt"))
	os.Chmod(filepath.Join(f.repo, "tool.sh"), 0o755)
	os.Remove(filepath.Join(f.repo, "link.txt"))
	os.Symlink("README.md", filepath.Join(f.repo, "link.txt"))
	os.Remove(filepath.Join(f.repo, "dir.txt"))
	f.write(f.repo, "dir.txt/inner.md", "inner\n", 0o644)
	o := f.opts()
	o.Approve = append(o.Approve, "dir.txt/inner.md")
	o.Execute = true
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	f.git(f.other, "fetch", "-q", "origin")
	got := f.git(f.other, "ls-tree", "-r", rec.PushedCommit)
	for _, want := range []string{"100755 blob", "\ttool.sh", "120000 blob", "\tlink.txt", "\tdir.txt/inner.md", "\tsrc/new.go", "\tdocs/added.md"} {
		if !strings.Contains(got, want) {
			t.Errorf("pushed tree lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"\tgone.txt\n", "\tdir.txt\n"} {
		if strings.Contains(got+"\n", gone) {
			t.Errorf("pushed tree still holds %q:\n%s", gone, got)
		}
	}
	if mode := f.git(f.other, "ls-tree", rec.PushedCommit, "tool.sh"); !strings.HasPrefix(mode, "100755 ") {
		t.Errorf("tool.sh: %s, want mode 100755", mode)
	}
	if target := f.git(f.other, "cat-file", "-p", rec.PushedCommit+":link.txt"); target != "README.md" {
		t.Errorf("link.txt target %q", target)
	}
	if readme := f.git(f.other, "cat-file", "-p", rec.PushedCommit+":README.md"); readme != "# project\n\nagent notes" {
		t.Errorf("README.md %q", readme)
	}
}
