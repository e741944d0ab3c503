package finalizer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Modes of a preserved workspace.
const (
	ModeRefusedNewFiles = "refused_new_files" // the finalizer refused new files
	ModeStalled         = "stalled_finalizer" // the finalizer was interrupted
	ModeNone            = "not_recoverable"
)

// Options control Inspect and Recover.
type Options struct {
	// Recovery judges the request too: the evidence id, --stalled and the
	// approvals. Without it Inspect only describes the workspace.
	Recovery   bool
	EvidenceID string
	Stalled    bool
	Approve    []string

	// Env is the base environment for git and the gates; GIT_* entries are
	// dropped. Nil means DefaultEnv().
	Env      []string
	Identity Identity

	// Gates. By default every gate runs inside sandbox-supervisor:
	// GateSandbox names it ("" means sandbox-supervisor next to this
	// executable, else in the absolute PATH directories of Env), and
	// GatePolicy is passed to it as --policy ("" means the supervisor's own
	// resolution, evaluated in Env). Without a usable sandbox recovery is
	// refused. UnsandboxedGates is the operator's explicit opt-in to run
	// the gates on the host, unconfined; the record says so.
	GateSandbox      string
	GatePolicy       string
	UnsandboxedGates bool

	// Remote is the canonical remote URL the operator names (--remote):
	// the evidence's remote_url must equal it exactly. Recovery refuses
	// without it; plain inspection reports the URL as unverified.
	Remote string

	// Recover only.
	Execute     bool
	GateTimeout time.Duration // per command; 0 means 30 minutes
	RecordPath  string        // "" means WORKSPACE/finalizer-recovery.json
	Now         func() time.Time
}

// DefaultEnv keeps the few variables git, the gates and sandbox-supervisor
// need from the process environment (PATH, HOME, TMPDIR, USER, LOGNAME,
// LANG, TERM, SSH_AUTH_SOCK, and the supervisor's knobs
// MAC_OPENSHELL_POLICY, MAC_OPENSHELL_REQUIRED, MAC_OPENSHELL_EVENTS_FILE,
// MAC_HUB_VERIFY_PROFILE) and nothing else, so no secret in the caller's
// environment reaches a gate.
func DefaultEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "TERM", "SSH_AUTH_SOCK",
		"MAC_OPENSHELL_POLICY", "MAC_OPENSHELL_REQUIRED", "MAC_OPENSHELL_EVENTS_FILE", "MAC_HUB_VERIFY_PROFILE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Plan is what Inspect found and what Recover would do.
type Plan struct {
	Workspace            string `json:"workspace"`
	Repository           string `json:"repository"`
	Mode                 string `json:"mode"`
	ModeReason           string `json:"mode_reason"`
	EvidenceID           string `json:"evidence_id"`
	TaskID               string `json:"task_id"`
	EvidenceStatus       string `json:"evidence_status"`
	RefusalReason        string `json:"refusal_reason,omitempty"`
	FinalizerInterrupted bool   `json:"finalizer_interrupted"`
	ProgressStatus       string `json:"progress_status,omitempty"`
	ProgressTerminal     bool   `json:"progress_terminal"`
	PreservedHead        string `json:"preserved_head"`
	Head                 string `json:"head"`
	PreparedBase         string `json:"prepared_base"`
	CanonicalBranch      string `json:"canonical_branch"`
	Remote               string `json:"remote"`
	RemoteURL            string `json:"remote_url"`
	// RemoteVerified: remote_url equals the operator's --remote.
	RemoteVerified       bool             `json:"remote_verified"`
	ModifiedFiles        []string         `json:"modified_files"`
	NewFiles             []string         `json:"new_files"`
	ApprovedNewFiles     []string         `json:"approved_new_files"`
	UnapprovedNewFiles   []string         `json:"unapproved_new_files"`
	ApprovedNotNew       []string         `json:"approved_not_new"`
	TestEvidence         []JudgedEvidence `json:"test_evidence"`
	PreservedEvidence    *JudgedEvidence  `json:"preserved_test_evidence"`
	ContractCommand      []string         `json:"contract_command"`
	VerificationCommands [][]string       `json:"verification_commands"`
	// GateSetup says where recovery would run the gates (set when the
	// request is judged, not by plain inspection).
	GateSetup   *GateSetup `json:"gate_setup,omitempty"`
	Steps       []string   `json:"steps"`
	Refusals    []string   `json:"refusals"`
	Recoverable bool       `json:"recoverable"`

	ev          *Evidence
	progress    *Progress
	progressRaw []byte // the bytes progress was parsed from
	gates       *GateSetup
	remote      remoteTarget
}

