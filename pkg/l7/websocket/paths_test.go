package websocket

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"testing/cryptotest"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// The two ways RelayMessages reads a message (decided in place when it
// is one frame wholly in the buffer, gathered otherwise) must relay the
// same: these tests run every input both ways (relayMessages with and
// without whole), through buffers of several sizes and readers handing
// over a few bytes at a time, with and without audit and a rewrite,
// and compare what was written, the bytes counted, the error, the
// decisions audited and the messages the rewrite saw. Mutation-checked:
// wholeFrames writing a refused message, dropping a control frame,
// unmasking at the wrong offset, ignoring a rewrite, or reading a frame
// one byte short of whole each fail TestRelayMessagesPathsAgree.

// pathsRun is one relay's observable result.
type pathsRun struct {
	out     []byte
	n       int64
	err     string
	audited []string
	seen    []string
}

// chunkReader hands over at most n bytes per Read, then io.EOF.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

func relayPaths(t *testing.T, r *Rules, in []byte, chunk, size int, audit, rewrite, whole bool) pathsRun {
	var res pathsRun
	var au func(l7.Decision)
	if audit {
		au = func(d l7.Decision) { res.audited = append(res.audited, d.Reason+" "+d.Rule) }
	}
	var rw Rewrite
	if rewrite {
		rw = func(text []byte) ([]byte, *Refusal) {
			res.seen = append(res.seen, string(text))
			switch {
			case bytes.Contains(text, []byte("BAD")):
				return nil, &Refusal{Code: ClosePolicyViolation, Decision: l7.Denied("credential_endpoint_mismatch", "")}
			case bytes.Contains(text, []byte("GROW")):
				return bytes.Repeat([]byte("S"), 80), nil
			}
			return bytes.ReplaceAll(text, []byte("PH"), []byte("value")), nil
		}
	}
	cryptotest.SetGlobalRandom(t, 1) // the same mask keys for rewritten frames both ways
	var out bytes.Buffer
	src := bufio.NewReaderSize(&chunkReader{b: in, n: chunk}, size)
	n, err := relayMessages(&out, src, &Checker{Client: true}, r, au, rw, whole)
	res.out, res.n = out.Bytes(), n
	if err != nil {
		res.err = err.Error()
	}
	return res
}

// comparePaths runs in both ways under every reading and fails at the
// first difference.
func comparePaths(t *testing.T, r *Rules, in []byte, chunks []int) {
	t.Helper()
	for _, size := range []int{16, 64, 4096} {
		for _, chunk := range chunks {
			for mode := range 4 {
				audit, rewrite := mode&1 != 0, mode&2 != 0
				got := relayPaths(t, r, in, chunk, size, audit, rewrite, true)
				want := relayPaths(t, r, in, chunk, size, audit, rewrite, false)
				if fmt.Sprintf("%q %d %q %q %q", got.out, got.n, got.err, got.audited, got.seen) != fmt.Sprintf("%q %d %q %q %q", want.out, want.n, want.err, want.audited, want.seen) {
					t.Fatalf("input %q (buffer %d, reads of %d, audit %v, rewrite %v):\nin place: %q %d %q audited %q rewrite saw %q\ngathered: %q %d %q audited %q rewrite saw %q",
						in, size, chunk, audit, rewrite, got.out, got.n, got.err, got.audited, got.seen, want.out, want.n, want.err, want.audited, want.seen)
				}
			}
		}
	}
}

