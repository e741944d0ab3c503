package proposal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// FormatKind names the proposal format (the file's kind).
const FormatKind = "palisade.policy-proposal/v1"

// MaxSize bounds a proposal file.
const MaxSize = 8 << 20

// Operations.
const (
	OpAddReadOnly  = "add_read_only"  // append Path to filesystem_policy.read_only
	OpAddReadWrite = "add_read_write" // append Path to filesystem_policy.read_write (moving it out of read_only)
	OpAddEntry     = "add_entry"      // add network_policies[Entry] = Value
	OpAddRule      = "add_rule"       // append Rule to network_policies[Entry].endpoints[Endpoint].rules
)

// Proposal is a reviewed, machine-applicable policy change: the patch
// operations, each with the denials it answers, and the denials it does
// not answer, with why. Its YAML form is what propose prints and
// apply-proposal reads.
type Proposal struct {
	Kind string `yaml:"kind"`
	// Base is the policy the patch applies to (Apply refuses another).
	Base Ref `yaml:"base"`
	// Ceiling is the ceiling the result was checked against, if any.
	Ceiling *Ref `yaml:"ceiling,omitempty"`
	// Result is the checksum of the policy the patch produces.
	Result     string       `yaml:"result_checksum"`
	Patch      []Op         `yaml:"patch"`
	Unanswered []Unanswered `yaml:"unanswered"`
}

// Ref names a policy file and its canonical checksum.
type Ref struct {
	Path     string `yaml:"path,omitempty"`
	Checksum string `yaml:"checksum"`
}

// Op is one patch operation and the denials it answers.
type Op struct {
	Op string `yaml:"op"`
	// Path is the filesystem path of add_read_only and add_read_write.
	Path string `yaml:"path,omitempty"`
	// Entry is the network_policies key of add_entry and add_rule.
	Entry string `yaml:"entry,omitempty"`
	// Endpoint is the index of the endpoint add_rule extends, in the
	// base policy's normalised order (what `policy-sync check` prints).
	Endpoint *int `yaml:"endpoint,omitempty"`
	// Rule is add_rule's rule.
	Rule *policy.Rule `yaml:"rule,omitempty"`
	// Value is add_entry's entry.
	Value *Entry `yaml:"value,omitempty"`
	// Answers are the denials the operation would have allowed.
	Answers []Denial `yaml:"answers"`
}

// Entry is a network_policies entry as add_entry writes it.
type Entry struct {
	Endpoints []*policy.Endpoint `yaml:"endpoints"`
	Binaries  []policy.Binary    `yaml:"binaries"`
}

// Unanswered is a denial the patch does not allow, and why.
type Unanswered struct {
	Denial Denial `yaml:",inline"`
	Why    string `yaml:"why"`
}

// Marshal returns the proposal as YAML: a comment header, then the
// fields in a fixed order. The same proposal gives the same bytes.
func (p *Proposal) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString("# Palisade policy proposal. Review it, then apply it with\n")
	b.WriteString("#   policy-sync apply-proposal FILE --approve\n")
	b.WriteString("# which writes the new policy only if the base is unchanged and the\n")
	b.WriteString("# result lies within the ceiling.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(p); err != nil {
		panic("proposal: encode: " + err.Error()) // plain structs: cannot fail
	}
	enc.Close()
	return b.Bytes()
}

// Parse reads a proposal strictly: unknown keys, a wrong kind, an
// unknown operation or one missing its fields are errors.
func Parse(data []byte) (p *Proposal, err error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("proposal is %d bytes; at most %d allowed", len(data), MaxSize)
	}
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("proposal: YAML decoder failed: %v", r)
		}
	}()
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("proposal is empty")
		}
		return nil, fmt.Errorf("proposal: %w", err)
	}
	if line := aliasLine(&doc); line > 0 {
		return nil, fmt.Errorf("proposal: line %d: YAML aliases are not allowed (a proposal means what it literally says)", line)
	}
	// Decode again from the bytes: Node.Decode has no KnownFields.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	p = &Proposal{}
	if err := dec.Decode(p); err != nil {
		return nil, fmt.Errorf("proposal: %w", err)
	}
	if p.Kind != FormatKind {
		return nil, fmt.Errorf("proposal: kind %q, want %s", p.Kind, FormatKind)
	}
	if p.Base.Checksum == "" || p.Result == "" {
		return nil, errors.New("proposal: base.checksum and result_checksum are required")
	}
	for i, op := range p.Patch {
		if err := op.check(); err != nil {
			return nil, fmt.Errorf("proposal: patch[%d]: %w", i, err)
		}
	}
	return p, nil
}

// aliasLine returns the line of the first alias under n, or 0.
func aliasLine(n *yaml.Node) int {
	if n.Kind == yaml.AliasNode {
		return max(n.Line, 1)
	}
	for _, c := range n.Content {
		if l := aliasLine(c); l > 0 {
			return l
		}
	}
	return 0
}

