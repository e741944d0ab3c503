package websocket

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/l7/rest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Reasons a protocol: websocket endpoint refuses a request or message.
const (
	// ReasonUpgradeRequired: a request to the endpoint that is no
	// WebSocket upgrade.
	ReasonUpgradeRequired = "websocket_upgrade_required"
	// ReasonDenyRule: a deny_text matcher matched the text message.
	ReasonDenyRule = "websocket_deny_rule"
	// ReasonNoRule: no text matcher matched the text message.
	ReasonNoRule = "websocket_no_rule"
	// ReasonBinaryDenied: a binary message to an endpoint without
	// binary: true.
	ReasonBinaryDenied = "websocket_binary_denied"
	// ReasonAmbiguousJSON: a text message holding JSON that servers may
	// read differently (a key twice in one object, nesting deeper than
	// maxJSONDepth), at an endpoint with json matchers.
	ReasonAmbiguousJSON = "websocket_ambiguous_json"
)

// maxJSONDepth bounds the nesting of a JSON message the matchers read.
const maxJSONDepth = 64

// Inspector is the l7.Inspector of a protocol: websocket endpoint: only
// WebSocket upgrades pass (held to the endpoint's REST rules when it has
// any: access, rules, deny_rules on the upgrade's GET), and after one,
// the client's messages are held to its websocket rules (Rules).
type Inspector struct {
	rest  *rest.Inspector // nil without REST rules
	rules *Rules
}

// New is the inspector of ep, a protocol: websocket endpoint.
func New(ep *policy.Endpoint) (*Inspector, error) {
	rules, err := Compile(ep.WebSocket)
	if err != nil {
		return nil, err
	}
	in := &Inspector{rules: rules}
	if ep.L7() {
		in.rest = rest.New(ep)
	}
	return in, nil
}

// Request implements l7.Inspector.
func (in *Inspector) Request(r *l7.Request) l7.Decision {
	if r.Upgrade != "websocket" {
		return l7.Denied(ReasonUpgradeRequired, "")
	}
	if in.rest != nil {
		return in.rest.Request(r)
	}
	return l7.Allowed()
}

// Upgrade implements l7.Upgrader: every upgraded connection's messages
// are held to the endpoint's rules.
func (in *Inspector) Upgrade(*l7.Request) l7.Messages { return in.rules }

// Rules decides client-to-server messages by an endpoint's websocket
// rules (l7.Messages). A binary message passes only with binary: true;
// a text message is refused when a deny_text matcher matches it, else
// passes when a text matcher does. Matchers:
//
//   - exact: the whole message, byte for byte;
//   - prefix: the message's first bytes;
//   - json: the message is one JSON object (surrounding whitespace
//     allowed) in which each named field path (keys separated by dots,
//     "params.name") reaches a value that matches its glob ("*" matches
//     any run of characters): a string by its decoded text, a number,
//     true, false or null by its JSON spelling; an object or array
//     never matches. All named fields must match.
//
// A text message that is JSON with a key twice in one object, or
// nested deeper than 64, is refused (ReasonAmbiguousJSON) when any
// matcher is a json one: servers disagree on which value counts.
type Rules struct {
	allow, deny []matcher
	json        bool // some matcher reads JSON
	binary      bool
	max         int64
}

type matcher struct {
	exact, prefix *string
	fields        []fieldMatch
}

type fieldMatch struct {
	path string // dotted, as written
	glob string
}

// Compile builds the Rules of an endpoint's websocket field.
func Compile(ws *policy.WebSocket) (*Rules, error) {
	if ws == nil || len(ws.Text) == 0 {
		return nil, errors.New("websocket: endpoint has no text rules")
	}
	r := &Rules{binary: ws.Binary, max: ws.MaxMessageBytes}
	if r.max <= 0 {
		r.max = policy.DefaultWebSocketMaxMessage
	}
	r.allow = r.compile(ws.Text)
	r.deny = r.compile(ws.DenyText)
	return r, nil
}

func (r *Rules) compile(ms []policy.MessageMatch) []matcher {
	out := make([]matcher, 0, len(ms))
	for _, m := range ms {
		c := matcher{exact: m.Exact, prefix: m.Prefix}
		for p, g := range m.JSON {
			c.fields = append(c.fields, fieldMatch{path: p, glob: g})
			r.json = true
		}
		out = append(out, c)
	}
	return out
}

// MaxMessage implements l7.Messages.
func (r *Rules) MaxMessage() int64 { return r.max }