func (p *Plan) refuse(format string, args ...any) {
	p.Refusals = append(p.Refusals, fmt.Sprintf(format, args...))
}

// RefusedError is returned when a plan has refusals.
type RefusedError struct{ Plan *Plan }

func (e *RefusedError) Error() string {
	return "recovery refused: " + strings.Join(e.Plan.Refusals, "; ")
}

// Inspect reads the workspace and returns the plan. It changes nothing: no
// file is written, git runs without optional locks so the index is never
// refreshed, and nothing is fetched. An error means the workspace could not
// be read at all; problems with it are Refusals in the plan.
func Inspect(ctx context.Context, workspace string, opts Options) (*Plan, error) {
	w := &wsHandles{}
	defer w.close()
	p, m, err := inspect(ctx, workspace, opts, w)
	m.remove()
	return p, err
}

// inspect is Inspect keeping the workspace descriptors (in w, which the
// caller closes) and the private mirror (which the caller removes).
//
// Before any git command runs, every file root reads from the workspace
// is opened relative to a directory descriptor without following a
// symlink, non-blocking, and must be a small regular file with one link;
// the repository's .git and working tree are scanned for symlinks, FIFOs,
// sockets, devices, hard links, commondir, alternates and worktrees.
func inspect(ctx context.Context, workspace string, opts Options, w *wsHandles) (*Plan, *mirror, error) {
	ws, err := filepath.Abs(workspace)
	if err != nil {
		return nil, nil, err
	}
	wsd, err := openWorkspaceDir(ws)
	if err != nil {
		return nil, nil, err
	}
	w.ws = wsd
	ev, err := loadEvidence(wsd)
	if err != nil {
		return nil, nil, err
	}
	prog, progRaw, err := loadProgress(wsd)
	if err != nil {
		return nil, nil, err
	}
	w.repoRel = ev.Repository
	p := &Plan{
		Workspace: ws, Repository: filepath.Join(ws, ev.Repository),
		EvidenceID: ev.EvidenceID, TaskID: ev.TaskID, EvidenceStatus: ev.Status,
		RefusalReason: ev.RefusalReason, FinalizerInterrupted: ev.FinalizerInterrupted,
		PreservedHead: ev.PreservedHeadSHA, PreparedBase: ev.PreparedBaseSHA,
		CanonicalBranch: ev.CanonicalBranch, Remote: ev.Remote, RemoteURL: ev.RemoteURL,
		ContractCommand: ev.ContractCommand, VerificationCommands: ev.VerificationCommands,
		ModifiedFiles: []string{}, NewFiles: []string{}, ApprovedNewFiles: []string{},
		UnapprovedNewFiles: []string{}, ApprovedNotNew: []string{}, TestEvidence: []JudgedEvidence{},
		Steps: []string{}, Refusals: []string{},
		ev: ev, progress: prog, progressRaw: progRaw,
	}
	if prog != nil {
		p.ProgressStatus = prog.Status
		p.ProgressTerminal, _ = Terminal(prog.Status)
		if prog.EvidenceID != ev.EvidenceID {
			p.refuse("%s names evidence %q but %s names %q", ProgressFile, prog.EvidenceID, EvidenceFile, ev.EvidenceID)
		}
	}
	p.Mode, p.ModeReason = mode(ev, prog)
	if p.Mode == ModeNone {
		p.refuse("not recoverable: %s", p.ModeReason)
	}
	if rec, err := loadRecord(wsd, recordPath(ws, opts)); err != nil {
		var sfe *SpecialFileError
		if errors.As(err, &sfe) {
			p.refuse("%v", err)
		}
	} else if rec.Status == RecordPushed {
		p.refuse("already recovered: %s records commit %s pushed to %s", quotePath(recordPath(ws, opts)), rec.PushedCommit, ev.CanonicalBranch)
	}
	if opts.Recovery {
		if opts.EvidenceID != ev.EvidenceID {
			p.refuse("--evidence-id %q does not match the preserved evidence id %q", opts.EvidenceID, ev.EvidenceID)
		}
		switch {
		case p.Mode == ModeStalled && !opts.Stalled:
			p.refuse("the finalizer was interrupted (progress %q); recover it with --stalled", p.ProgressStatus)
		case p.Mode == ModeRefusedNewFiles && opts.Stalled:
			p.refuse("--stalled given, but the finalizer refused new files and was not interrupted; drop --stalled")
		}
		gs, err := resolveGateSetup(opts)
		if err != nil {
			p.refuse("%s: %v; name a usable sandbox-supervisor with --gate-sandbox (and its policy with --gate-policy), or accept running the gates unconfined with --unsandboxed-gates", errNoGateSandbox, err)
		} else {
			p.GateSetup, p.gates = gs, gs
		}
	}

	checkRemote(ctx, p, opts)

	m, stop, err := openRepository(ctx, p, w, opts)
	if err != nil {
		return nil, nil, err
	}
	if stop {
		return finish(p, opts), nil, nil
	}
	g := m.git
	p.Head = m.head
	if p.Head != ev.PreservedHeadSHA {
		p.refuse("preserved HEAD mismatch: repository HEAD is %s but the evidence preserved %s", p.Head, ev.PreservedHeadSHA)
	}
	for _, marker := range []string{"MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply", "BISECT_LOG"} {
		if w.git.exists(marker) {
			p.refuse("the repository has an operation in progress (%s); it is not the state the finalizer preserved", marker)
		}
	}
	if _, err := g.run(ctx, nil, "merge-base", "--is-ancestor", ev.PreparedBaseSHA, "HEAD"); err != nil {
		if exitCode(err) == 1 {
			p.refuse("stale base: prepared base %s is not an ancestor of the preserved HEAD", ev.PreparedBaseSHA)
		} else {
			p.refuse("prepared base %s is not a commit in the repository", ev.PreparedBaseSHA)
		}
	}

	// Submodules would make status and add consult other repositories and
	// their configuration; recovery does not handle them.
	subs, bad, err := checkIndex(ctx, g.withEnv("GIT_INDEX_FILE="+m.index))
	if err != nil {
		return nil, m, fmt.Errorf("reading the preserved index %s: %w", quotePath(w.git.join("index")), err)
	}
	if len(bad) > 0 {
		p.refuse("the preserved index %s lists paths outside the working tree or inside a .git (git would read them as root): %s", quotePath(w.git.join("index")), quotePaths(bad))
		return finish(p, opts), m, nil
	}
	if len(subs) > 0 {
		p.refuse("the repository has submodules (%s); recover it by hand", quotePaths(subs))
		return finish(p, opts), m, nil
	}
	entries, err := m.work(w.repo, m.index).status(ctx)
	if err != nil {
		return nil, m, fmt.Errorf("git status of %s: %w", quotePath(p.Repository), err)
	}
	if !w.repoStillSame() {
		p.refuse("repository %s changed while it was inspected", quotePath(p.Repository))
		return finish(p, opts), m, nil
	}
	for _, e := range entries {
		switch {
		case unsafeRepoPath(e.path):
			p.refuse("git status lists %s, a path outside the working tree or inside a .git", quotePath(e.path))
		case e.x == '?' && e.y == '?':
			p.NewFiles = append(p.NewFiles, e.path)
		case e.x == 'U' || e.y == 'U' || (e.x == 'A' && e.y == 'A') || (e.x == 'D' && e.y == 'D'):
			p.refuse("unmerged path %s", quotePath(e.path))
		case e.x == 'A' && e.y == 'D':
			p.refuse("staged-new file %s was deleted from the working tree; resolve it by hand", quotePath(e.path))
		case e.x == 'A':
			p.NewFiles = append(p.NewFiles, e.path)
		default:
			p.ModifiedFiles = append(p.ModifiedFiles, e.path)
		}
	}
	slices.Sort(p.NewFiles)
	slices.Sort(p.ModifiedFiles)
	if p.Mode == ModeRefusedNewFiles && len(p.NewFiles) == 0 {
		p.refuse("the evidence says the finalizer refused new files, but the workspace has none")
	}

	ws8, err := wrapperStatus(ctx, g, p.ModifiedFiles)
	if err != nil {
		return nil, m, err
	}
	var problem string
	p.TestEvidence, p.PreservedEvidence, problem = judgeTestEvidence(ev, ws8)
	if problem != "" {
		p.refuse("%s", problem)
	}

	if opts.Recovery {
		judgeApprovals(p, opts.Approve)
	}
	return finish(p, opts), m, nil
}