func (op *Op) check() error {
	switch op.Op {
	case OpAddReadOnly, OpAddReadWrite:
		if op.Path == "" || op.Entry != "" || op.Value != nil || op.Rule != nil || op.Endpoint != nil {
			return fmt.Errorf("%s takes path only", op.Op)
		}
	case OpAddEntry:
		if op.Entry == "" || op.Value == nil || op.Path != "" || op.Rule != nil || op.Endpoint != nil {
			return fmt.Errorf("%s takes entry and value only", op.Op)
		}
	case OpAddRule:
		if op.Entry == "" || op.Endpoint == nil || op.Rule == nil || op.Path != "" || op.Value != nil {
			return fmt.Errorf("%s takes entry, endpoint and rule only", op.Op)
		}
	default:
		return fmt.Errorf("unknown op %q (add_read_only, add_read_write, add_entry, add_rule)", op.Op)
	}
	return nil
}

// ErrBaseChanged is returned by Apply when the policy given is not the
// proposal's base.
var ErrBaseChanged = errors.New("the policy is not the proposal's base")

// Apply replays the patch on base, which must have the proposal's base
// checksum, and returns the resulting (validated, normalised) policy,
// which must have the recorded result checksum.
func (p *Proposal) Apply(base *policy.Policy) (*policy.Policy, error) {
	if sum := base.Checksum(); sum != p.Base.Checksum {
		return nil, fmt.Errorf("%w: its checksum is %s, the proposal was made for %s", ErrBaseChanged, sum, p.Base.Checksum)
	}
	out, err := applyOps(base, p.Patch)
	if err != nil {
		return nil, err
	}
	if sum := out.Checksum(); sum != p.Result {
		return nil, fmt.Errorf("the patch gives a policy with checksum %s, not the recorded result_checksum %s (the proposal was edited)", sum, p.Result)
	}
	return out, nil
}

// applyOps applies ops to a copy of base (indices are base's) and
// validates the result.
func applyOps(base *policy.Policy, ops []Op) (*policy.Policy, error) {
	c := base.Clone()
	for i, op := range ops {
		if err := applyOp(c, op); err != nil {
			return nil, fmt.Errorf("patch[%d] (%s): %w", i, op.Op, err)
		}
	}
	out, err := policy.Parse(c.Canonical())
	if err != nil {
		return nil, fmt.Errorf("the patched policy is not valid: %w", err)
	}
	return out, nil
}

func applyOp(c *policy.Policy, op Op) error {
	fs := &c.Filesystem
	switch op.Op {
	case OpAddReadOnly:
		if slices.Contains(fs.ReadOnly, op.Path) || slices.Contains(fs.ReadWrite, op.Path) {
			return fmt.Errorf("%s is already listed", op.Path)
		}
		fs.ReadOnly = append(fs.ReadOnly, op.Path)
	case OpAddReadWrite:
		if slices.Contains(fs.ReadWrite, op.Path) {
			return fmt.Errorf("%s is already read_write", op.Path)
		}
		fs.ReadOnly = slices.DeleteFunc(fs.ReadOnly, func(s string) bool { return s == op.Path })
		fs.ReadWrite = append(fs.ReadWrite, op.Path)
	case OpAddEntry:
		if _, ok := c.NetworkPolicies[op.Entry]; ok {
			return fmt.Errorf("network_policies already has %q", op.Entry)
		}
		np := &policy.NetworkPolicy{Name: op.Entry, Binaries: slices.Clone(op.Value.Binaries)}
		for _, e := range op.Value.Endpoints {
			if e == nil {
				return errors.New("a null endpoint")
			}
			np.Endpoints = append(np.Endpoints, cloneEndpoint(e))
		}
		c.NetworkPolicies[op.Entry] = np
	case OpAddRule:
		np := c.NetworkPolicies[op.Entry]
		if np == nil {
			return fmt.Errorf("network_policies has no %q", op.Entry)
		}
		i := *op.Endpoint
		if i < 0 || i >= len(np.Endpoints) {
			return fmt.Errorf("network_policies.%s has no endpoints[%d]", op.Entry, i)
		}
		e := np.Endpoints[i]
		if len(e.Rules) == 0 {
			return fmt.Errorf("network_policies.%s.endpoints[%d] has no rules to extend", op.Entry, i)
		}
		e.Rules = append(e.Rules, *op.Rule)
	default:
		return fmt.Errorf("unknown op %q", op.Op)
	}
	return nil
}

// cloneEndpoint copies e through a one-endpoint policy (policy.Clone is
// the deep copy the policy package keeps up to date).
func cloneEndpoint(e *policy.Endpoint) *policy.Endpoint {
	p := &policy.Policy{NetworkPolicies: map[string]*policy.NetworkPolicy{"x": {Endpoints: []*policy.Endpoint{e}}}}
	return p.Clone().NetworkPolicies["x"].Endpoints[0]
}
