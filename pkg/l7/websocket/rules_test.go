package websocket

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

func str(s string) *string { return &s }

func testRules(t testing.TB) *Rules {
	r, err := Compile(&policy.WebSocket{
		Text: []policy.MessageMatch{
			{Exact: str("ping")},
			{Prefix: str("SUB ")},
			{JSON: map[string]string{"type": "subscribe", "params.channel": "ticker.*"}},
			{JSON: map[string]string{"op": "42", "ok": "true"}},
		},
		DenyText:        []policy.MessageMatch{{Prefix: str("SUB admin")}, {JSON: map[string]string{"params.channel": "*secret*"}}},
		MaxMessageBytes: 64,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every matcher kind, deny before allow, and the JSON readings servers
// could disagree on refused (mutation-checked: without the duplicate
// check the "duplicate key" case is allowed and this fails).
func TestRulesMessage(t *testing.T) {
	r := testRules(t)
	for _, c := range []struct {
		msg    string
		binary bool
		allow  bool
		reason string
		rule   string
	}{
		{msg: "ping", allow: true},
		{msg: "ping ", reason: ReasonNoRule},
		{msg: "SUB trades", allow: true},
		{msg: "SUB admin/x", reason: ReasonDenyRule, rule: "websocket.deny_text[0]"},
		{msg: `{"type":"subscribe","params":{"channel":"ticker.btc"},"id":1}`, allow: true},
		{msg: ` {"params":{"channel":"ticker.eth"},"type":"subscribe"} `, allow: true},
		{msg: `{"type":"subscribe","params":{"channel":"ticker.secret"}}`, reason: ReasonDenyRule, rule: "websocket.deny_text[1]"},
		{msg: `{"type":"subscribe","params":{"channel":"trades.btc"}}`, reason: ReasonNoRule},
		{msg: `{"type":"subscribe","params":{"channel":["ticker.btc"]}}`, reason: ReasonNoRule},
		{msg: `{"type":"subscribe"}`, reason: ReasonNoRule},
		{msg: `{"type":"subscribe","params":{"channel":"ticker.btc"}} x`, reason: ReasonNoRule},
		{msg: `[{"type":"subscribe","params":{"channel":"ticker.btc"}}]`, reason: ReasonNoRule},
		{msg: `{"op":42,"ok":true}`, allow: true},
		{msg: `{"op":"42","ok":"true"}`, allow: true},
		{msg: `{"op":42.0,"ok":true}`, reason: ReasonNoRule},
		{msg: `{"type":"subscribe","type":"subscribe","params":{"channel":"ticker.btc"}}`, reason: ReasonAmbiguousJSON},
		{msg: `{"type":"subscribe","params":{"channel":"ticker.btc"},"params.channel":"ticker.secret"}`, reason: ReasonAmbiguousJSON},
		{msg: `{"type":"subscribe","params":{"channel":"ticker.btc","x":{"a":1,"a":2}}}`, reason: ReasonAmbiguousJSON},
		{msg: `{"a":` + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat("}", 71), reason: ReasonAmbiguousJSON},
		{msg: "ping", binary: true, reason: ReasonBinaryDenied, rule: "websocket.binary"},
	} {
		d := r.Message(&l7.Message{Text: !c.binary, Data: []byte(c.msg)})
		if d.Allow != c.allow || d.Reason != c.reason || d.Rule != c.rule {
			t.Errorf("%q (binary %v): %+v, want allow %v reason %q rule %q", c.msg, c.binary, d, c.allow, c.reason, c.rule)
		}
	}
}

// RelayMessages writes exactly the allowed messages' frames, as sent,
// reassembles fragments, passes control frames, and stops at the first
// refusal with its close code.
func TestRelayMessages(t *testing.T) {
	r := testRules(t)
	ok1 := frame(true, 0, OpText, true, []byte("ping"))
	frag := cat(frame(false, 0, OpText, true, []byte("SUB tr")), frame(true, 0, OpPing, true, []byte("p")), frame(true, 0, OpContinuation, true, []byte("ades")))
	for _, c := range []struct {
		name string
		in   []byte
		out  []byte
		code int
	}{
		{"allowed", cat(ok1, frag, ok1), cat(ok1, frame(false, 0, OpText, true, []byte("SUB tr")), frame(true, 0, OpContinuation, true, []byte("ades")), frame(true, 0, OpPing, true, []byte("p")), ok1), 0},
		{"refused after allowed", cat(ok1, frame(true, 0, OpText, true, []byte("pong")), ok1), ok1, ClosePolicyViolation},
		{"fragments over the bound", cat(frame(false, 0, OpText, true, bytes.Repeat([]byte("S"), 40)), frame(true, 0, OpContinuation, true, bytes.Repeat([]byte("S"), 30))), nil, CloseTooBig},
		{"one frame over the bound", frame(true, 0, OpText, true, bytes.Repeat([]byte("S"), 65)), nil, CloseTooBig},
		{"not utf-8", frame(true, 0, OpText, true, []byte{'S', 'U', 'B', ' ', 0xc3}), nil, CloseInvalidData},
		{"binary", frame(true, 0, OpBinary, true, []byte("ping")), nil, ClosePolicyViolation},
	} {
		var out bytes.Buffer
		n, err := RelayMessages(&out, bufio.NewReader(bytes.NewReader(c.in)), &Checker{Client: true}, r, nil, nil)
		code, err := closeCode(err)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if code != c.code || !bytes.Equal(out.Bytes(), c.out) || n != int64(out.Len()) {
			t.Errorf("%s: code %d wrote %q (%d), want %d and %q", c.name, code, out.Bytes(), n, c.code, c.out)
		}
	}
	// Under audit a policy refusal is reported and relayed.
	var out bytes.Buffer
	var audited []string
	in := cat(frame(true, 0, OpText, true, []byte("pong")), ok1)
	if _, err := RelayMessages(&out, bufio.NewReader(bytes.NewReader(in)), &Checker{Client: true}, r, func(d l7.Decision) { audited = append(audited, d.Reason) }, nil); err != nil || !bytes.Equal(out.Bytes(), in) || len(audited) != 1 {
		t.Errorf("audit: %v %q %v", err, out.Bytes(), audited)
	}
}

// closeCode is the close code of err, a RelayMessages refusal (0 for
// nil); any other error is returned as it is.
func closeCode(err error) (int, error) {
	var ref *Refusal
	if errors.As(err, &ref) {
		return ref.Code, nil
	}
	return 0, err
}

// With a Rewrite, an allowed text message is judged by the rules as sent
// (the rules see "SUB x", never the rewrite), then rewritten: a changed
// payload goes out as one masked frame (fragments merged, control
// frames after it), an unchanged one as sent; a refusal or a rewrite
// over the bound ends the relay with nothing of the message written;
// binary messages and messages the rules refuse never reach the
// Rewrite. Mutation-checked: without re-framing (the original frames
// written) the upstream gets the placeholder and "rewritten" fails;
// without the bound check after rewriting "grown over the bound" fails.
func TestRelayMessagesRewrite(t *testing.T) {
	r, err := Compile(&policy.WebSocket{Text: []policy.MessageMatch{{Prefix: str("SUB ")}}, Binary: true, MaxMessageBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	rw := func(text []byte) ([]byte, *Refusal) {
		seen = append(seen, string(text))
		switch {
		case bytes.Contains(text, []byte("BAD")):
			return nil, &Refusal{Code: ClosePolicyViolation, Decision: l7.Denied("credential_endpoint_mismatch", "")}
		case bytes.Contains(text, []byte("GROW")):
			return bytes.Repeat([]byte("S"), 65), nil
		}
		return bytes.ReplaceAll(text, []byte("PH"), []byte("value")), nil
	}
	ping := frame(true, 0, OpPing, true, []byte("p"))
	for _, c := range []struct {
		name string
		in   []byte
		want []string // payloads written, unmasked, one per frame
		code int
		seen []string
	}{
		{"rewritten", cat(frame(false, 0, OpText, true, []byte("SUB P")), ping, frame(true, 0, OpContinuation, true, []byte("H!"))), []string{"SUB value!", "p"}, 0, []string{"SUB PH!"}},
		{"unchanged", frame(true, 0, OpText, true, []byte("SUB x")), []string{"SUB x"}, 0, []string{"SUB x"}},
		{"binary", frame(true, 0, OpBinary, true, []byte("SUB PH")), []string{"SUB PH"}, 0, nil},
		{"refused by rules first", frame(true, 0, OpText, true, []byte("x PH")), nil, ClosePolicyViolation, nil},
		{"refused by rewrite", cat(frame(true, 0, OpText, true, []byte("SUB PH")), frame(true, 0, OpText, true, []byte("SUB BAD"))), []string{"SUB value"}, ClosePolicyViolation, []string{"SUB PH", "SUB BAD"}},
		{"grown over the bound", frame(true, 0, OpText, true, []byte("SUB GROW")), nil, CloseTooBig, []string{"SUB GROW"}},
	} {
		seen = nil
		var out bytes.Buffer
		_, err := RelayMessages(&out, bufio.NewReader(bytes.NewReader(c.in)), &Checker{Client: true}, r, nil, rw)
		code, err := closeCode(err)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		var got []string
		br := bufio.NewReader(&out)
		for {
			h, _, err := ReadHeader(br)
			if err != nil {
				break
			}
			pay := make([]byte, h.Length)
			io.ReadFull(br, pay)
			if !h.Masked {
				t.Errorf("%s: an unmasked frame went upstream", c.name)
			}
			Unmask(pay, h.Mask, 0)
			got = append(got, string(pay))
		}
		if code != c.code || strings.Join(got, "|") != strings.Join(c.want, "|") || strings.Join(seen, "|") != strings.Join(c.seen, "|") {
			t.Errorf("%s: code %d wrote %q, rewrite saw %q; want %d, %q, %q", c.name, code, got, seen, c.code, c.want, c.seen)
		}
	}
}

// FuzzRulesMessage: the matcher never panics; the relay's question
// (allows) gets Message's answer; a message it allows matches an allow
// matcher and no deny matcher under a straightforward reading
// (encoding/json into a map, for JSON without duplicate keys), and a
// text message holding a duplicate key is never allowed by a json
// matcher alone.
func FuzzRulesMessage(f *testing.F) {
	for _, s := range []string{"ping", "SUB x", "SUB admin", `{"type":"subscribe","params":{"channel":"ticker.a"}}`,
		`{"type":"subscribe","params":{"channel":"ticker.secret"}}`, `{"op":42,"ok":true}`, `{"a":1,"a":2}`, `{"params.channel":"x","params":{"channel":"y"}}`} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("ping"), true)
	r := testRules(f)
	f.Fuzz(func(t *testing.T, msg []byte, binary bool) {
		if !binary && !utf8.Valid(msg) {
			return // RelayMessages closes with 1007 before Message (l7.Messages's contract)
		}
		d := r.Message(&l7.Message{Text: !binary, Data: msg})
		var c shapeCache
		for i := range 2 { // without a shape, then with msg's own (when it took one)
			if a := r.allows(!binary, msg, &c); a != d.Allow {
				t.Fatalf("%q: allows %v (try %d), Message %+v", msg, a, i, d)
			}
		}
		if !d.Allow {
			return
		}
		if binary {
			t.Fatal("binary message allowed without binary: true")
		}
		s := string(msg)
		if strings.HasPrefix(s, "SUB admin") {
			t.Fatalf("deny prefix passed: %q", s)
		}
		if s == "ping" || strings.HasPrefix(s, "SUB ") {
			return
		}
		var v map[string]any
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("allowed %q, which is no JSON object and matches no exact or prefix", s)
		}
		if p, ok := v["params"].(map[string]any); ok {
			if ch, ok := p["channel"].(string); ok && strings.Contains(ch, "secret") {
				t.Fatalf("allowed %q whose channel the deny rule names", s)
			}
		}
		if v["type"] == "subscribe" {
			return
		}
		if op, ok := v["op"]; !ok || (op != json.Number("42") && op != "42") {
			t.Fatalf("allowed %q, which no matcher names", s)
		}
	})
}

// FuzzRelayMessages: whatever the client sends, every data message
// RelayMessages writes is whole, well-framed and allowed by the rules.
func FuzzRelayMessages(f *testing.F) {
	f.Add(cat(frame(true, 0, OpText, true, []byte("ping")), frame(true, 0, OpText, true, []byte("pong"))))
	f.Add(cat(frame(false, 0, OpText, true, []byte("SUB ")), frame(true, 0, OpPing, true, nil), frame(true, 0, OpContinuation, true, []byte("admin"))))
	f.Add(frame(true, 0, OpBinary, true, []byte("x")))
	r := testRules(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		n, _ := RelayMessages(&out, bufio.NewReader(bytes.NewReader(in)), &Checker{Client: true}, r, nil, nil)
		if n != int64(out.Len()) {
			t.Fatalf("reported %d bytes, wrote %d", n, out.Len())
		}
		br := bufio.NewReader(bytes.NewReader(out.Bytes()))
		c := &Checker{Client: true}
		var msg []byte
		text := false
		for {
			h, _, err := ReadHeader(br)
			if err != nil {
				if len(msg) > 0 || br.Buffered() > 0 {
					t.Fatalf("output ends inside a message or frame (%v)", err)
				}
				return
			}
			if err := c.Check(h); err != nil {
				t.Fatalf("wrote a frame the checker refuses: %v", err)
			}
			p := make([]byte, h.Length)
			if _, err := io.ReadFull(br, p); err != nil {
				t.Fatalf("output ends inside a frame")
			}
			Unmask(p, h.Mask, 0)
			if h.Opcode >= OpClose {
				continue
			}
			if h.Opcode != OpContinuation {
				text = h.Opcode == OpText
			}
			msg = append(msg, p...)
			if h.Fin {
				if d := r.Message(&l7.Message{Text: text, Data: msg}); !d.Allow || text && !utf8.Valid(msg) {
					t.Fatalf("wrote a refused message %q", msg)
				}
				msg = nil
			}
		}
	})
}

// Unmask's word-at-a-time path is the byte-at-a-time definition, at
// every offset and length; so is appendUnmasked's.
func TestUnmaskWords(t *testing.T) {
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	for pos := int64(0); pos < 8; pos++ {
		for n := 0; n < 40; n++ {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i * 7)
			}
			want := bytes.Clone(p)
			for i := range want {
				want[i] ^= key[(pos+int64(i))&3]
			}
			if pos == 0 {
				got, ascii := appendUnmasked([]byte("x"), p, key)
				if !bytes.Equal(got, append([]byte("x"), want...)) || ascii != !bytes.ContainsFunc(want, func(r rune) bool { return r >= 0x80 }) {
					t.Fatalf("appendUnmasked len %d: %x (ascii %v), want x%x", n, got, ascii, want)
				}
			}
			Unmask(p, key, pos)
			if !bytes.Equal(p, want) {
				t.Fatalf("pos %d len %d: %x, want %x", pos, n, p, want)
			}
		}
	}
}

