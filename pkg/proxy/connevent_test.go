package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// hostileStrings need escaping or are otherwise awkward in JSON: quotes,
// backslashes, control characters, invalid UTF-8 (alone, and a sequence
// cut short before ASCII), U+2028/U+2029, HTML characters (not escaped),
// multi-byte runes.
var hostileStrings = []string{
	"", "a", "echo.test", "registry.npmjs.org", `q"uote`, `back\slash`, "ctl\x00\x01\x1f\x7f",
	"tab\tnew\nline\r\b\f", "bad\xffutf8", "cut\xe2\x80", "\xe2\x80:", "sep\u2028\u2029", "<a&b>",
	"ünïcødé/日本", "::1", "2001:db8::7", "198.51.100.7", "[::1]", "%zone", "a:b",
}

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

func randString(rng *rand.Rand) string {
	if rng.IntN(4) == 0 {
		var b []byte
		for range rng.IntN(12) {
			b = append(b, byte(rng.IntN(256)))
		}
		return string(b)
	}
	return pick(rng, hostileStrings)
}

func randAddrPort(rng *rand.Rand) netip.AddrPort {
	switch rng.IntN(5) {
	case 0:
		return netip.AddrPort{}
	case 1:
		return netip.MustParseAddrPort("[2001:db8::5]:443")
	case 2:
		return netip.AddrPortFrom(netip.MustParseAddr("::ffff:192.0.2.9"), uint16(rng.IntN(3)))
	case 3:
		return netip.AddrPortFrom(netip.MustParseAddr(pick(rng, []string{"fe80::1%veth0", "fe80::2%a\"b\\c\x01"})), 8080)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 200, byte(rng.IntN(256)), 2}), uint16(rng.IntN(65536)))
}

func randTime(rng *rand.Rand) time.Time {
	switch rng.IntN(6) {
	case 0:
		return time.Time{}
	case 1:
		return time.UnixMilli(0)
	}
	return time.UnixMilli(1_700_000_000_000 + rng.Int64N(1e9)).Add(time.Duration(rng.IntN(1e6)))
}

func randIdentity(rng *rand.Rand) *Identity {
	switch rng.IntN(5) {
	case 0:
		return nil
	case 1:
		return &Identity{Backend: randString(rng)}
	}
	id := &Identity{PID: rng.IntN(3) * rng.IntN(1<<22), Exe: randString(rng), SHA256: pick(rng, []string{"", curlSHA, randString(rng)}),
		Backend: pick(rng, []string{"", "bpf", "bpf/fast", randString(rng)})}
	n := rng.IntN(4)
	if rng.IntN(10) == 0 {
		n = maxAncestors + rng.IntN(4) // the chain is cut at maxAncestors
	}
	for range n {
		id.Ancestors = append(id.Ancestors, Ancestor{PID: rng.IntN(3) * rng.IntN(5000), Exe: pick(rng, []string{"", "/usr/bin/bash", randString(rng)})})
	}
	if rng.IntN(5) == 0 {
		id.Connector = &Ancestor{PID: rng.IntN(9999), Exe: randString(rng)}
	}
	if rng.IntN(8) == 0 {
		code := &ForeignCode{File: randString(rng), Reasons: []string{randString(rng)}}
		if rng.IntN(2) == 0 && len(id.Ancestors) > 0 {
			id.Ancestors[0].Code = code
		} else {
			id.Code = code
		}
	}
	return id
}

