package proxy

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadHead(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		max            int
		err            error
	}{
		{name: "crlf", in: "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nBODY", want: "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"},
		{name: "lf", in: "GET http://a/ HTTP/1.1\nHost: a\n\nBODY", want: "GET http://a/ HTTP/1.1\nHost: a\n\n"},
		{name: "leading empty lines skipped", in: "\r\n\r\nCONNECT a:1 HTTP/1.1\r\n\r\n", want: "CONNECT a:1 HTTP/1.1\r\n\r\n"},
		{name: "eof mid head", in: "GET http://a/ HTTP/1.1\r\nHost", err: io.EOF},
		{name: "exactly at limit", in: "CONNECT a:1 HTTP/1.1\r\n\r\n", max: len("CONNECT a:1 HTTP/1.1\r\n\r\n"), want: "CONNECT a:1 HTTP/1.1\r\n\r\n"},
		{name: "one over the limit", in: "CONNECT a:1 HTTP/1.1\r\n\r\n", max: len("CONNECT a:1 HTTP/1.1\r\n\r\n") - 1, err: ErrHeadTooLarge},
		{name: "long line beyond the buffer", in: "GET http://a/" + strings.Repeat("x", 9000) + " HTTP/1.1\r\n\r\n", max: 8192, err: ErrHeadTooLarge},
		{name: "endless empty lines", in: strings.Repeat("\r\n", 5000), max: 8192, err: ErrHeadTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			max := tc.max
			if max == 0 {
				max = DefaultMaxHeadBytes
			}
			// A 16-byte buffer forces the ErrBufferFull path on every line.
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
			got, err := readHead(br, max, nil)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("head = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseHead(t *testing.T) {
	h, err := ParseHead([]byte("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic eA==\r\nX-Empty:\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h.Method != "CONNECT" || h.Target != "example.com:443" || h.Proto != "HTTP/1.1" {
		t.Fatalf("request line = %q %q %q", h.Method, h.Target, h.Proto)
	}
	if len(h.Fields) != 3 || h.Fields[1].Name != "Proxy-Authorization" || h.Fields[1].Value != "Basic eA==" || h.Fields[2].Value != "" {
		t.Fatalf("fields = %+v", h.Fields)
	}
	if v, ok := h.Get("host"); !ok || v != "example.com:443" {
		t.Fatalf("Get(host) = %q, %v", v, ok)
	}

	bad := map[string]string{
		"no request line":         "\r\n",
		"two-part request line":   "GET /\r\n\r\n",
		"empty method":            " http://a/ HTTP/1.1\r\n\r\n",
		"method with separator":   "GE(T http://a/ HTTP/1.1\r\n\r\n",
		"http/2":                  "GET http://a/ HTTP/2.0\r\n\r\n",
		"http/0.9 style":          "GET http://a/\r\n\r\n",
		"extra space in line":     "GET  http://a/ HTTP/1.1\r\n\r\n",
		"space in target":         "GET http://a/ b HTTP/1.1\r\n\r\n",
		"control char in target":  "GET http://a/\x01 HTTP/1.1\r\n\r\n",
		"obs-fold":                "GET http://a/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		"space before colon":      "GET http://a/ HTTP/1.1\r\nHost : a\r\n\r\n",
		"no colon":                "GET http://a/ HTTP/1.1\r\nHost a\r\n\r\n",
		"bare cr in value":        "GET http://a/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
		"nul in value":            "GET http://a/ HTTP/1.1\r\nX: a\x00b\r\n\r\n",
		"unterminated":            "GET http://a/ HTTP/1.1\r\nHost: a\r\n",
		"data after head":         "GET http://a/ HTTP/1.1\r\n\r\nx",
		"empty field name":        "GET http://a/ HTTP/1.1\r\n: a\r\n\r\n",
		"non-token in field name": "GET http://a/ HTTP/1.1\r\nX\"Y: a\r\n\r\n",
		"too many fields":         "GET http://a/ HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", maxHeaderFields+1) + "\r\n",
	}
	for name, in := range bad {
		if _, err := ParseHead([]byte(in)); err == nil {
			t.Errorf("%s: ParseHead(%q) accepted", name, in)
		} else if _, ok := err.(*HeadError); !ok {
			t.Errorf("%s: error %T, want *HeadError", name, err)
		}
	}
}

func TestParseAuthority(t *testing.T) {
	good := []struct {
		in   string
		host string
		port int
	}{
		{"example.com:443", "example.com", 443},
		{"EXAMPLE.com.:8443", "EXAMPLE.com.", 8443},
		{"198.51.100.7:1", "198.51.100.7", 1},
		{"[2001:db8::1]:443", "2001:db8::1", 443},
		{"2130706433:80", "2130706433", 80},
	}
	for _, g := range good {
		h, p, err := ParseAuthority(g.in)
		if err != nil || h != g.host || p != g.port {
			t.Errorf("ParseAuthority(%q) = %q, %d, %v; want %q, %d", g.in, h, p, err, g.host, g.port)
		}
	}
	for _, in := range []string{
		"", "example.com", "example.com:", ":443", "example.com:0", "example.com:65536",
		"example.com:+443", "example.com:0x1bb", "user@example.com:443", "example.com:443/path",
		"2001:db8::1:443", "[2001:db8::1]", "[]:443", "[1.2.3.4]:443", "[2001:db8::1]x:443",
		"example.com:99999999999999999999",
	} {
		if h, p, err := ParseAuthority(in); err == nil {
			t.Errorf("ParseAuthority(%q) = %q, %d; want an error", in, h, p)
		}
	}
}

func TestParseForwardTarget(t *testing.T) {
	u, host, port, err := ParseForwardTarget("HTTP://Example.com:8080/p/a?q=secret#frag")
	if err != nil {
		t.Fatal(err)
	}
	if host != "Example.com" || port != 8080 || u.Scheme != "http" || u.Path != "/p/a" || u.RawQuery != "q=secret" {
		t.Fatalf("got %v %q %d", u, host, port)
	}
	if _, host, port, err = ParseForwardTarget("http://[2001:db8::1]/"); err != nil || host != "2001:db8::1" || port != 80 {
		t.Fatalf("v6: %q %d %v", host, port, err)
	}
	for in, want := range map[string]string{
		"https://example.com/":        "https://",
		"HTTPS://example.com/":        "https://",
		"/index.html":                 "origin-form",
		"*":                           "origin-form",
		"ftp://example.com/":          "absolute http://",
		"example.com:80":              "absolute http://",
		"http://user:pw@example.com/": "userinfo",
		"http:///path":                "no host",
		"http://example.com:0/":       "not in 1..65535",
		"http://example.com:/":        "not in 1..65535",
		"http://example.com:http/":    "valid URL",
	} {
		_, _, _, err := ParseForwardTarget(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseForwardTarget(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestRequestFraming(t *testing.T) {
	parse := func(s string) *Head {
		t.Helper()
		h, err := ParseHead([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	fr, err := requestFraming(parse("POST http://a/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"))
	if err != nil || fr.length != 5 || fr.chunked {
		t.Fatalf("repeated equal Content-Length: %+v %v", fr, err)
	}
	fr, err = requestFraming(parse("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\nExpect: 100-continue\r\n\r\n"))
	if err != nil || !fr.chunked || !fr.expect100 {
		t.Fatalf("chunked: %+v %v", fr, err)
	}
	for name, in := range map[string]string{
		"te and cl":           "POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"gzip, chunked":       "POST http://a/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"chunked twice":       "POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"te on http/1.0":      "POST http://a/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		"conflicting cl":      "POST http://a/ HTTP/1.1\r\nContent-Length: 3, 4\r\n\r\n",
		"negative cl":         "POST http://a/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
		"huge cl":             "POST http://a/ HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"empty cl":            "POST http://a/ HTTP/1.1\r\nContent-Length:\r\n\r\n",
		"unknown expectation": "POST http://a/ HTTP/1.1\r\nExpect: magic\r\n\r\n",
	} {
		if fr, err := requestFraming(parse(in)); err == nil {
			t.Errorf("%s: accepted as %+v", name, fr)
		}
	}
}

// FuzzParseHead checks that the head parser never panics, that whatever
// it accepts is consistent (the request line round-trips, no field
// carries a control character or a line break), and that an accepted
// head is accepted again when re-serialised.
func FuzzParseHead(f *testing.F) {
	for _, s := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"GET http://example.com/a?b=c HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: Basic eA==\r\n\r\n",
		"POST http://example.com/ HTTP/1.0\nContent-Length: 3\n\n",
		"GET http://a/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
		"\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHead(b)
		if err != nil {
			if _, ok := err.(*HeadError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if !isToken(h.Method) || strings.ContainsAny(h.Target, " \r\n\t") || (h.Proto != "HTTP/1.1" && h.Proto != "HTTP/1.0") {
			t.Fatalf("accepted a bad request line: %q %q %q", h.Method, h.Target, h.Proto)
		}
		var sb strings.Builder
		sb.WriteString(h.Method + " " + h.Target + " " + h.Proto + "\r\n")
		for _, fl := range h.Fields {
			if strings.ContainsAny(fl.Name+fl.Value, "\r\n\x00") || fl.Name == "" {
				t.Fatalf("accepted a bad field %q: %q", fl.Name, fl.Value)
			}
			sb.WriteString(fl.Name + ": " + fl.Value + "\r\n")
		}
		sb.WriteString("\r\n")
		h2, err := ParseHead([]byte(sb.String()))
		if err != nil {
			t.Fatalf("re-serialised head rejected: %v\n%q", err, sb.String())
		}
		if h2.Method != h.Method || h2.Target != h.Target || len(h2.Fields) != len(h.Fields) {
			t.Fatalf("round trip changed the head: %+v vs %+v", h, h2)
		}
		// The CONNECT and forward target parsers must not panic either.
		ParseAuthority(h.Target)
		ParseForwardTarget(h.Target)
	})
}