// FuzzGlob: a compiled json matcher glob decides as policy.StarMatch.
func FuzzGlob(f *testing.F) {
	for _, p := range [][2]string{{"ticker.*", "ticker.btc"}, {"*.btc", "ticker.btc"}, {"a*b*c", "axxbyc"}, {"*", ""}, {"exact", "exact"}, {"**", "x"}, {"*a*", "bab"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, pattern, v string) {
		g := compileGlob(pattern)
		if got, want := g.match([]byte(v)), policy.StarMatch(pattern, v); got != want {
			t.Fatalf("%q ~ %q: %v, StarMatch %v", pattern, v, got, want)
		}
	})
}

// A field path may start with any character a key may, NUL included:
// a deny_text json matcher naming the key "\x00k" refuses a message
// holding it (the scanner before flatScan never matched such a path,
// so this deny rule let the message through).
func TestRulesNULKey(t *testing.T) {
	r, err := Compile(&policy.WebSocket{
		Text:     []policy.MessageMatch{{Prefix: str("{")}},
		DenyText: []policy.MessageMatch{{JSON: map[string]string{"\x00k": "*"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for msg, deny := range map[string]bool{`{"\u0000k":"x"}`: true, `{"\u0000k":1,"y":{}}`: true, `{"k":"x"}`: false, `{"a":[{"\u0000k":1}]}`: false} {
		if d := r.Message(&l7.Message{Text: true, Data: []byte(msg)}); d.Allow == deny {
			t.Errorf("%s: %+v, want denied %v", msg, d, deny)
		}
	}
}
