package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// ProtocolWebSocket is an endpoint whose WebSocket upgrades are checked
// and whose client-to-server messages are held to its websocket rules.
const ProtocolWebSocket = "websocket"

// WebSocket message limits.
const (
	// DefaultWebSocketMaxMessage bounds a reassembled message when
	// max_message_bytes is omitted.
	DefaultWebSocketMaxMessage = 1 << 20
	// MaxWebSocketMaxMessage is the largest max_message_bytes.
	MaxWebSocketMaxMessage = 16 << 20
	// MaxJSONFields bounds the fields one json matcher names.
	MaxJSONFields = 16
	// MaxMatchLen bounds an exact, prefix, field path or field glob.
	MaxMatchLen = 4096
)

// WebSocket holds a protocol: websocket endpoint's message rules: which
// client-to-server messages the proxy relays after the upgrade.
type WebSocket struct {
	// Text lists the text messages allowed; a text message no entry
	// matches is refused (close 1008).
	Text []MessageMatch `json:"text" yaml:"text"`
	// DenyText refuses text messages Text would allow.
	DenyText []MessageMatch `json:"deny_text,omitempty" yaml:"deny_text,omitempty"`
	// Binary allows binary messages (unread); false refuses every one.
	Binary bool `json:"binary" yaml:"binary"`
	// MaxMessageBytes bounds a reassembled message (close 1009 above it).
	MaxMessageBytes int64 `json:"max_message_bytes" yaml:"max_message_bytes"`
}

// MessageMatch selects text messages by exactly one of: the whole
// message (Exact), its start (Prefix), or fields of the JSON object it
// holds (JSON: a dotted field path to a glob its value must match; "*"
// matches any run of characters). See MatchText.
type MessageMatch struct {
	Exact  *string           `json:"exact,omitempty" yaml:"exact,omitempty"`
	Prefix *string           `json:"prefix,omitempty" yaml:"prefix,omitempty"`
	JSON   map[string]string `json:"json,omitempty" yaml:"json,omitempty"`
}

var webSocketKeys = []string{"text", "deny_text", "binary", "max_message_bytes"}

// webSocket decodes an endpoint's websocket field.
func (d *decoder) webSocket(n *yaml.Node, path string) *WebSocket {
	fields, ok := d.mapping(n, path, webSocketKeys)
	if !ok {
		return nil
	}
	before := len(d.errs)
	ws := &WebSocket{MaxMessageBytes: DefaultWebSocketMaxMessage}
	if f, ok := fields["text"]; ok {
		ws.Text = d.messageMatches(f.val, path+".text", "must not be empty (text: [] would refuse every text message; omit the endpoint's protocol instead)")
	} else {
		d.errf(n, path+".text", "is required (the text messages the sandbox may send)")
	}
	if f, ok := fields["deny_text"]; ok {
		ws.DenyText = d.messageMatches(f.val, path+".deny_text", "must not be empty (remove deny_text if nothing is denied)")
	}
	if f, ok := fields["binary"]; ok {
		ws.Binary, _ = d.boolean(f.val, path+".binary")
	}
	if f, ok := fields["max_message_bytes"]; ok {
		if v, ok := d.integer(f.val, path+".max_message_bytes"); ok {
			if v < 1 || v > MaxWebSocketMaxMessage {
				d.errf(f.val, path+".max_message_bytes", "must be 1-%d, not %d", MaxWebSocketMaxMessage, v)
			}
			ws.MaxMessageBytes = v
		}
	}
	if len(d.errs) > before {
		return nil
	}
	return ws
}

func (d *decoder) messageMatches(n *yaml.Node, path, emptyMsg string) []MessageMatch {
	items, ok := d.seq(n, path, emptyMsg)
	if !ok {
		return nil
	}
	var out []MessageMatch
	for i, it := range items {
		if m, ok := d.messageMatch(it, indexPath(path, i)); ok {
			out = append(out, m)
		}
	}
	return out
}

