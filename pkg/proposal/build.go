package proposal

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// build turns the grants into operations, keeping each only when the
// policy with it (and every operation kept before it) is valid and
// within the ceiling: filesystem paths by path, then rules, then one
// entry per binary.
func (b *builder) build() error {
	for _, p := range sortedKeys(b.fs) {
		g := b.fs[p]
		op := Op{Op: OpAddReadOnly, Path: p, Answers: g.answers}
		if g.write {
			op.Op = OpAddReadWrite
		}
		b.keep(op)
	}
	keys := make([]ruleKey, 0, len(b.rules))
	for k := range b.rules {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y ruleKey) int {
		return cmp.Or(cmp.Compare(x.entry, y.entry), cmp.Compare(x.index, y.index), cmp.Compare(x.path, y.path), cmp.Compare(x.method, y.method))
	})
	for _, k := range keys {
		i := k.index
		b.keep(Op{Op: OpAddRule, Entry: k.entry, Endpoint: &i, Rule: &policy.Rule{Allow: policy.RequestMatch{Method: k.method, Path: k.path}},
			Answers: b.rules[k].answers})
	}
	for _, bin := range sortedKeys(b.nets) {
		b.buildEntry(bin)
	}
	for _, k := range slices.SortedFunc(maps.Keys(b.dnsWant), func(x, y dnsKey) int {
		return cmp.Or(cmp.Compare(x.sandbox, y.sandbox), cmp.Compare(x.name, y.name))
	}) {
		for _, d := range b.dnsWant[k] {
			b.unanswered(d, "a client that does not use the proxy variables looked the name up; policy DNS answers only names of the policy's endpoints, and the port it wanted is not known (add an endpoint by hand)")
		}
	}
	final, err := applyOps(b.base, b.out.Patch)
	if err != nil {
		return fmt.Errorf("proposal: %w", err) // every kept operation was checked: a bug
	}
	b.out.Result = final.Checksum()
	b.selfCheck(final)
	return nil
}

// keep adds op when the result stays valid and within the ceiling, else
// records its denials as unanswered with why.
func (b *builder) keep(op Op) bool {
	if why := b.refusal(append(slices.Clone(b.out.Patch), op)); why != "" {
		for _, d := range op.Answers {
			b.unanswered(d, "%s", why)
		}
		return false
	}
	b.out.Patch = append(b.out.Patch, op)
	return true
}

// refusal says why the policy ops produce may not be proposed ("" when
// it may).
func (b *builder) refusal(ops []Op) string {
	p, err := applyOps(b.base, ops)
	if err != nil {
		return err.Error()
	}
	if b.opts.Ceiling != nil {
		if err := b.opts.Ceiling(p); err != nil {
			return err.Error()
		}
	}
	return ""
}

