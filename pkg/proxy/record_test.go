package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestUnmappedAppendJSON: the hand-written encoding of
// unmapped.egress_proxy is the one encoding/json gives the same struct
// (as Marshal runs it: no HTML escaping), hostile strings included. Every
// field is filled by reflection, so a field added to proxyUnmapped (or
// to a struct it holds) that AppendJSON does not write fails here.
func TestUnmappedAppendJSON(t *testing.T) {
	type plain proxyUnmapped // the same fields and tags, no methods
	strs := []string{"", "proc", "enforce", `"},"x":"`, `\`, "a\nb\r\t\x00\x1f\x7f", "<&>", "\u2028\u2029", "\xff\xfe", "é😀"}
	r := rand.New(rand.NewPCG(1, 2))
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(strs[r.IntN(len(strs))])
		case reflect.Bool:
			v.SetBool(r.IntN(2) == 0)
		case reflect.Int, reflect.Int64:
			v.SetInt(r.Int64N(1<<40) - r.Int64N(1<<40))
		case reflect.Pointer:
			if r.IntN(3) == 0 {
				v.SetZero()
				return
			}
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		case reflect.Slice:
			n := r.IntN(3)
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := range n {
				fill(s.Index(i))
			}
			v.Set(s)
		case reflect.Struct:
			for i := range v.NumField() {
				fill(v.Field(i))
			}
		default:
			t.Fatalf("teach this test (and AppendJSON) the field kind %s", v.Kind())
		}
	}
	for range 3000 {
		var u proxyUnmapped
		fill(reflect.ValueOf(&u).Elem())
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(plain(u)); err != nil {
			t.Fatal(err)
		}
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := u.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON\n got %s\nwant %s", got, want)
		}
	}
}

// BenchmarkRequestEvent is the event of one request on an inspected
// tunnel, built and written (to io.Discard): what every keep-alive
// request costs the proxy beyond relaying it.
func BenchmarkRequestEvent(b *testing.B) {
	src := ocsf.NewSource("sbx-3f9a2c", Component, "0.1.0")
	conn := &Record{
		ConnID: 42, Listener: ListenerProxy, Kind: KindConnect, Start: time.Now(),
		Client: netip.MustParseAddrPort("10.200.0.2:40522"), Local: netip.MustParseAddrPort("10.200.0.1:3128"),
		Host: "registry.npmjs.org", Port: 443, Upstream: netip.MustParseAddrPort("198.51.100.7:443"),
		Identity:   identityOf("/usr/bin/node", curlSHA, "/usr/bin/bash", "/usr/local/bin/hermes"),
		Generation: 3, PolicySHA: curlSHA, Entry: "npm",
	}
	conn.Identity.Backend = "bpf/fast"
	shared := conn.sharedEvents(src.Sandbox)
	w := ocsf.NewWriter(io.Discard)
	b.ReportAllocs()
	b.ResetTimer()
	defer testutil.CPUPerOp(b)()
	for range b.N {
		c := conn
		rr := &Record{
			ConnID: c.ConnID, Listener: c.Listener, Kind: KindHTTP, Start: time.Now(),
			Client: c.Client, Local: c.Local, Host: c.Host, Port: c.Port, Upstream: c.Upstream,
			Identity: c.Identity, Generation: c.Generation, PolicySHA: c.PolicySHA,
			Entry: c.Entry, L7Rules: true, L7Checked: true,
			Method: "GET", Proto: "HTTP/1.1", PerRequest: true, shared: shared,
			URL:     &url.URL{Scheme: "https", Host: "registry.npmjs.org", Path: "/@types/node"},
			Outcome: OutcomeAllowed, Status: 200, BytesDown: 1234, Count: 1,
		}
		rr.End = time.Now()
		for _, ev := range rr.events(src) {
			if err := w.Emit(ev); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkConnectionEvent is the summary event of one CONNECT tunnel
// (Network Activity, Open), built and written to io.Discard by the
// generic path (events() and Marshal): what the event of a connection
// with a Detection Finding costs, and what a plain connection's cost
// before the dedicated encoder (BenchmarkOpenEvent).
func BenchmarkConnectionEvent(b *testing.B) {
	src := ocsf.NewSource("sbx-3f9a2c", Component, "0.1.0")
	id := identityOf("/usr/bin/python3.11", curlSHA, "/usr/bin/bash", "/usr/local/bin/hermes")
	id.Backend = "bpf/fast"
	w := ocsf.NewWriter(io.Discard)
	b.ReportAllocs()
	b.ResetTimer()
	defer testutil.CPUPerOp(b)()
	for i := range b.N {
		r := &Record{
			ConnID: uint64(i), Listener: ListenerProxy, Kind: KindConnect, Start: time.Now(),
			Client: netip.MustParseAddrPort("10.200.0.2:40522"), Local: netip.MustParseAddrPort("10.200.0.1:3128"),
			Host: "echo.test", Port: 7, Upstream: netip.MustParseAddrPort("198.51.100.7:7"),
			Identity: id, Generation: 3, PolicySHA: curlSHA, Entry: "bench",
			Method: "CONNECT", Outcome: OutcomeAllowed, Status: 200, BytesUp: 1024, BytesDown: 1024, Count: 1,
		}
		r.End = time.Now()
		for _, ev := range r.events(src) {
			if err := w.Emit(ev); err != nil {
				b.Fatal(err)
			}
		}
	}
}
