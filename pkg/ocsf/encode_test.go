package ocsf

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// hostile are strings a sandboxed client or upstream can put into an
// event (a path, a method, a host name, an executable's name, a reason):
// every class of byte encoding/json treats specially.
var hostile = []string{
	"", "a", "curl", "/usr/bin/curl", "GET", "api.example.com",
	`"`, `\`, `\"`, `"},"x":{"`, "line\nbreak", "cr\rlf\r\n", "tab\there",
	"\b\f", "\x00", "nul\x00inside", "\x01\x02\x1f\x7f", "\x1b[31mred\x1b[0m",
	"<script>&amp;</script>", "\u2028", "sep\u2029arator", "\u2027\u202a\u202e",
	"héllo wörld", "日本語", "emoji 😀", "\xff", "bad\xc3(utf8", "\xed\xa0\x80",
	"\xf4\x90\x80\x80", "trunc\xe2\x82", "\xef\xbf\xbd", "%2F..%5C", "a/../b//c",
	strings.Repeat("x", 300), strings.Repeat("\"\\\n", 40),
}

// filler sets every exported field of a value at random: strings from
// hostile, numbers including zero and negatives, pointers and slices
// present or absent. A field added to any struct of an event is filled
// too, so an encoder that does not know it fails the comparison.
type filler struct {
	r     *rand.Rand
	depth int
}

func (f *filler) fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(hostile[f.r.IntN(len(hostile))])
	case reflect.Int, reflect.Int64, reflect.Int32:
		switch f.r.IntN(4) {
		case 0:
			v.SetInt(0)
		case 1:
			v.SetInt(-f.r.Int64N(1 << 40))
		default:
			v.SetInt(f.r.Int64N(1 << 50))
		}
	case reflect.Bool:
		v.SetBool(f.r.IntN(2) == 0)
	case reflect.Pointer:
		if f.r.IntN(4) == 0 || f.depth > 6 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		f.depth++
		f.fill(p.Elem())
		f.depth--
		v.Set(p)
	case reflect.Slice:
		switch f.r.IntN(4) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		n := 1 + f.r.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fill(s.Index(i))
		}
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	case reflect.Map:
		// Base.Unmapped and Policy.Data: map[string]any.
		switch f.r.IntN(5) {
		case 0:
			v.SetZero()
			return
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
			return
		}
		m := reflect.MakeMap(v.Type())
		for range 1 + f.r.IntN(3) {
			var val any = testUnmapped{Name: hostile[f.r.IntN(len(hostile))], N: f.r.IntN(100), On: f.r.IntN(2) == 0}
			if f.r.IntN(8) == 0 {
				val = map[string]any{"plain": hostile[f.r.IntN(len(hostile))]} // not an appender
			}
			m.SetMapIndex(reflect.ValueOf(hostile[f.r.IntN(len(hostile))]), reflect.ValueOf(val))
		}
		v.Set(m)
	case reflect.Interface:
		v.Set(reflect.ValueOf(hostile[f.r.IntN(len(hostile))]))
	default:
		panic("filler: unhandled kind " + v.Kind().String() + " (teach the filler and the encoder this field)")
	}
}

// testUnmapped is an unmapped value that encodes itself.
type testUnmapped struct {
	Name string `json:"name"`
	N    int    `json:"n,omitempty"`
	On   bool   `json:"on"`
}

func (u testUnmapped) AppendJSON(b []byte) []byte {
	o := obj{b: append(b, '{')}
	o.str("name", u.Name)
	o.intOmit("n", int64(u.N))
	o.key("on")
	o.b = strconv_AppendBool(o.b, u.On)
	return append(o.b, '}')
}

func (u testUnmapped) MarshalJSON() ([]byte, error) { return u.AppendJSON(nil), nil }

func strconv_AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

