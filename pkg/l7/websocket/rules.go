package websocket

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

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
	json        bool           // some matcher reads JSON
	paths       map[string]int // every field path a matcher names -> its index
	sorted      *jsonPaths     // paths, for the scanner
	fields      sync.Pool      // *jsonFields sized len(paths) when over smallFields
	binary      bool
	max         int64
}

type matcher struct {
	exact, prefix *string
	fields        []fieldMatch
}

type fieldMatch struct {
	path string // dotted, as written
	idx  int    // its index in Rules.paths
	glob glob
}

// glob is a json matcher's value pattern ("*" matches any run of
// characters), with the shapes rules mostly take decided without
// policy.StarMatch's general matcher.
type glob struct {
	kind    byte   // '=' exact, '^' prefix*, '$' *suffix, '*' anything else
	s, full string // s: the literal part; full: the pattern
}

func compileGlob(p string) glob {
	switch i := strings.IndexByte(p, '*'); {
	case i < 0:
		return glob{kind: '=', s: p, full: p}
	case i == len(p)-1:
		return glob{kind: '^', s: p[:i], full: p}
	case i == 0 && strings.Count(p, "*") == 1:
		return glob{kind: '$', s: p[1:], full: p}
	}
	return glob{kind: '*', full: p}
}

func (g *glob) match(v []byte) bool {
	switch g.kind {
	case '=':
		return string(v) == g.s
	case '^':
		return len(v) >= len(g.s) && string(v[:len(g.s)]) == g.s
	case '$':
		return len(v) >= len(g.s) && string(v[len(v)-len(g.s):]) == g.s
	}
	return policy.StarMatch(g.full, string(v))
}

// Compile builds the Rules of an endpoint's websocket field.
func Compile(ws *policy.WebSocket) (*Rules, error) {
	if ws == nil || len(ws.Text) == 0 {
		return nil, errors.New("websocket: endpoint has no text rules")
	}
	r := &Rules{binary: ws.Binary, max: ws.MaxMessageBytes, paths: map[string]int{}}
	if r.max <= 0 {
		r.max = policy.DefaultWebSocketMaxMessage
	}
	r.allow = r.compile(ws.Text)
	r.deny = r.compile(ws.DenyText)
	r.sorted = newJSONPaths(r.paths)
	n := len(r.paths)
	r.fields.New = func() any { return &jsonFields{values: make([]jsonValue, n)} }
	return r, nil
}

func (r *Rules) compile(ms []policy.MessageMatch) []matcher {
	out := make([]matcher, 0, len(ms))
	for _, m := range ms {
		c := matcher{exact: m.Exact, prefix: m.Prefix}
		for p, g := range m.JSON {
			j, ok := r.paths[p]
			if !ok {
				j = len(r.paths)
				r.paths[p] = j
			}
			c.fields = append(c.fields, fieldMatch{path: p, idx: j, glob: compileGlob(g)})
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
	switch v := r.text(m.Data, nil); v {
	case textAllowed:
		return l7.Allowed()
	case textNoRule:
		return l7.Denied(ReasonNoRule, "")
	case textAmbiguous:
		return l7.Denied(ReasonAmbiguousJSON, "")
	default:
		return l7.Denied(ReasonDenyRule, fmt.Sprintf("websocket.deny_text[%d]", v))
	}
}

// allows is Message(m).Allow, answered without building the Decision
// (128 bytes, copied through every return): what the relay asks of
// each message, Message being called only for a refusal. c is the
// relay's shape cache (scanJSONShaped), nil for none.
func (r *Rules) allows(text bool, data []byte, c *shapeCache) bool {
	if !text {
		return r.binary
	}
	return r.text(data, c) == textAllowed
}

// What text decides of a text message, besides the index of the
// deny_text matcher that matches it (>= 0).
const (
	textAllowed   = -1 // an allow matcher matches it, no deny_text one
	textNoRule    = -2 // no matcher matches it
	textAmbiguous = -3 // JSON servers may read differently (ReasonAmbiguousJSON)
)

// text decides a text message: one of the text* constants, or the
// index of the deny_text matcher that matches it. c: as allows.
func (r *Rules) text(data []byte, c *shapeCache) int {
	if !r.json {
		return r.match(data, nil)
	}
	if len(r.paths) > smallFields {
		return r.textPooled(data, c)
	}
	var values [smallFields]jsonValue
	return r.matchJSON(data, values[:len(r.paths)], c)
}

// textPooled is text for rules naming many field paths: the values go
// into a pooled jsonFields.
func (r *Rules) textPooled(data []byte, c *shapeCache) int {
	d := r.fields.Get().(*jsonFields)
	defer r.putFields(d)
	return r.matchJSON(data, d.values, c)
}

// smallFields: rules naming at most this many field paths read a
// message's fields into arrays on the stack, not a pooled jsonFields.
const smallFields = 8

// matchJSON reads data's fields into values (sized len(r.paths)) and
// holds it to the matchers. A message that is JSON servers may read
// differently (duplicate keys, too deep) is textAmbiguous; one that is
// no JSON object is matched without fields (json matchers do not match
// it).
func (r *Rules) matchJSON(data []byte, values []jsonValue, c *shapeCache) int {
	if len(data) > math.MaxInt32 {
		return textAmbiguous // jsonValue's offsets are int32 (messages are bounded far below)
	}
	switch scanJSONShaped(data, r.sorted, values, c) {
	case errDup:
		return textAmbiguous
	case errNotJSON:
		values = nil
	}
	return r.match(data, values)
}

// match holds a text message (its JSON fields in doc, nil when it is
// no JSON object or no matcher reads JSON) to the matchers.
func (r *Rules) match(data []byte, doc []jsonValue) int {
	for i := range r.deny {
		if r.deny[i].match(data, doc) {
			return i
		}
	}
	for i := range r.allow {
		if r.allow[i].match(data, doc) {
			return textAllowed
		}
	}
	return textNoRule
}

func (m *matcher) match(data []byte, doc []jsonValue) bool {
	switch {
	case m.exact != nil:
		return string(data) == *m.exact
	case m.prefix != nil:
		p := *m.prefix
		return len(data) >= len(p) && string(data[:len(p)]) == p
	}
	if doc == nil {
		return false // not a JSON object
	}
	for i := range m.fields {
		f := &m.fields[i]
		if v := &doc[f.idx]; !v.set || !f.glob.match(v.text(data)) {
			return false
		}
	}
	return true
}

// jsonFields holds the scalars of a JSON object that the rules' field
// paths reach, by the path's index (Rules.paths); a path reaching an
// object or array (or nothing) is not set.
type jsonFields struct {
	values []jsonValue
}

// putFields clears d (it holds offsets into a message) and pools it.
func (r *Rules) putFields(d *jsonFields) {
	clear(d.values)
	r.fields.Put(d)
}