// pathsRules: testRules' matchers, without a binary allowance, or with
// one and a larger bound.
func pathsRules(t testing.TB, binary bool) *Rules {
	ws := &policy.WebSocket{
		Text: []policy.MessageMatch{
			{Exact: str("ping")},
			{Prefix: str("SUB ")},
			{JSON: map[string]string{"type": "subscribe", "params.channel": "ticker.*"}},
		},
		DenyText:        []policy.MessageMatch{{Prefix: str("SUB admin")}, {JSON: map[string]string{"params.channel": "*secret*"}}},
		MaxMessageBytes: 64,
	}
	if binary {
		ws.Binary, ws.MaxMessageBytes = true, 200
	}
	r, err := Compile(ws)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pathsMessages are what generated streams say: allowed, refused by
// rules, by the rewrite, grown by it, JSON, multi-byte UTF-8, invalid
// UTF-8, long, and binary.
var pathsMessages = []struct {
	text bool
	s    string
}{
	{true, "ping"}, {true, "pong"}, {true, "SUB trades"}, {true, "SUB admin"}, {true, "SUB PH!"}, {true, "SUB BAD"},
	{true, "SUB GROW"}, {true, `{"type":"subscribe","params":{"channel":"ticker.btc"}}`},
	{true, `{"type":"subscribe","params":{"channel":"ticker.secret"}}`}, {true, `{"type":"subscribe","type":"x"}`},
	{true, "SUB é€😀 ünïcödé"}, {true, "SUB \xc3\x28"}, {true, "SUB " + string(bytes.Repeat([]byte("x"), 70))},
	{true, "SUB " + string(bytes.Repeat([]byte("y"), 130))}, {false, "\x00\x01bin"}, {true, ""},
}

// genStream builds a client's frame stream from seed: messages in one
// frame or split at random byte offsets (through multi-byte
// characters too), each frame with its own random mask key, pings and
// pongs between and inside messages, and sometimes a bad frame or a
// truncated end.
func genStream(seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 27))
	var b []byte
	ctl := func() {
		op := byte(OpPing)
		if rng.IntN(2) == 0 {
			op = OpPong
		}
		b = appendTestFrame(b, true, op, []byte("c"[:rng.IntN(2)]), rng)
	}
	for range 1 + rng.IntN(8) {
		m := pathsMessages[rng.IntN(len(pathsMessages))]
		op := byte(OpText)
		if !m.text {
			op = OpBinary
		}
		pay := []byte(m.s)
		parts := 1
		if rng.IntN(3) == 0 {
			parts = 2 + rng.IntN(3)
		}
		for i := range parts {
			cut := len(pay)
			if i < parts-1 && len(pay) > 0 {
				cut = rng.IntN(len(pay) + 1)
			}
			frameOp := op
			if i > 0 {
				frameOp = OpContinuation
			}
			b = appendTestFrame(b, i == parts-1, frameOp, pay[:cut], rng)
			pay = pay[cut:]
			if rng.IntN(4) == 0 {
				ctl()
			}
		}
	}
	switch rng.IntN(8) {
	case 0:
		b = append(b, 0x81, 0x05, 'h', 'e', 'l', 'l', 'o') // unmasked
	case 1:
		b = b[:rng.IntN(len(b)+1)] // truncated
	case 2:
		b = append(b, 0x81, 0x80|126, 0, 5) // a 16-bit length that is not minimal
	}
	return b
}

// appendTestFrame appends a frame masked with a random key (any
// length's encoding).
func appendTestFrame(b []byte, fin bool, op byte, pay []byte, rng *rand.Rand) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b = append(b, b0)
	switch n := len(pay); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], rng.Uint32())
	b = append(b, key[:]...)
	start := len(b)
	b = append(b, pay...)
	Unmask(b[start:], key, 0)
	return b
}

// TestRelayMessagesPathsAgree: on generated streams (fragmented
// messages, characters split across frames, control frames inside
// messages, bad and truncated ends), both ways relay the same.
func TestRelayMessagesPathsAgree(t *testing.T) {
	for _, binary := range []bool{false, true} {
		r := pathsRules(t, binary)
		for seed := range uint64(300) {
			comparePaths(t, r, genStream(seed), []int{1, 7, 1 << 20})
		}
	}
}