func TestAppendEventMatchesEncodingJSON(t *testing.T) {
	f := &filler{r: rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))}
	fast := 0
	const n = 3000
	for i := range n {
		var ev Event
		if i%2 == 0 {
			ev = &HTTPActivity{}
		} else {
			ev = &NetworkActivity{}
		}
		f.fill(reflect.ValueOf(ev).Elem())
		if i%3 == 0 {
			// Most events have no policy object (it sends them to
			// encoding/json): keep the fast path busy.
			reflect.ValueOf(ev).Elem().FieldByName("Policy").SetZero()
		}
		want, err := marshalStd(nil, ev)
		if err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		got, ok := appendEvent([]byte("prefix"), ev)
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("declined event changed dst: %q", got)
			}
			continue
		}
		fast++
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("event %d differs from encoding/json at byte %d\n got: %s\nwant: %s", i, firstDiff(got[len("prefix"):], want), got[len("prefix"):], want)
		}
	}
	if fast < n/4 {
		t.Fatalf("only %d of %d events took the hand-written encoder", fast, n)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	check := func(s string) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	}
	for _, s := range hostile {
		check(s)
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("a" + string([]byte{byte(c)}) + "b")
	}
	for r := rune(0); r < 0x3000; r++ {
		check(string(r))
	}
	for _, r := range []rune{0xfffd, 0xfeff, 0x10ffff, 0x1f600} {
		check(string(r))
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		got := AppendJSONString(nil, s)
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
		if !utf8.Valid(got) {
			t.Fatalf("%q: invalid UTF-8 out", s)
		}
	})
}

// TestMarshalFallsBack: events the encoder does not cover are still
// encoded, by encoding/json.
func TestMarshalFallsBack(t *testing.T) {
	s := &Source{Sandbox: "sbx", Component: "egress-proxy", Now: func() time.Time { return time.UnixMilli(1) }}
	u, _ := url.Parse("https://h.example/p")
	c := Conn{Dst: &NetworkEndpoint{Hostname: "h.example", Port: 443}}
	for name, mod := range map[string]func(*HTTPActivity){
		"plain map":   func(e *HTTPActivity) { e.Unmapped = map[string]any{"k": map[string]any{"a": 1}} },
		"nil pointer": func(e *HTTPActivity) { e.Unmapped = map[string]any{"k": (*ptrUnmapped)(nil)} },
		"policy":      func(e *HTTPActivity) { e.Policy = &Policy{Name: "p"} },
	} {
		e := s.HTTPRequest(c, Request{Method: "GET", URL: u, Version: "HTTP/1.1", Status: 200}, Decision{Allowed: true, Code: "allowed"})
		mod(e)
		if err := e.prepare(); err != nil {
			t.Fatal(err)
		}
		if _, ok := appendEvent(nil, e); ok {
			t.Errorf("%s: the hand-written encoder took an event it does not cover", name)
		}
		got, err := Marshal(e)
		want, _ := marshalStd(nil, e)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: Marshal = %s, %v; want %s", name, got, err, want)
		}
	}
}

type ptrUnmapped struct{ A string }

func (p *ptrUnmapped) AppendJSON(b []byte) []byte   { return append(b, `{"a":"x"}`...) }
func (p *ptrUnmapped) MarshalJSON() ([]byte, error) { return p.AppendJSON(nil), nil }

