package finalizer

import (
	"fmt"
	"io"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

// WriteText renders the plan for a human operator.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	kv := func(k, format string, args ...any) {
		fmt.Fprintf(&b, "%-24s %s\n", k+":", fmt.Sprintf(format, args...))
	}
	kv("workspace", "%s", quotePath(p.Workspace))
	kv("repository", "%s", quotePath(p.Repository))
	kv("mode", "%s (%s)", p.Mode, p.ModeReason)
	kv("evidence", "%s, task %s, status %s, finalizer_interrupted=%v", p.EvidenceID, p.TaskID, p.EvidenceStatus, p.FinalizerInterrupted)
	if p.ProgressStatus != "" {
		t := "non-terminal"
		if p.ProgressTerminal {
			t = "terminal"
		}
		kv("finalizer progress", "%s (%s)", p.ProgressStatus, t)
	} else {
		kv("finalizer progress", "(no %s)", ProgressFile)
	}
	match := "matches"
	if p.Head != p.PreservedHead {
		match = "repository HEAD is " + p.Head
	}
	kv("preserved HEAD", "%s (%s)", p.PreservedHead, match)
	kv("prepared base", "%s", p.PreparedBase)
	verified := "equals --remote"
	if !p.RemoteVerified {
		verified = "NOT verified: recovery needs --remote naming it"
	}
	kv("canonical", "%s/%s (%s; %s)", p.Remote, quotePath(p.CanonicalBranch), quotePath(p.RemoteURL), verified)
	fmt.Fprintf(&b, "would commit (tracked, modified): %d\n", len(p.ModifiedFiles))
	for _, f := range p.ModifiedFiles {
		fmt.Fprintf(&b, "  %s\n", quotePath(f))
	}
	fmt.Fprintf(&b, "new files (each needs --approve-new-file): %d\n", len(p.NewFiles))
	approved := map[string]bool{}
	for _, f := range p.ApprovedNewFiles {
		approved[f] = true
	}
	for _, f := range p.NewFiles {
		mark := ""
		if approved[f] {
			mark = "  [approved]"
		}
		fmt.Fprintf(&b, "  %s%s\n", quotePath(f), mark)
	}
	fmt.Fprintf(&b, "test evidence:\n")
	for _, e := range p.TestEvidence {
		verdict := "accepted"
		if !e.Accepted {
			verdict = "refused: " + e.Reason
		}
		fmt.Fprintf(&b, "  #%d %s %q exit %d: %s\n", e.Index, e.Kind, e.Argv, e.ExitCode, verdict)
	}
	if p.PreservedEvidence != nil {
		kv("preserved_test_evidence", "#%d %s %q", p.PreservedEvidence.Index, p.PreservedEvidence.Kind, p.PreservedEvidence.Argv)
	} else {
		kv("preserved_test_evidence", "none")
	}
	if gs := p.GateSetup; gs != nil {
		if gs.Sandboxed {
			kv("gates", "sandboxed: %s, policy %s (%s, sha256 %s), as %s", quotePath(gs.Sandbox), gs.Policy, gs.PolicySource, short(gs.PolicySHA256), idString(gs.UID, gs.GID))
		} else {
			kv("gates", "UNSANDBOXED: on the host, as %s (--unsandboxed-gates)", idString(gs.UID, gs.GID))
		}
	}
	fmt.Fprintf(&b, "steps:\n")
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, oneLine(s))
	}
	if len(p.Refusals) > 0 {
		fmt.Fprintf(&b, "refusals:\n")
		for _, r := range p.Refusals {
			fmt.Fprintf(&b, "  - %s\n", oneLine(r))
		}
	}
	kv("recoverable", "%v", p.Recoverable)
	_, err := io.WriteString(w, b.String())
	return err
}

// oneLine keeps a message on its line: any control, line-separator or
// bidi character left in it (a name should have been quoted already) is
// escaped.
func oneLine(s string) string { return termsafe.String(s) }
