package decision_test

import (
	"fmt"

	"github.com/palisade-sandbox/palisade/pkg/decision"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

func Example() {
	p, err := policy.Parse([]byte(`
version: 1
network_policies:
  github:
    endpoints:
      - {host: github.com, port: 443}
      - {host: "*.githubusercontent.com", port: 443}
    binaries:
      - path: /usr/bin/git
`))
	if err != nil {
		panic(err)
	}
	eng, err := decision.Compile(p, 1)
	if err != nil {
		panic(err)
	}
	for _, req := range []decision.Request{
		{Host: "GitHub.com.", Port: 443, Binary: "/usr/bin/ssh", Ancestors: []string{"/usr/bin/git"}},
		{Host: "raw.githubusercontent.com", Port: 443, Binary: "/usr/bin/python3"},
		{Host: "github.com", Port: 80, Binary: "/usr/bin/git"},
		{Host: "0x7f.1", Port: 443, Binary: "/usr/bin/git"},
	} {
		r := eng.Decide(req)
		fmt.Println(r.Host, r.Allowed, r.Reason, r.Entry, r.Scope().ExactHost)
	}
	// Output:
	// github.com true none github true
	// raw.githubusercontent.com false binary_not_allowed github false
	// github.com false port_not_allowed github true
	// 127.0.0.1 false no_matching_endpoint  false
}