// randRecord fills every field events() reads, plain or not.
func randRecord(rng *rand.Rand) *Record {
	r := &Record{
		ConnID:     rng.Uint64() >> uint(rng.IntN(64)),
		Listener:   pick(rng, []string{ListenerProxy, ListenerProxy, ListenerTransparent, ListenerFence}),
		Kind:       pick(rng, []string{KindConnect, KindConnect, KindTCP, KindHTTP, ""}),
		Start:      randTime(rng),
		End:        randTime(rng),
		Client:     randAddrPort(rng),
		Local:      randAddrPort(rng),
		Host:       pick(rng, []string{"echo.test", "", "198.51.100.7", "2001:db8::9", "fd00::1", "A::", "fe80::1%\"q", "::ffff:203.0.113.5", "1.2.3", randString(rng)}),
		Port:       rng.IntN(3) * rng.IntN(65536),
		Upstream:   randAddrPort(rng),
		Identity:   randIdentity(rng),
		Generation: rng.Int64N(1 << 40),
		PolicySHA:  pick(rng, []string{"", curlSHA, randString(rng)}),
		Outcome: pick(rng, []string{OutcomeAllowed, OutcomeAllowed, OutcomePolicyDenied, OutcomeSSRFDenied, OutcomeBadRequest,
			OutcomeBypassDenied, OutcomeUpstreamFailed, OutcomeClientGone, "", randString(rng)}),
		Entry:             pick(rng, []string{"", "bench", randString(rng)}),
		Reason:            pick(rng, []string{"", ReasonAttributionFailed, randString(rng)}),
		Rule:              pick(rng, []string{"", "websocket.deny_text[0]", randString(rng)}),
		Audit:             rng.IntN(4) == 0,
		L7Rules:           rng.IntN(2) == 0,
		L7Checked:         rng.IntN(2) == 0,
		Status:            pick(rng, []int{0, 200, 403}),
		Method:            pick(rng, []string{"CONNECT", "GET", ""}),
		BytesUp:           rng.Int64N(1 << 30),
		BytesDown:         rng.Int64N(1<<30) - 5,
		Cause:             randString(rng),
		Count:             rng.IntN(4),
		First:             randTime(rng),
		CredentialRefused: rng.IntN(8) == 0,
	}
	if rng.IntN(4) == 0 {
		r.URL = &url.URL{Scheme: "http", Host: "echo.test", Path: "/" + randString(rng)}
	}
	if rng.IntN(8) == 0 {
		r.PerRequest = true
	}
	if rng.IntN(6) == 0 {
		r.Call = l7.Call{Method: randString(rng), Tool: randString(rng)}
	}
	if rng.IntN(5) == 0 {
		r.Mapping = &MappingInfo{Generation: 2, MappingID: randString(rng), Name: randString(rng), Real: []string{randString(rng)}, Synthetic: "198.18.0.9"}
	}
	if rng.IntN(5) == 0 {
		r.Route = &Route{Proxy: randString(rng), Target: randString(rng), NoProxy: randString(rng)}
	}
	if rng.IntN(6) == 0 {
		r.Tallies = []DenialTally{{DenialDetail: DenialDetail{Method: "GET", Path: randString(rng), Reason: randString(rng)}, Count: 3}}
	}
	switch rng.IntN(12) {
	case 0:
		r.Mismatch = &MismatchError{Exe: randString(rng), Pinned: curlSHA, Seen: randString(rng)}
	case 1:
		r.Violation = &SendViolation{PID: 7, Exe: randString(rng), Comm: randString(rng)}
	case 2:
		r.Foreign = &ForeignProcess{PID: 8, Exe: randString(rng), Code: ForeignCode{File: randString(rng), Reasons: []string{"x"}}}
	case 3:
		r.CredentialMisuse = true
	}
	return r
}

func randSource(rng *rand.Rand, now time.Time) *ocsf.Source {
	s := &ocsf.Source{
		Sandbox:        pick(rng, []string{"sbx-3f9a2c", "sbx-3f9a2c", "", randString(rng)}),
		Component:      pick(rng, []string{Component, "", randString(rng)}),
		ProductVersion: pick(rng, []string{"0.1.0", "", randString(rng)}),
		Hostname:       pick(rng, []string{"", "", randString(rng)}),
		KernelRelease:  pick(rng, []string{"6.18.44", "", randString(rng)}),
		Now:            func() time.Time { return now },
	}
	if rng.IntN(4) == 0 {
		s.Labels = []string{"kind:task", randString(rng)}
	}
	return s
}

// genericLine is what emitRecord writes without the dedicated encoder:
// events() and Marshal. It fails the test unless events() builds one
// Network Activity Open and nothing else.
func genericLine(t testing.TB, r *Record, src *ocsf.Source) ([]byte, error) {
	t.Helper()
	evs := r.events(src)
	if len(evs) != 1 {
		t.Fatalf("a plain record gave %d events", len(evs))
	}
	na, ok := evs[0].(*ocsf.NetworkActivity)
	if !ok || na.ActivityID != ocsf.NetworkOpen {
		t.Fatalf("a plain record gave %T activity %d", evs[0], evs[0].EventBase().ActivityID)
	}
	return ocsf.Marshal(evs[0])
}

