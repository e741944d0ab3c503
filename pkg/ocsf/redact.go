package ocsf

import (
	"net/url"
	"strconv"
	"strings"
)

// RedactURL returns a copy of u without userinfo, query string or
// fragment: what an event may record of a request target. An opaque URL
// (mailto:..., or a scheme without //) keeps only its scheme. nil stays nil.
func RedactURL(u *url.URL) *url.URL {
	if u == nil {
		return nil
	}
	host := u.Host
	if i := strings.LastIndexByte(host, '@'); i >= 0 {
		host = host[i+1:] // a hand-built URL with credentials in Host
	}
	r := &url.URL{Scheme: u.Scheme, Host: host, Path: u.Path, RawPath: u.RawPath}
	if u.Opaque != "" {
		r = &url.URL{Scheme: u.Scheme}
	}
	if r.Host == "" && strings.HasPrefix(r.Path, "//") {
		// Without a host, "//x@y" would print as an authority with userinfo.
		r.Path, r.RawPath = "/"+strings.TrimLeft(r.Path, "/"), ""
	}
	return r
}

// RedactURLString redacts a raw request target. When raw does not parse,
// it falls back to cutting at the first '?' or '#' and, in every
// '/'-separated segment, dropping everything up to the last '@', so the
// result never carries a query, fragment or credentials either way.
func RedactURLString(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return RedactURL(u).String()
	}
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	segs := strings.Split(raw, "/")
	for i, s := range segs {
		if j := strings.LastIndexByte(s, '@'); j >= 0 {
			segs[i] = s[j+1:]
		}
	}
	return strings.Join(segs, "/")
}

// NewURL returns the OCSF url object for u, redacted by RedactURL: scheme,
// hostname, port (the scheme's default when absent for http and https),
// path ("/" when empty) and url_string. nil gives nil.
func NewURL(u *url.URL) *URL {
	if u == nil {
		return nil
	}
	r := RedactURL(u)
	o := &URL{Scheme: r.Scheme, Hostname: r.Hostname(), Path: r.EscapedPath()}
	if p, err := strconv.Atoi(r.Port()); err == nil && p > 0 && p <= 65535 {
		o.Port = p
	} else if r.Port() == "" {
		switch strings.ToLower(r.Scheme) {
		case "http":
			o.Port = 80
		case "https":
			o.Port = 443
		}
	}
	if o.Path == "" && r.Host != "" {
		o.Path = "/"
		r.Path = "/"
	}
	o.URLString = r.String()
	return o
}