// benchEvent is the proxy's per-request event: an allowed GET on an
// inspected tunnel by a process with two ancestors.
func benchEvent() *HTTPActivity {
	s := &Source{Sandbox: "sbx-3f9a2c", Component: "egress-proxy", ProductVersion: "0.1.0", KernelRelease: "6.18.0",
		Labels: []string{"kind:task", "agent:agent-7"}}
	u, _ := url.Parse("https://registry.npmjs.org/@types%2fnode/-/node-22.0.0.tgz")
	actor := &Actor{Process: &Process{PID: 4242, Name: "node", Sandbox: "sbx-3f9a2c",
		File: ExeFile("/usr/bin/node", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
		ParentProcess: &Process{PID: 4200, Name: "bash", Sandbox: "sbx-3f9a2c", File: ExeFile("/usr/bin/bash", ""),
			ParentProcess: &Process{PID: 1, Name: "sandbox-init", Sandbox: "sbx-3f9a2c"}}}}
	c := Conn{Src: &NetworkEndpoint{IP: "10.200.0.2", Port: 40522}, Dst: &NetworkEndpoint{Hostname: "registry.npmjs.org", IP: "198.51.100.7", Port: 443}, Actor: actor}
	e := s.HTTPRequest(c, Request{Method: "GET", URL: u, Version: "HTTP/1.1", Status: 200},
		Decision{Allowed: true, Code: "allowed", Rule: &FirewallRule{Name: "npm", UID: "sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8", Type: "palisade-egress-proxy", Version: "3"}})
	e.Unmapped = map[string]any{"egress_proxy": testUnmapped{Name: "enforce", N: 3, On: true}}
	if err := e.prepare(); err != nil {
		panic(err)
	}
	return e
}

// BenchmarkMarshalHTTPActivity compares the hand-written encoder with
// encoding/json on a prepared per-request event (the ratio is quoted in
// encode.go).
func BenchmarkMarshalHTTPActivity(b *testing.B) {
	e := benchEvent()
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 4096)
		defer testutil.CPUPerOp(b)()
		for range b.N {
			buf, _ = appendEvent(buf[:0], e)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		defer testutil.CPUPerOp(b)()
		for range b.N {
			out, _ := marshalStd(nil, e)
			n = len(out)
		}
		b.SetBytes(int64(n))
	})
}

// TestFillErrorsNameTheAttribute: the lazily built names in Marshal's
// errors are the full dotted paths.
func TestFillErrorsNameTheAttribute(t *testing.T) {
	s := &Source{Sandbox: "sbx", Component: "c", Now: func() time.Time { return time.UnixMilli(1) }}
	chain := func() *Actor {
		return &Actor{Process: &Process{PID: 3, ParentProcess: &Process{PID: 2, File: &File{Name: "sh", TypeID: FileTypeExecutable,
			Hashes: []Fingerprint{{AlgorithmID: AlgorithmSHA256, Value: "a"}, {AlgorithmID: 77, Value: "b"}}}}}}
	}
	dst := &NetworkEndpoint{Hostname: "h", Port: 1}
	e := s.NetworkOpen(Conn{Dst: dst, Actor: chain()}, Decision{Allowed: true})
	_, err := Marshal(e)
	if want := "actor.process.parent_process.file.hashes[1].algorithm_id: 77 is not a defined value"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to name %s", err, want)
	}
	f := s.BypassAttempt(Conn{Dst: dst}, "x")
	f.Evidences = append(f.Evidences, Evidence{Actor: &Actor{Process: &Process{PID: 1, User: &User{TypeID: 9}}}})
	_, err = Marshal(f)
	if want := "evidences[1].actor.process.user.type_id: 9"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it to name %s", err, want)
	}
	p := &Process{PID: 3}
	p.ParentProcess = p
	_, err = Marshal(s.NetworkOpen(Conn{Dst: dst, Actor: &Actor{Process: p}}, Decision{Allowed: true}))
	if want := "actor.process" + strings.Repeat(".parent_process", maxDepth+1) + ": parent_process chain deeper than 128"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want %s", err, want)
	}
}

// TestPrepareSharedObjectsReadOnly: once filled, an event's objects are
// only read by the next prepare (the proxy's request events share their
// connection's actor and endpoints across goroutines), and filling
// allocates nothing.
func TestPrepareSharedObjectsReadOnly(t *testing.T) {
	e := benchEvent()
	if n := testing.AllocsPerRun(100, func() {
		if err := e.prepare(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("prepare of a prepared event allocated %v times", n)
	}
}

func TestAppendJSONStringsMatchesEncodingJSON(t *testing.T) {
	for _, ss := range [][]string{nil, {}, {""}, {"a"}, {"a", "b\n\"c\"", "\xff", "\u2028<&>"}} {
		// As encoding/json writes a non-nil slice with SetEscapeHTML(false).
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(append([]string{}, ss...)); err != nil {
			t.Fatal(err)
		}
		want := append([]byte("x"), bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		if got := AppendJSONStrings([]byte("x"), ss); !bytes.Equal(got, want) {
			t.Errorf("AppendJSONStrings(%q) = %s, want %s", ss, got, want)
		}
	}
}
