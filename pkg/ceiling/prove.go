package ceiling

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Excess is one thing a policy allows that the ceiling does not (or that
// the prover cannot show it does): the policy field that allows it and
// why. Field paths are those of the normalised policy (what `policy-sync
// check` prints): endpoints, binaries and rules are numbered in its
// sorted order.
type Excess struct {
	Field string `json:"field"`
	Msg   string `json:"message"`
}

func (e *Excess) Error() string { return e.Field + ": " + e.Msg }

// Options tune Contains.
type Options struct {
	// Resolve maps a filesystem path to the path the kernel would grant
	// (symlinks resolved; see ResolvePath). Nil compares paths as named.
	Resolve func(string) string
}

// Contains proves that every request, connection and filesystem access
// p allows, c allows too, and returns nil; otherwise every excess found,
// in a fixed order (filesystem, landlock, process, then network entries
// by key, endpoints, ports and binaries by index). A nil result is a
// proof; a non-empty one lists what was not proved, which includes real
// excesses and the cases the prover does not decide (documented in the
// package comment). p and c must be valid, normalised policies.
func Contains(c, p *policy.Policy, opts Options) []*Excess {
	var out []*Excess
	out = append(out, filesystemWithin(p, c, opts.Resolve)...)
	if c.Landlock.Compatibility == policy.CompatibilityHardRequirement && p.Landlock.Compatibility != policy.CompatibilityHardRequirement {
		out = append(out, &Excess{"landlock.compatibility", fmt.Sprintf("%s may run without Landlock, but the ceiling requires hard_requirement", p.Landlock.Compatibility)})
	}
	if p.Process.RunAsUser != c.Process.RunAsUser {
		out = append(out, &Excess{"process.run_as_user", fmt.Sprintf("%s is not the ceiling's %s", p.Process.RunAsUser, c.Process.RunAsUser)})
	}
	if p.Process.RunAsGroup != c.Process.RunAsGroup {
		out = append(out, &Excess{"process.run_as_group", fmt.Sprintf("%s is not the ceiling's %s", p.Process.RunAsGroup, c.Process.RunAsGroup)})
	}
	cc, err := candidates(c)
	if err != nil {
		return append(out, &Excess{"network_policies", "the ceiling does not compile: " + err.Error()})
	}
	pc, err := candidates(p)
	if err != nil {
		return append(out, &Excess{"network_policies", "the policy does not compile: " + err.Error()})
	}
	nw := &networkProver{cands: newIndex(cc), pcands: newIndex(pc), own: map[*policy.Endpoint]*candidate{}, verdicts: map[verdictKey]verdict{}}
	for _, x := range pc {
		nw.own[x.ep] = x
	}
	for _, key := range sortedKeys(p.NetworkPolicies) {
		out = append(out, nw.entryWithin(key, p.NetworkPolicies[key])...)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// identRE is a map key that can be written .key in a field path (as in
// pkg/policy's messages); other keys are written ["key"].
var identRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]*$`) })

func entryPath(key string) string {
	if identRE().MatchString(key) {
		return "network_policies." + key
	}
	return "network_policies[" + strconv.Quote(key) + "]"
}

// filesystemWithin: include_workdir, and each read_only path at or under
// a ceiling read_only or read_write path, each read_write path at or
// under a ceiling read_write path (Landlock grants a path's whole
// subtree; read_write holds every right read_only does).
func filesystemWithin(p, c *policy.Policy, resolve func(string) string) []*Excess {
	var out []*Excess
	if p.Filesystem.IncludeWorkdir && !c.Filesystem.IncludeWorkdir {
		out = append(out, &Excess{"filesystem_policy.include_workdir", "makes the working directory writable, which the ceiling does not"})
	}
	if resolve == nil {
		resolve = func(s string) string { return s }
	}
	under := func(x string, roots []string) bool {
		rx := resolve(x)
		return slices.ContainsFunc(roots, func(r string) bool { return pathUnder(rx, resolve(r)) })
	}
	readable := append(slices.Clone(c.Filesystem.ReadOnly), c.Filesystem.ReadWrite...)
	for i, x := range p.Filesystem.ReadOnly {
		if !under(x, readable) {
			out = append(out, &Excess{fmt.Sprintf("filesystem_policy.read_only[%d]", i), fmt.Sprintf("%s is not within the ceiling's filesystem_policy", x)})
		}
	}
	for i, x := range p.Filesystem.ReadWrite {
		if !under(x, c.Filesystem.ReadWrite) {
			out = append(out, &Excess{fmt.Sprintf("filesystem_policy.read_write[%d]", i), fmt.Sprintf("%s is not within the ceiling's filesystem_policy.read_write", x)})
		}
	}
	return out
}

// pathUnder reports whether the cleaned absolute path x is root or lies
// beneath it.
func pathUnder(x, root string) bool {
	x, root = path.Clean(x), path.Clean(root)
	return x == root || root == "/" || strings.HasPrefix(x, root+"/")
}

// candidate is one ceiling endpoint.
type candidate struct {
	key   string
	index int
	path  string // its field path in the ceiling
	ep    *policy.Endpoint
	bins  []policy.Binary
	sel   hostSel
	rank  uint64
}

type networkProver struct {
	cands  *index // the ceiling's endpoints
	pcands *index // the policy's
	own    map[*policy.Endpoint]*candidate
	// verdicts caches behaviour checks per (policy endpoint, ceiling
	// candidate, port, binary).
	verdicts map[verdictKey]verdict
}

type verdictKey struct {
	e    *policy.Endpoint
	c    *candidate
	port int
	bin  string
}

type verdict struct{ field, msg string }

// candidates lists a policy's endpoints with their decision ranks, by
// rank.
func candidates(c *policy.Policy) ([]*candidate, error) {
	eng, err := decision.Compile(c, 0)
	if err != nil {
		return nil, err
	}
	var out []*candidate
	for _, key := range sortedKeys(c.NetworkPolicies) {
		np := c.NetworkPolicies[key]
		for i, ep := range np.Endpoints {
			rank, ok := eng.Precedence(key, i)
			if !ok {
				return nil, fmt.Errorf("%s.endpoints[%d]: no decision rank", entryPath(key), i)
			}
			out = append(out, &candidate{key: key, index: i, path: fmt.Sprintf("%s.endpoints[%d]", entryPath(key), i),
				ep: ep, bins: np.Binaries, sel: selectorOf(ep), rank: rank})
		}
	}
	slices.SortFunc(out, func(a, b *candidate) int {
		switch {
		case a.rank < b.rank:
			return -1
		case a.rank > b.rank:
			return 1
		}
		return 0
	})
	return out, nil
}

// entryWithin proves one network_policies entry: for every endpoint e,
// port p and binary b, some ceiling endpoint c selects every destination
// e does on p for a binary pattern holding b, and every ceiling endpoint
// that can decide such a request instead (c itself, or one that outranks
// c and may select the same destination on p: an ancestor of the caller
// can match its binaries) lets through at least what e does.
func (nw *networkProver) entryWithin(key string, np *policy.NetworkPolicy) []*Excess {
	var out []*Excess
	ep := entryPath(key)
	for i, e := range np.Endpoints {
		out = append(out, nw.endpointWithin(fmt.Sprintf("%s.endpoints[%d]", ep, i), ep, e, np.Binaries)...)
	}
	return out
}

func (nw *networkProver) endpointWithin(field, entryField string, e *policy.Endpoint, bins []policy.Binary) []*Excess {
	sel := selectorOf(e)
	named := sel.kind != selHostless && sel.kind != selIP
	var hosts []*candidate
	for _, c := range nw.cands.related(sel) {
		// A hostless ceiling endpoint selects every name but reaches only
		// its allowed_ips, never all a name may resolve to (scopeWithin):
		// it cannot prove a named endpoint, so it does not count as
		// covering its host.
		if named && c.sel.kind == selHostless {
			continue
		}
		if hostWithin(sel, c.sel) {
			hosts = append(hosts, c)
		}
	}
	if len(hosts) == 0 {
		return []*Excess{{field, sel.describe() + " not within the ceiling"}}
	}
	var out []*Excess
	for _, port := range e.Ports {
		var ported []*candidate
		for _, c := range hosts {
			if c.ep.HasPort(port) {
				ported = append(ported, c)
			}
		}
		if len(ported) == 0 {
			out = append(out, &Excess{field + ".ports", fmt.Sprintf("port %d of %s not within the ceiling", port, sel.describe())})
			continue
		}
		for j, b := range bins {
			if x := nw.binaryWithin(field, sel, e, port, b.Path, ported); x != nil {
				if x.Field == "" {
					x.Field = fmt.Sprintf("%s.binaries[%d]", entryField, j)
				}
				out = append(out, x)
			}
		}
	}
	return out
}

// binaryWithin returns nil when some candidate (in rank order) proves the
// binary's traffic to e on port within the ceiling, else the first
// candidate's failure (Field "" means the binary's own field).
func (nw *networkProver) binaryWithin(field string, sel hostSel, e *policy.Endpoint, port int, bin string, ported []*candidate) *Excess {
	var first *Excess
	for _, c := range ported {
		if !slices.ContainsFunc(c.bins, func(cb policy.Binary) bool { return binaryWithin(bin, cb.Path) }) {
			continue
		}
		v := nw.behaviour(e, sel, c, port, bin)
		if v.msg == "" {
			return nil
		}
		if first == nil {
			first = &Excess{field + v.field, fmt.Sprintf("%s:%d %s", sel.text, port, v.msg)}
			if sel.kind == selHostless {
				first.Msg = fmt.Sprintf("%s on port %d %s", sel.describe(), port, v.msg)
			}
		}
	}
	if first == nil {
		return &Excess{"", fmt.Sprintf("binary %s may not reach %s on port %d within the ceiling", bin, sel.destination(), port)}
	}
	return first
}

// behaviour checks every ceiling endpoint that can decide a request e
// allows on port for bin when c selects it: c, and those outranking c
// that may select the same destination on port — unless the policy
// itself never lets e decide those requests (shadowed).
func (nw *networkProver) behaviour(e *policy.Endpoint, sel hostSel, c *candidate, port int, bin string) verdict {
	k := verdictKey{e, c, port, bin}
	if v, ok := nw.verdicts[k]; ok {
		return v
	}
	v := verdict{}
	for _, w := range nw.cands.related(sel) {
		if w.rank > c.rank {
			break
		}
		if w != c && (!w.ep.HasPort(port) || !mayIntersect(sel, w.sel) || nw.shadowed(e, sel, w, port, bin)) {
			continue
		}
		if why := scopeWithin(sel, w.sel); why != "" {
			v = verdict{"", why}
			break
		}
		if f, why := behaviourWithin(e, w.ep, w.path); why != "" {
			v = verdict{f, why}
			break
		}
	}
	nw.verdicts[k] = v
	return v
}

// shadowed reports whether the policy never lets its endpoint e decide a
// request that the ceiling's w would decide: some endpoint e2 of the
// policy outranks e, has the port, selects every destination e and w
// both select, and allows every caller e allows through bin, or every
// caller w allows. The policy then sends those requests to e2 (or
// higher), whose own proof covers them.
func (nw *networkProver) shadowed(e *policy.Endpoint, sel hostSel, w *candidate, port int, bin string) bool {
	me := nw.own[e]
	if me == nil {
		return false
	}
	for _, e2 := range nw.pcands.related(sel) {
		if e2.rank >= me.rank {
			return false
		}
		if !e2.ep.HasPort(port) || !(hostWithin(w.sel, e2.sel) || hostWithin(sel, e2.sel)) {
			continue
		}
		if binariesWithin([]policy.Binary{{Path: bin}}, e2.bins) || binariesWithin(w.bins, e2.bins) {
			return true
		}
	}
	return false
}

// binariesWithin reports whether each pattern of a lies within one
// pattern of b.
func binariesWithin(a, b []policy.Binary) bool {
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y policy.Binary) bool { return binaryWithin(x.Path, y.Path) }) {
			return false
		}
	}
	return true
}
