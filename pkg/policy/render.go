package policy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// placeholderRE matches a template token: __NAME__ where NAME is upper-case
// letters and digits in words joined by single underscores.
var placeholderRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`__([A-Z0-9]+(?:_[A-Z0-9]+)*)__`) })

// keyRE is what a render key may look like (MAC_HUB_HOST, or the token
// form __MAC_HUB_HOST__).
var keyRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z0-9]+(?:_[A-Z0-9]+)*$`) })

// valueRE is what a substituted value may look like: host names, IP
// addresses, ports, user names and paths. Nothing in it can end a YAML
// scalar, start a comment, a flow collection, an anchor, a tag or a quoted
// string, whether the token sits in a plain or a quoted scalar.
var valueRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_/][A-Za-z0-9._/-]*$`) })

// MaxValueLen bounds one substituted value.
const MaxValueLen = 253

// Placeholders returns the distinct placeholder names (without the
// underscores) in tmpl, sorted.
func Placeholders(tmpl []byte) []string {
	var out []string
	for _, m := range placeholderRE().FindAllSubmatch(tmpl, -1) {
		out = append(out, string(m[1]))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Render fills a policy template: every __KEY__ token is replaced by
// values[KEY] (keys may also be given as __KEY__). It refuses a key that is
// not in the template, a token left without a value, a value that could
// change the YAML structure, and a result that is not a valid policy (the
// error is then an Errors). The result keeps the template's comments and
// layout.
func Render(tmpl []byte, values map[string]string) ([]byte, error) {
	vals := make(map[string]string, len(values))
	for k, v := range values {
		name := k
		if strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__") && len(name) > 4 {
			name = name[2 : len(name)-2]
		}
		if !keyRE().MatchString(name) {
			return nil, fmt.Errorf("render: key %q must be upper-case letters, digits and single underscores (e.g. MAC_HUB_HOST)", k)
		}
		if _, dup := vals[name]; dup {
			return nil, fmt.Errorf("render: key %s given twice", name)
		}
		if err := checkValue(v); err != nil {
			return nil, fmt.Errorf("render: value for %s: %w", name, err)
		}
		vals[name] = v
	}
	present := Placeholders(tmpl)
	var unknown, missing []string
	for name := range vals {
		if !slices.Contains(present, name) {
			unknown = append(unknown, name)
		}
	}
	for _, name := range present {
		if _, ok := vals[name]; !ok {
			missing = append(missing, "__"+name+"__")
		}
	}
	slices.Sort(unknown)
	if len(unknown) > 0 {
		return nil, fmt.Errorf("render: %s not in the template (its placeholders: %s)", strings.Join(unknown, ", "), listOrNone(present))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("render: no value for %s (pass --set KEY=VALUE for each)", strings.Join(missing, ", "))
	}
	out := placeholderRE().ReplaceAllFunc(tmpl, func(tok []byte) []byte {
		return []byte(vals[string(tok[2:len(tok)-2])])
	})
	if left := Placeholders(out); len(left) > 0 {
		return nil, fmt.Errorf("render: placeholders remain after substitution: %s", strings.Join(left, ", "))
	}
	if err := sameShape(tmpl, out, vals); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	if _, err := Parse(out); err != nil {
		return nil, fmt.Errorf("render: the rendered policy is invalid: %w", err)
	}
	return out, nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func checkValue(v string) error {
	switch {
	case v == "":
		return errors.New("must not be empty")
	case len(v) > MaxValueLen:
		return fmt.Errorf("is %d characters; at most %d allowed", len(v), MaxValueLen)
	case strings.Contains(v, "__"):
		return errors.New(`must not contain "__" (it would read as a placeholder)`)
	case !valueRE().MatchString(v):
		return errors.New("may contain only letters, digits and . _ / - (and must not start with . or -); quotes, spaces, colons, '#', newlines and other YAML syntax are refused")
	}
	return nil
}

// sameShape proves the substitution changed scalar values only: the
// rendered document has the same node tree as the template, and each
// scalar is the template scalar with its tokens substituted.
func sameShape(tmpl, out []byte, vals map[string]string) error {
	var a, b yaml.Node
	if err := yaml.Unmarshal(tmpl, &a); err != nil {
		return fmt.Errorf("template is not valid YAML: %v", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := yaml.Unmarshal(out, &b); err != nil {
		return fmt.Errorf("rendered text is not valid YAML: %v", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var walk func(x, y *yaml.Node) error
	walk = func(x, y *yaml.Node) error {
		if x.Kind != y.Kind || len(x.Content) != len(y.Content) {
			return fmt.Errorf("substitution changed the document structure near line %d", y.Line)
		}
		if x.Kind == yaml.ScalarNode || x.Kind == yaml.AliasNode {
			want := placeholderRE().ReplaceAllStringFunc(x.Value, func(tok string) string { return vals[tok[2:len(tok)-2]] })
			if want != y.Value {
				return fmt.Errorf("substitution changed more than a value near line %d", y.Line)
			}
		}
		for i := range x.Content {
			if err := walk(x.Content[i], y.Content[i]); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(&a, &b)
}

// ParseSetFlags turns KEY=VALUE strings into a render map, rejecting
// malformed and repeated keys.
func ParseSetFlags(sets []string) (map[string]string, error) {
	out := make(map[string]string, len(sets))
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: want KEY=VALUE", s)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--set %s given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// TemplateError is a policy file that does not parse and still holds
// __PLACEHOLDER__ tokens outside its comments: the operator pointed a tool
// at the template (mac-hermes-policy.yaml) instead of a rendered copy.
// Its message says so and shows the render command; Unwrap gives the
// parse error (AsErrors still finds the field problems).
type TemplateError struct {
	Path         string
	Placeholders []string
	Err          error
}

func (e *TemplateError) Error() string {
	var sets strings.Builder
	for _, p := range e.Placeholders {
		sets.WriteString(" --set " + p + "=...")
	}
	toks := make([]string, len(e.Placeholders))
	for i, p := range e.Placeholders {
		toks[i] = "__" + p + "__"
	}
	return fmt.Sprintf("policy %s is an unrendered template (it still holds %s); render it first: policy-sync render --template %s%s -o ~/.mac/openshell-policy.yaml",
		e.Path, strings.Join(toks, ", "), e.Path, sets.String())
}

func (e *TemplateError) Unwrap() error { return e.Err }

// templateError returns a TemplateError for a parse error of a file that
// holds placeholders outside comments, else nil.
func templateError(path string, data []byte, err error) error {
	var body strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "#") {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		body.WriteString(line + "\n")
	}
	ph := Placeholders([]byte(body.String()))
	if len(ph) == 0 {
		return nil
	}
	return &TemplateError{Path: path, Placeholders: ph, Err: err}
}