// checkOpenEvent compares the dedicated encoder with the generic path on
// one record: the same bytes, or both refusing.
func checkOpenEvent(t testing.TB, r *Record, src *ocsf.Source, now time.Time) {
	t.Helper()
	want, werr := genericLine(t, r, src)
	got, ok := r.appendOpenEvent(nil, src, now.UnixMilli())
	switch {
	case werr != nil && ok:
		t.Fatalf("Marshal fails (%v) but appendOpenEvent wrote %s\nrecord %+v", werr, got, r)
	case werr == nil && !ok:
		t.Fatalf("appendOpenEvent refused a record Marshal encodes as %s\nrecord %+v", want, r)
	case !bytes.Equal(got, want):
		t.Fatalf("appendOpenEvent differs from Marshal\n got %s\nwant %s\nrecord %+v", got, want, r)
	}
}

// TestOpenEventMatchesGeneric: for records with every field filled at
// random (hostile strings included), the dedicated encoder writes
// exactly what events() and Marshal write whenever plainOpen says it
// applies, and plainOpen refuses every record whose events are anything
// else (genericLine checks).
func TestOpenEventMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 3))
	n := 30000
	if testing.Short() {
		n = 3000
	}
	plain, refused := 0, 0
	for range n {
		now := time.UnixMilli(pick(rng, []int64{0, -5, 1_796_206_704_082, 1_796_206_704_082, 1_796_206_704_082, 1_796_206_704_082}))
		src := randSource(rng, now)
		r := randRecord(rng)
		if !r.plainOpen() {
			continue
		}
		plain++
		if _, ok := r.appendOpenEvent(nil, src, now.UnixMilli()); !ok {
			refused++
		}
		checkOpenEvent(t, r, src, now)
	}
	// The draw must reach both sides of plainOpen and of the refusal.
	if plain < n/10 || refused == 0 || refused == plain {
		t.Fatalf("%d plain records of %d, %d refused: the generator misses cases", plain, n, refused)
	}
	t.Logf("%d plain records of %d compared, %d refused by both", plain, n, refused)
}

// TestPlainOpenClasses: plainOpen is true exactly for the records whose
// events are a lone Network Activity Open.
func TestPlainOpenClasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 4))
	src := ocsf.NewSource("sbx", Component, "0.1.0")
	for range 5000 {
		r := randRecord(rng)
		evs := r.events(src)
		na, isNet := evs[0].(*ocsf.NetworkActivity)
		lone := len(evs) == 1 && isNet && na.ActivityID == ocsf.NetworkOpen && r.shared == nil
		if r.plainOpen() != lone {
			t.Fatalf("plainOpen %v, events %d (%T): record %+v", r.plainOpen(), len(evs), evs[0], r)
		}
	}
}

// FuzzOpenEvent: the dedicated encoder against the generic path on
// fuzzed strings and numbers.
func FuzzOpenEvent(f *testing.F) {
	f.Add("sbx-3f9a2c", "echo.test", "/usr/bin/python3", "bench", "", curlSHA, uint64(7), int64(1_796_206_704_082), uint16(7), true)
	f.Add("s\"b\\x", "2001:db8::1", "bad\xffexe", "", "why\n", "\u2028", uint64(1<<63), int64(1), uint16(0), false)
	f.Fuzz(func(t *testing.T, sandbox, host, exe, entry, reason, sha string, id uint64, now int64, port uint16, allowed bool) {
		nowT := time.UnixMilli(now)
		src := &ocsf.Source{Sandbox: sandbox, Component: Component, ProductVersion: reason, Hostname: entry, KernelRelease: exe, Now: func() time.Time { return nowT }}
		r := &Record{
			ConnID: id, Listener: ListenerProxy, Kind: KindConnect, Start: nowT, End: nowT.Add(time.Duration(port) * time.Millisecond),
			Client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 2}), port), Host: host, Port: int(port),
			Identity:   &Identity{PID: int(port), Exe: exe, SHA256: sha, Ancestors: []Ancestor{{PID: 1, Exe: host}}, Backend: reason},
			Generation: now, PolicySHA: sha, Entry: entry, Reason: reason, Outcome: OutcomePolicyDenied, Count: 1,
		}
		if allowed {
			r.Outcome, r.Upstream = OutcomeAllowed, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, 7}), port)
		}
		checkOpenEvent(t, r, src, nowT)
	})
}