// FuzzRelayMessagesPaths: both ways relay the same on any input.
func FuzzRelayMessagesPaths(f *testing.F) {
	for seed := range uint64(16) {
		f.Add(genStream(seed), uint8(3), false)
	}
	rs := []*Rules{pathsRules(f, false), pathsRules(f, true)}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8, binary bool) {
		r := rs[0]
		if binary {
			r = rs[1]
		}
		comparePaths(t, r, in, []int{int(chunk) + 1, 1 << 20})
	})
}

// A message in one buffered frame is decided and relayed without
// allocating: a run of 256 such messages allocates no more than a run of
// 64 (what a relay allocates once), and Rules.Message none at all.
func TestRelayMessagesAllocs(t *testing.T) {
	r := pathsRules(t, true) // a bound of 200 bytes
	msg := []byte(`{"type":"subscribe","params":{"channel":"ticker.btc-usd"},"id":12345678901}`)
	if n := testing.AllocsPerRun(100, func() { r.Message(&l7.Message{Text: true, Data: msg}) }); n != 0 {
		t.Errorf("Rules.Message: %v allocations per message", n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var one []byte
	one = appendTestFrame(one, true, OpText, msg, rng)
	allocs := func(k int) float64 {
		in := bytes.Repeat(one, k)
		rd := bytes.NewReader(in)
		src := bufio.NewReaderSize(rd, 16<<10)
		return testing.AllocsPerRun(20, func() {
			rd.Reset(in)
			src.Reset(rd)
			if n, err := RelayMessages(io.Discard, src, &Checker{Client: true}, r, nil, nil); err != nil || n != int64(len(in)) {
				t.Fatalf("relayed %d of %d: %v", n, len(in), err)
			}
		})
	}
	if a, b := allocs(64), allocs(256); b > a || a > 4 {
		t.Errorf("allocations per relay: %v for 64 messages, %v for 256", a, b)
	}
}

// BenchmarkRelayMessages: the proxy's own work per message of
// BenchmarkWebSocketMessages (pkg/proxy), without the network: the 64
// subscribe messages of benchMessages (54-71 bytes, 62 on average),
// 512 in turn, in masked frames through RelayMessages with a json
// matcher ("rules") and a prefix matcher ("prefix"), from a buffer into
// io.Discard. "rules-reordered" is rules on the same messages with
// their keys in one of six orders, a different one from each message
// to the next: every message a miss for the relay's shape (jsonShape),
// the shape set aside as shapeCache does.
func BenchmarkRelayMessages(b *testing.B) {
	orders := [][3]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 2, 1}, {1, 0, 2}, {2, 1, 0}}
	msgs := benchMessages()
	rng := rand.New(rand.NewPCG(1, 2))
	var in, reordered []byte
	size := 0
	for i := range 512 {
		kv, o := benchFields(i), orders[i%len(orders)]
		in = appendTestFrame(in, true, OpText, msgs[i%64], rng)
		reordered = appendTestFrame(reordered, true, OpText, []byte("{"+kv[o[0]]+","+kv[o[1]]+","+kv[o[2]]+"}"), rng)
		size += len(msgs[i%64])
	}
	rules := policy.MessageMatch{JSON: map[string]string{"type": "subscribe", "channel": "ticker.*"}}
	for _, c := range []struct {
		name string
		m    policy.MessageMatch
		in   []byte
	}{{"rules", rules, in}, {"prefix", policy.MessageMatch{Prefix: str(`{"type":"subscribe"`)}, in}, {"rules-reordered", rules, reordered}} {
		in := c.in
		b.Run(c.name, func(b *testing.B) {
			r, err := Compile(&policy.WebSocket{Text: []policy.MessageMatch{c.m}})
			if err != nil {
				b.Fatal(err)
			}
			rd := bytes.NewReader(in)
			src := bufio.NewReaderSize(rd, 32<<10)
			b.SetBytes(int64(size / 512))
			b.ReportAllocs()
			for done := 0; done < b.N; done += 512 {
				rd.Reset(in)
				src.Reset(rd)
				if _, err := RelayMessages(io.Discard, src, &Checker{Client: true}, r, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