// entryKeyRE is what may not appear in a proposed entry key.
var entryKeyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9_-]+`) })

// entryKey names the entry a binary's grants go to: proposed_<base name>,
// with a numeric suffix when taken.
func (b *builder) entryKey(bin string) string {
	name := entryKeyRE().ReplaceAllString(path.Base(bin), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	key := EntryPrefix + name
	taken := func(k string) bool {
		if _, ok := b.base.NetworkPolicies[k]; ok {
			return true
		}
		return slices.ContainsFunc(b.out.Patch, func(op Op) bool { return op.Op == OpAddEntry && op.Entry == k })
	}
	for i := 2; taken(key); i++ {
		key = EntryPrefix + name + "_" + strconv.Itoa(i)
	}
	return key
}

// buildEntry proposes one entry for bin: its host patterns first (each
// replacing the exact names it stands for), then the remaining exact
// endpoints, ports merged per host and behaviour; each kept only when
// the policy with it is valid and within the ceiling.
func (b *builder) buildEntry(bin string) {
	key := b.entryKey(bin)
	entry := &Entry{Binaries: []policy.Binary{{Path: bin}}}
	var answers []Denial
	trial := func(ep *policy.Endpoint) string {
		e := &Entry{Binaries: entry.Binaries, Endpoints: append(slices.Clone(entry.Endpoints), ep)}
		return b.refusal(append(slices.Clone(b.out.Patch), Op{Op: OpAddEntry, Entry: key, Value: e}))
	}
	folded := map[*netGrant]bool{}
	var exact []*netGrant
	for _, g := range b.nets[bin] {
		if g.ep.HostPattern().IsWildcard() {
			continue
		}
		exact = append(exact, g)
	}
	for _, w := range sortedGrants(b.nets[bin]) {
		if !w.ep.HostPattern().IsWildcard() {
			continue
		}
		if trial(w.ep) != "" {
			continue // the names are proposed one by one below
		}
		entry.Endpoints = append(entry.Endpoints, w.ep)
		answers = append(answers, w.answers...)
		for _, g := range exact {
			if w.ep.HostPattern().Match(g.ep.Host) && slices.Equal(g.ep.Ports, w.ep.Ports) && g.ep.Protocol == w.ep.Protocol && wildcardable(g) {
				folded[g] = true
			}
		}
	}
	for _, g := range mergeGrants(exact, folded) {
		if why := trial(g.ep); why != "" {
			for _, d := range g.answers {
				b.unanswered(d, "%s", why)
			}
			continue
		}
		entry.Endpoints = append(entry.Endpoints, g.ep)
		answers = append(answers, g.answers...)
	}
	if len(entry.Endpoints) == 0 {
		return
	}
	slices.SortFunc(answers, compareDenials)
	b.out.Patch = append(b.out.Patch, Op{Op: OpAddEntry, Entry: key, Value: entry, Answers: answers})
}

func wildcardable(g *netGrant) bool { _, ok := wildcardParent(g); return ok }

func sortedGrants(gs []*netGrant) []*netGrant {
	out := slices.Clone(gs)
	slices.SortStableFunc(out, func(a, b *netGrant) int { return cmpEndpoint(a.ep, b.ep) })
	return out
}

// mergeGrants merges the grants not folded into a pattern: one endpoint
// per host and behaviour, with every port asked for.
func mergeGrants(gs []*netGrant, folded map[*netGrant]bool) []*netGrant {
	byKey := map[string]*netGrant{}
	var order []string
	for _, g := range gs {
		if folded[g] {
			continue
		}
		probe := cloneEndpoint(g.ep)
		probe.Ports = nil
		k, _ := json.Marshal(probe)
		m := byKey[string(k)]
		if m == nil {
			m = &netGrant{binary: g.binary, ep: cloneEndpoint(g.ep)}
			byKey[string(k)] = m
			order = append(order, string(k))
		} else {
			m.ep.Ports = append(m.ep.Ports, g.ep.Ports...)
		}
		m.answers = append(m.answers, g.answers...)
	}
	out := make([]*netGrant, 0, len(order))
	for _, k := range order {
		m := byKey[k]
		slices.Sort(m.ep.Ports)
		m.ep.Ports = slices.Compact(m.ep.Ports)
		slices.SortFunc(m.answers, compareDenials)
		out = append(out, m)
	}
	slices.SortStableFunc(out, func(a, b *netGrant) int {
		return cmp.Or(cmpEndpoint(a.ep, b.ep), bytes.Compare(mustJSON(a.ep), mustJSON(b.ep)))
	})
	return out
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// selfCheck moves to unanswered every answer the final policy would
// still refuse (judged by the real decision code), so the proposal never
// claims more than it does. The operation stays: it answers the rest.
func (b *builder) selfCheck(final *policy.Policy) {
	eng, err := decision.Compile(final, 0)
	if err != nil {
		return
	}
	for i := range b.out.Patch {
		op := &b.out.Patch[i]
		kept := op.Answers[:0]
		for _, d := range op.Answers {
			if why := stillDenied(final, eng, d); why != "" {
				b.unanswered(d, "the patch would still refuse it: %s", why)
				continue
			}
			kept = append(kept, d)
		}
		op.Answers = kept
	}
}

func stillDenied(p *policy.Policy, eng *decision.Engine, d Denial) string {
	switch d.Kind {
	case KindFilesystem:
		write := slices.ContainsFunc(d.Rights, func(r string) bool { return writeRights[r] })
		if covered(d.File, p.Filesystem.ReadWrite) || !write && covered(d.File, p.Filesystem.ReadOnly) {
			return ""
		}
		return "no path grants it"
	case KindNetwork, KindHTTP:
		res := eng.Decide(decision.Request{Host: d.Host, Port: d.Port, Binary: d.Binary, Ancestors: d.Ancestors})
		if !res.Allowed {
			return res.Reason.String()
		}
		if d.Kind == KindHTTP {
			if ok, why := res.Endpoint.CheckRequest(d.Method, d.Path, url.Values{}, ""); !ok && !res.Audit {
				return why
			}
		}
		if d.Transport == "tcp" && res.Endpoint.Protocol != policy.ProtocolTCP {
			return "the deciding endpoint is not protocol tcp"
		}
	}
	return ""
}