func finish(p *Plan, opts Options) *Plan {
	p.Steps = planSteps(p, opts)
	p.Recoverable = len(p.Refusals) == 0
	return p
}

func mode(ev *Evidence, prog *Progress) (string, string) {
	switch {
	case ev.FinalizerInterrupted:
		if ev.Status != EvidencePartial {
			return ModeNone, fmt.Sprintf("finalizer_interrupted is set but the evidence status is %q, not %q", ev.Status, EvidencePartial)
		}
		if prog == nil {
			return ModeNone, fmt.Sprintf("finalizer_interrupted is set but %s is missing", ProgressFile)
		}
		if t, _ := Terminal(prog.Status); t {
			return ModeNone, fmt.Sprintf("finalizer progress is terminal (%q)", prog.Status)
		}
		return ModeStalled, fmt.Sprintf("finalizer_interrupted with non-terminal progress %q", prog.Status)
	case ev.Status == EvidenceRefused && ev.RefusalReason == RefusalNewFiles:
		if prog != nil && prog.Status != "refused" {
			return ModeNone, fmt.Sprintf("evidence says refused at new files but finalizer progress is %q", prog.Status)
		}
		return ModeRefusedNewFiles, "the unattended finalizer refused untracked or staged-new files"
	case ev.Status == EvidenceRefused:
		return ModeNone, fmt.Sprintf("the finalizer refused for %q, not for new files", ev.RefusalReason)
	default:
		return ModeNone, fmt.Sprintf("evidence status %q without finalizer_interrupted", ev.Status)
	}
}

