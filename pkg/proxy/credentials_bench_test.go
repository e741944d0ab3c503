package proxy

import (
	"net/http"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/l7"
)

// BenchmarkPrepareOutgoing is the request preparation alone (what an
// admitted request pays for credentials, outgoing.go) on a proxy holding
// credentials: a request without a placeholder (the scan of its header
// values and query) against the same request whose Authorization holds
// one (the scan, the resolver, the value written in, the scrubber). Both
// include cloning the request's header, as the relay does. The
// difference is the cost of a placeholder; scripts/bench/inspect.sh
// gives the whole request's (keep-alive, CPU per request) beside it.
func BenchmarkPrepareOutgoing(b *testing.B) {
	const port = 443
	src := &credSource{text: credFile(credSecret, port)}
	env := newEnv(b, `version: 1
network_policies:
  api:
    endpoints:
      - host: allowed.test
        port: 443
        protocol: rest
        access: full
    binaries:
      - path: /usr/bin/curl
`, func(c *Config) { c.Credentials, c.CredentialsPath = src.load, "/etc/palisade/credentials.yaml" })
	path, err := l7.ParsePath("/v1/chat/completions")
	if err != nil {
		b.Fatal(err)
	}
	base := http.Header{
		"Content-Type": {"application/json"}, "Accept": {"application/json"}, "User-Agent": {"curl/8.14.1"},
		"Authorization": {"Bearer not-a-placeholder-0123456789"}, "X-Request-Id": {"6f1c2a9e-4b7d-4e55-9d1a-2f3b4c5d6e7f"},
	}
	for _, c := range []struct{ name, auth string }{
		{"without", "Bearer not-a-placeholder-0123456789"},
		{"placeholder", "Bearer " + credentials.Placeholder(credKey)},
	} {
		b.Run(c.name, func(b *testing.B) {
			h0 := base.Clone()
			h0.Set("Authorization", c.auth)
			b.ReportAllocs()
			for range b.N {
				o := &outgoing{method: "POST", host: "allowed.test", port: port, hostHeader: "allowed.test", path: path.Escaped,
					query: "stream=false", header: h0.Clone(), paths: pathReadings(&path)}
				if rf := env.p.prepareOutgoing(o); rf != nil {
					b.Fatalf("refused: %+v", rf)
				}
				if c.name == "placeholder" && o.header.Get("Authorization") != "Bearer "+credSecret {
					b.Fatalf("not resolved: %q", o.header.Get("Authorization"))
				}
			}
		})
	}
}
