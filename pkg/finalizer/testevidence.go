package finalizer

import (
	"fmt"
	"slices"
	"strings"
)

// SanityWrapper is the repository's own sanity wrapper, whose run counts as
// contract evidence under the conditions of seed 000.
const SanityWrapper = "scripts/run-sanity-tests.sh"

// Kinds of preserved test evidence.
const (
	KindContract      = "contract_command"
	KindSanityWrapper = "sanity_wrapper"
	KindOther         = "other"
)

// JudgedEvidence is one preserved test run and the verdict on it.
type JudgedEvidence struct {
	Index    int      `json:"index"`
	Argv     []string `json:"argv"`
	ExitCode int      `json:"exit_code"`
	Kind     string   `json:"kind"`
	Accepted bool     `json:"accepted"`
	Reason   string   `json:"reason,omitempty"`
}

// wrapperState says whether the sanity wrapper is committed, unmodified, in
// the preserved HEAD.
type wrapperState struct {
	committed bool
	modified  bool
}

// wrapperArgs returns the wrapper's arguments if argv invokes it
// (scripts/run-sanity-tests.sh or ./scripts/..., optionally through a bare
// "sh" or "bash"), and ok=false otherwise.
func wrapperArgs(argv []string) ([]string, bool) {
	a := argv
	if len(a) > 0 && (a[0] == "sh" || a[0] == "bash") {
		a = a[1:]
	}
	if len(a) == 0 {
		return nil, false
	}
	if a[0] == SanityWrapper || a[0] == "./"+SanityWrapper {
		return a[1:], true
	}
	return nil, false
}

// judgeWrapper applies the seed's conditions to a wrapper invocation.
func judgeWrapper(args []string, exit int, base string, ws wrapperState) string {
	if !ws.committed {
		return SanityWrapper + " is not committed in the preserved HEAD"
	}
	if ws.modified {
		return SanityWrapper + " has uncommitted changes in the preserved workspace, so the run did not use the committed wrapper"
	}
	var bases []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--base" || a == "--changed-file":
			if i+1 >= len(args) {
				return fmt.Sprintf("%s has no value", a)
			}
			if a == "--base" {
				bases = append(bases, args[i+1])
			}
			i++
		case strings.HasPrefix(a, "--base="):
			bases = append(bases, strings.TrimPrefix(a, "--base="))
		case strings.HasPrefix(a, "--changed-file="):
		default:
			return fmt.Sprintf("argument %q is outside --base/--changed-file", a)
		}
	}
	switch {
	case len(bases) == 0:
		return "missing --base"
	case len(bases) > 1:
		return fmt.Sprintf("%d --base arguments; exactly one is allowed", len(bases))
	case bases[0] != base:
		return fmt.Sprintf("stale base: --base %s is not this task's prepared base %s", bases[0], base)
	}
	if exit != 0 {
		return fmt.Sprintf("failed with exit code %d", exit)
	}
	return ""
}

// judgeTestEvidence classifies every preserved test run. The accepted item
// is the last one that counts; it is nil when none counts, or when a
// contract or wrapper run after it failed (a later gate run supersedes an
// earlier pass).
func judgeTestEvidence(ev *Evidence, ws wrapperState) (items []JudgedEvidence, accepted *JudgedEvidence, problem string) {
	items = make([]JudgedEvidence, 0, len(ev.TestEvidence))
	for i, te := range ev.TestEvidence {
		j := JudgedEvidence{Index: i, Argv: te.Argv, ExitCode: *te.ExitCode}
		if slices.Equal(te.Argv, ev.ContractCommand) {
			j.Kind = KindContract
			if j.ExitCode != 0 {
				j.Reason = fmt.Sprintf("failed with exit code %d", j.ExitCode)
			}
		} else if args, ok := wrapperArgs(te.Argv); ok {
			j.Kind = KindSanityWrapper
			j.Reason = judgeWrapper(args, j.ExitCode, ev.PreparedBaseSHA, ws)
		} else {
			j.Kind = KindOther
			j.Reason = "neither the contract command nor " + SanityWrapper + " --base <prepared base>"
		}
		j.Accepted = j.Reason == ""
		items = append(items, j)
	}
	last := -1
	for i := range items {
		if items[i].Accepted {
			last = i
		}
	}
	if last < 0 {
		if len(items) == 0 {
			return items, nil, "no preserved test evidence"
		}
		return items, nil, "no preserved test evidence counts as a passed contract gate"
	}
	for i := last + 1; i < len(items); i++ {
		if items[i].Kind != KindOther && items[i].ExitCode != 0 {
			return items, nil, fmt.Sprintf("test evidence #%d (%s) failed after #%d passed", i, items[i].Kind, last)
		}
	}
	a := items[last]
	return items, &a, ""
}
