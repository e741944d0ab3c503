package proposal

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// timeFormat is how summaries and proposals print times (UTC).
const timeFormat = "2006-01-02T15:04:05.000Z"

// WriteSummary prints denials as a table, one aggregated denial a line:
// count, first and last seen, kind and what was denied. Names the agent
// chose (paths, hosts) go through quote, which the caller supplies to
// make them safe for its output (a terminal); nil prints them as they
// are.
func WriteSummary(w io.Writer, ds []Denial, quote func(string) string) error {
	if quote == nil {
		quote = func(s string) string { return s }
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNT\tFIRST SEEN\tLAST SEEN\tSANDBOX\tKIND\tDENIED")
	total := 0
	for _, d := range ds {
		total += d.Count
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", d.Count, d.First.Format(timeFormat), d.Last.Format(timeFormat),
			quote(d.Sandbox), d.Kind, quote(d.String()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	noun := "denials"
	if total == 1 {
		noun = "denial"
	}
	_, err := fmt.Fprintf(w, "%d %s in %d groups\n", total, noun, len(ds))
	return err
}

// Answered counts the denials the patch answers (each aggregated denial
// once, with its count summed).
func (p *Proposal) Answered() (groups, denials int) {
	for _, op := range p.Patch {
		for _, d := range op.Answers {
			groups++
			denials += d.Count
		}
	}
	return groups, denials
}

// Describe is a one-line summary of the proposal for logs.
func (p *Proposal) Describe() string {
	g, n := p.Answered()
	var ops []string
	for _, op := range p.Patch {
		ops = append(ops, op.Op)
	}
	return fmt.Sprintf("%d operations (%s) answering %d denials in %d groups; %d groups unanswered",
		len(p.Patch), strings.Join(ops, ", "), n, g, len(p.Unanswered))
}