func (d *decoder) messageMatch(n *yaml.Node, path string) (MessageMatch, bool) {
	var m MessageMatch
	fields, ok := d.mapping(n, path, []string{"exact", "prefix", "json"})
	if !ok {
		return m, false
	}
	if len(fields) != 1 {
		d.errf(n, path, "must set exactly one of exact, prefix or json")
		return m, false
	}
	str := func(key string) *string {
		s, ok := d.str(fields[key].val, path+"."+key)
		if !ok {
			return nil
		}
		if err := checkMatchString(s); err != nil {
			d.errf(fields[key].val, path+"."+key, "%v", err)
			return nil
		}
		return &s
	}
	switch {
	case fields["exact"].val != nil:
		m.Exact = str("exact")
		return m, m.Exact != nil
	case fields["prefix"].val != nil:
		if m.Prefix = str("prefix"); m.Prefix != nil && *m.Prefix == "" {
			d.errf(fields["prefix"].val, path+".prefix", `must not be empty (prefix "" matches every message)`)
			return m, false
		}
		return m, m.Prefix != nil
	}
	m.JSON = d.jsonMatch(fields["json"].val, path+".json")
	return m, m.JSON != nil
}

// jsonMatch decodes a json matcher: field paths to string globs.
func (d *decoder) jsonMatch(n *yaml.Node, path string) map[string]string {
	fields, ok := d.mapping(n, path, nil)
	if !ok {
		return nil
	}
	if len(fields) == 0 || len(fields) > MaxJSONFields {
		d.errf(n, path, "must name 1-%d fields, not %d", MaxJSONFields, len(fields))
		return nil
	}
	out := make(map[string]string, len(fields))
	good := true
	for k, f := range fields {
		kp := keyPath(path, k)
		if err := checkFieldPath(k); err != nil {
			d.errf(f.key, kp, "%v", err)
			good = false
			continue
		}
		s, ok := d.str(f.val, kp)
		if !ok {
			good = false
			continue
		}
		if err := checkMatchString(s); err != nil {
			d.errf(f.val, kp, "%v", err)
			good = false
			continue
		}
		out[k] = s
	}
	if !good {
		return nil
	}
	return out
}

func checkMatchString(s string) error {
	switch {
	case len(s) > MaxMatchLen:
		return fmt.Errorf("is longer than %d bytes", MaxMatchLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("is not valid UTF-8")
	}
	return nil
}

// checkFieldPath checks a json matcher's key: dot-separated object keys,
// none empty.
func checkFieldPath(p string) error {
	if len(p) > MaxMatchLen || !utf8.ValidString(p) {
		return fmt.Errorf("field path must be valid UTF-8 of at most %d bytes", MaxMatchLen)
	}
	if slices.Contains(strings.Split(p, "."), "") {
		return fmt.Errorf("field path %q has an empty segment (write keys separated by single dots)", p)
	}
	return nil
}

// canonicalWebSocket normalises an endpoint's websocket rules in place.
func canonicalWebSocket(ws *WebSocket) {
	if ws == nil {
		return
	}
	if ws.MaxMessageBytes == 0 {
		ws.MaxMessageBytes = DefaultWebSocketMaxMessage
	}
	for _, l := range []*[]MessageMatch{&ws.Text, &ws.DenyText} {
		slices.SortFunc(*l, func(a, b MessageMatch) int { return strings.Compare(string(mustJSON(a)), string(mustJSON(b))) })
		*l = slices.CompactFunc(*l, func(a, b MessageMatch) bool { return string(mustJSON(a)) == string(mustJSON(b)) })
	}
	if len(ws.DenyText) == 0 {
		ws.DenyText = nil
	}
}

func (ws *WebSocket) clone() *WebSocket {
	if ws == nil {
		return nil
	}
	c := *ws
	c.Text, c.DenyText = cloneMatches(ws.Text), cloneMatches(ws.DenyText)
	return &c
}

func cloneMatches(ms []MessageMatch) []MessageMatch {
	if ms == nil {
		return nil
	}
	out := make([]MessageMatch, len(ms))
	for i, m := range ms {
		out[i] = m // the strings are immutable; the map is copied
		if m.JSON != nil {
			out[i].JSON = maps.Clone(m.JSON)
		}
	}
	return out
}

// StarMatch reports whether s matches pattern, in which "*" matches any
// run of characters (a json matcher's field glob).
func StarMatch(pattern, s string) bool { return globLabel(pattern, s) }