// TestOpenEventValidates: lines the dedicated encoder writes for the
// proxy's usual records pass the OCSF validation events files get.
func TestOpenEventValidates(t *testing.T) {
	src := ocsf.NewSource("sbx-3f9a2c", Component, "0.1.0")
	var buf bytes.Buffer
	w := ocsf.NewWriter(&buf)
	for i, r := range []*Record{benchOpenRecord(1), benchOpenRecord(2)} {
		if i == 1 {
			r.Outcome, r.Reason, r.Upstream = OutcomePolicyDenied, "binary not allowed", netip.AddrPort{}
		}
		line, ok := r.appendOpenEvent(nil, src, src.NowMillis())
		if !ok {
			t.Fatal("refused")
		}
		if err := w.EmitLine(append(line, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	ocsftest.ValidateLines(t, buf.Bytes())
}

func benchOpenRecord(i uint64) *Record {
	id := identityOf("/usr/bin/python3.11", curlSHA, "/usr/bin/bash", "/usr/local/bin/hermes")
	id.Backend = "bpf/fast"
	now := time.Now()
	return &Record{
		ConnID: i, Listener: ListenerProxy, Kind: KindConnect, Start: now, End: now.Add(3 * time.Millisecond),
		Client: netip.MustParseAddrPort("10.200.0.2:40522"), Local: netip.MustParseAddrPort("10.200.0.1:3128"),
		Host: "echo.test", Port: 7, Upstream: netip.MustParseAddrPort("198.51.100.7:7"),
		Identity: id, Generation: 3, PolicySHA: curlSHA, Entry: "bench",
		Method: "CONNECT", Outcome: OutcomeAllowed, Status: 200, BytesUp: 1024, BytesDown: 1024, Count: 1,
	}
}

// BenchmarkOpenEvent is the summary event of one allowed CONNECT tunnel
// (python3 under bash under an agent, as BenchmarkConnectionEvent has
// it) encoded from its record into a reused buffer, as emitOpenLine
// does; BenchmarkOpenEventGeneric is the path it replaces (events()
// builds the event, Marshal's own encoder writes it) and
// BenchmarkOpenEventEncodingJSON builds the event and encodes it with
// encoding/json. The ratios are in connevent.go's comment.
func BenchmarkOpenEvent(b *testing.B) {
	src := ocsf.NewSource("sbx-3f9a2c", Component, "0.1.0")
	r := benchOpenRecord(7)
	var buf []byte
	b.ReportAllocs()
	defer testutil.CPUPerOp(b)()
	for b.Loop() {
		var ok bool
		if buf, ok = r.appendOpenEvent(buf[:0], src, src.NowMillis()); !ok {
			b.Fatal("refused")
		}
	}
}

func BenchmarkOpenEventGeneric(b *testing.B) {
	src := ocsf.NewSource("sbx-3f9a2c", Component, "0.1.0")
	r := benchOpenRecord(7)
	w := ocsf.NewWriter(io.Discard)
	b.ReportAllocs()
	defer testutil.CPUPerOp(b)()
	for b.Loop() {
		if err := w.Emit(r.events(src)[0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenEventEncodingJSON(b *testing.B) {
	src := ocsf.NewSource("sbx-3f9a2c", Component, "0.1.0")
	r := benchOpenRecord(7)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	b.ReportAllocs()
	defer testutil.CPUPerOp(b)()
	for b.Loop() {
		buf.Reset()
		if err := enc.Encode(r.events(src)[0]); err != nil {
			b.Fatal(err)
		}
	}
	if !strings.HasPrefix(buf.String(), `{"activity_id":1`) {
		b.Fatal(buf.String())
	}
}