// Message implements l7.Messages.
func (r *Rules) Message(m *l7.Message) l7.Decision {
	if !m.Text {
		if r.binary {
			return l7.Allowed()
		}
		return l7.Denied(ReasonBinaryDenied, "websocket.binary")
	}
	var doc *jsonFields
	if r.json {
		var ok bool
		if doc, ok = readJSON(m.Data, r); !ok {
			return l7.Denied(ReasonAmbiguousJSON, "")
		}
	}
	for i, d := range r.deny {
		if d.match(m.Data, doc) {
			return l7.Denied(ReasonDenyRule, fmt.Sprintf("websocket.deny_text[%d]", i))
		}
	}
	for _, a := range r.allow {
		if a.match(m.Data, doc) {
			return l7.Allowed()
		}
	}
	return l7.Denied(ReasonNoRule, "")
}

func (m *matcher) match(data []byte, doc *jsonFields) bool {
	switch {
	case m.exact != nil:
		return string(data) == *m.exact
	case m.prefix != nil:
		return bytes.HasPrefix(data, []byte(*m.prefix))
	}
	if doc == nil {
		return false // not a JSON object
	}
	for _, f := range m.fields {
		v, ok := doc.values[f.path]
		if !ok || !policy.StarMatch(f.glob, v) {
			return false
		}
	}
	return true
}

// jsonFields holds the scalar values of a JSON object that the rules'
// field paths reach, by path; a path reaching an object or array (or
// nothing) is absent.
type jsonFields struct {
	values map[string]string
}

// readJSON reads data as one JSON object and keeps the values at the
// paths r names. ok is false for JSON servers may read differently
// (duplicate keys, too deep); a message that is no JSON object is ok
// with a nil doc (json matchers do not match it).
func readJSON(data []byte, r *Rules) (doc *jsonFields, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	t, err := dec.Token()
	if d, isDelim := t.(json.Delim); err != nil || !isDelim || d != '{' {
		return nil, true
	}
	w := &jsonWalker{dec: dec, want: r.paths(), doc: &jsonFields{values: map[string]string{}}}
	switch err := w.object("", 1); {
	case errors.Is(err, errAmbiguous):
		return nil, false
	case err != nil:
		return nil, true
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, true // trailing bytes: not one JSON value
	}
	return w.doc, true
}

// paths is every field path (and each of its prefixes) r's matchers
// name.
func (r *Rules) paths() map[string]bool {
	out := map[string]bool{}
	for _, l := range [][]matcher{r.allow, r.deny} {
		for _, m := range l {
			for _, f := range m.fields {
				out[f.path] = true
			}
		}
	}
	return out
}

var errAmbiguous = errors.New("ambiguous JSON")

type jsonWalker struct {
	dec  *json.Decoder
	want map[string]bool
	doc  *jsonFields
}

// object reads an object's members after its '{' (prefix is its path
// with a trailing dot, "" at the top).
func (w *jsonWalker) object(prefix string, depth int) error {
	if depth > maxJSONDepth {
		return errAmbiguous
	}
	seen := map[string]bool{}
	for w.dec.More() {
		t, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		if seen[key] {
			return errAmbiguous
		}
		seen[key] = true
		if err := w.value(prefix+key, depth); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // '}'
	return err
}

func (w *jsonWalker) value(path string, depth int) error {
	t, err := w.dec.Token()
	if err != nil {
		return err
	}
	switch v := t.(type) {
	case json.Delim:
		if v == '{' {
			return w.object(path+".", depth+1)
		}
		if depth+1 > maxJSONDepth {
			return errAmbiguous
		}
		for w.dec.More() {
			if err := w.value("", depth+1); err != nil { // array members are reached by no path
				return err
			}
		}
		_, err := w.dec.Token() // ']'
		return err
	case string:
		return w.set(path, v)
	case json.Number:
		return w.set(path, v.String())
	case bool:
		return w.set(path, fmt.Sprint(v))
	case nil:
		return w.set(path, "null")
	}
	return nil
}

// set keeps a scalar reached by a wanted path. A path reached twice (a
// key holding a dot, {"a.b": 1, "a": {"b": 2}}) is ambiguous.
func (w *jsonWalker) set(path, v string) error {
	if path == "" || !w.want[path] {
		return nil
	}
	if _, dup := w.doc.values[path]; dup {
		return errAmbiguous
	}
	w.doc.values[path] = v
	return nil
}