// checkRepoConfig refuses repository config outside a small allow-list
// and a remote whose URL differs from the evidence. It reports whether the
// inspection must stop. Names compare as git compares them: section and
// key case-insensitively, the subsection (the remote's name) exactly.
func checkRepoConfig(entries []configEntry, p *Plan, file string) bool {
	var bad []string
	var urls, pushURLs []string
	for _, e := range entries {
		if !allowedConfig(e, p.Remote) {
			bad = append(bad, e.name())
			continue
		}
		if e.section == "remote" && e.key == "url" {
			urls = append(urls, e.value)
		}
		if e.section == "remote" && e.key == "pushurl" {
			pushURLs = append(pushURLs, e.value)
		}
	}
	stop := false
	if len(bad) > 0 {
		p.refuse("repository config %s sets keys recovery does not trust (they could run programs or redirect the push): %s", quotePath(file), quotePaths(bad))
		stop = true
	}
	if len(urls) != 1 || urls[0] != p.RemoteURL {
		p.refuse("remote %q URL %s does not match the evidence's remote_url %q", p.Remote, quotePaths(urls), p.RemoteURL)
	}
	for _, u := range pushURLs {
		if u != p.RemoteURL {
			p.refuse("remote %q pushurl %q does not match the evidence's remote_url %q", p.Remote, u, p.RemoteURL)
		}
	}
	return stop
}

func wrapperStatus(ctx context.Context, g *gitRunner, modified []string) (wrapperState, error) {
	out, err := g.run(ctx, nil, "ls-tree", "-z", "HEAD", "--", SanityWrapper)
	if err != nil {
		return wrapperState{}, err
	}
	var ws wrapperState
	// "<mode> <type> <oid>\t<path>\0"
	if rec := strings.TrimSuffix(string(out), "\x00"); rec != "" {
		meta, name, _ := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		ws.committed = name == SanityWrapper && len(f) == 3 && f[1] == "blob" && (f[0] == "100755" || f[0] == "100644")
	}
	ws.modified = slices.Contains(modified, SanityWrapper)
	return ws, nil
}

// checkIndex lists the preserved index's submodules (mode 160000) and the
// paths in it that git should never hold: the agent wrote the index, and
// an entry such as ../../etc/shadow would make git status and add read a
// file outside the working tree as root.
func checkIndex(ctx context.Context, g *gitRunner) (subs, bad []string, err error) {
	out, err := g.run(ctx, nil, "ls-files", "--stage", "-z")
	if err != nil {
		return nil, nil, err
	}
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		meta, name, _ := strings.Cut(rec, "\t")
		if unsafeRepoPath(name) {
			bad = append(bad, name)
		}
		if strings.HasPrefix(meta, "160000 ") {
			subs = append(subs, name)
		}
	}
	return subs, bad, nil
}

// unsafeRepoPath reports whether p is not a plain path inside the working
// tree: empty, absolute, with an empty, ".", ".." or ".git" component.
func unsafeRepoPath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.IndexByte(p, 0) >= 0 {
		return true
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." || strings.EqualFold(c, ".git") {
			return true
		}
	}
	return false
}

// cleanApproval validates one --approve-new-file path.
func cleanApproval(a string) error {
	switch {
	case a == "":
		return errors.New("empty path")
	case strings.ContainsFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("contains a control character")
	case path.IsAbs(a):
		return errors.New("must be relative to the repository root")
	case path.Clean(a) != a || a == "." || a == ".." || strings.HasPrefix(a, "../"):
		return fmt.Errorf("is not a clean repository path (want %q)", path.Clean(a))
	}
	return nil
}

func judgeApprovals(p *Plan, approve []string) {
	approved := map[string]bool{}
	for _, a := range approve {
		if err := cleanApproval(a); err != nil {
			p.refuse("--approve-new-file %q: %v", a, err)
			continue
		}
		approved[a] = true
	}
	isNew := map[string]bool{}
	for _, n := range p.NewFiles {
		isNew[n] = true
		if approved[n] {
			p.ApprovedNewFiles = append(p.ApprovedNewFiles, n)
		} else {
			p.UnapprovedNewFiles = append(p.UnapprovedNewFiles, n)
		}
	}
	for a := range approved {
		if !isNew[a] {
			p.ApprovedNotNew = append(p.ApprovedNotNew, a)
		}
	}
	slices.Sort(p.ApprovedNotNew)
	if len(p.UnapprovedNewFiles) > 0 {
		p.refuse("unapproved new files (approve each exactly with --approve-new-file): %s", quotePaths(p.UnapprovedNewFiles))
	}
	if len(p.ApprovedNotNew) > 0 {
		p.refuse("--approve-new-file names paths that are not untracked or staged-new files: %s", quotePaths(p.ApprovedNotNew))
	}
	for _, n := range p.ApprovedNewFiles {
		if strings.ContainsFunc(n, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			p.refuse("new file %q has a control character in its name; it cannot be recorded in a commit trailer", n)
		}
	}
}

func planSteps(p *Plan, opts Options) []string {
	var s []string
	verb := "stalled-finalizer"
	if p.Mode == ModeRefusedNewFiles {
		verb = "refused-new-files"
	}
	if len(p.ModifiedFiles)+len(p.NewFiles) > 0 {
		s = append(s, fmt.Sprintf("commit %d modified tracked file(s) and %d approved new file(s) on %s with %s provenance trailers (temporary index; the preserved checkout is not changed)",
			len(p.ModifiedFiles), len(p.NewFiles), short(p.Head), verb))
	} else {
		s = append(s, "no pending work to commit")
	}
	s = append(s,
		fmt.Sprintf("fetch refs/heads/%s from %s (remote_url itself) into a private mirror and note its sha as the lease", p.CanonicalBranch, quotePath(p.RemoteURL)),
		fmt.Sprintf("rebase the commits after prepared base %s onto it, in a temporary worktree", short(p.PreparedBase)),
		fmt.Sprintf("run the contract command %q and %d verification command(s) in a throwaway clone of the rebased commit, %s, each with a %s timeout; refuse on any failure or if a gate changed the clone's HEAD or tracked files",
			p.ContractCommand, len(p.VerificationCommands), gateWhere(p.gates), gateTimeout(opts)),
		fmt.Sprintf("git push --force-with-lease=refs/heads/%s:<fetched sha> %s <rebased>:refs/heads/%s, then confirm the remote ref", p.CanonicalBranch, quotePath(p.RemoteURL), p.CanonicalBranch),
		fmt.Sprintf("write the recovery record %s and mark %s %q", quotePath(recordPath(p.Workspace, opts)), ProgressFile, ProgressRecovered),
	)
	return s
}

func gateWhere(gs *GateSetup) string {
	switch {
	case gs == nil:
		return "inside sandbox-supervisor"
	case !gs.Sandboxed:
		return fmt.Sprintf("ON THE HOST, UNCONFINED, as uid %d (--unsandboxed-gates)", gs.UID)
	}
	return fmt.Sprintf("inside %s run --kind verify (policy %s, as %s)", gs.Sandbox, gs.Policy, idString(gs.UID, gs.GID))
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func gateTimeout(opts Options) time.Duration {
	if opts.GateTimeout > 0 {
		return opts.GateTimeout
	}
	return 30 * time.Minute
}

func envOrDefault(env []string) []string {
	if env == nil {
		return DefaultEnv()
	}
	return env
}

func identityOrDefault(id Identity) Identity {
	if id.Name == "" || id.Email == "" {
		return DefaultIdentity
	}
	return id
}

func recordPath(ws string, opts Options) string {
	if opts.RecordPath != "" {
		return opts.RecordPath
	}
	return filepath.Join(ws, RecordFile)
}
