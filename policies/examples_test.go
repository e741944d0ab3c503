package policies_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Every example policy loads, and the package-manager examples grant
// exactly what their comments say: read-only inspected rules for the
// registry hosts, to the binaries that really connect. (pkg/sandboxnet's
// package-manager matrix runs them against the real registries.)
func TestExamplePolicies(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example policies: %v", err)
	}
	loaded := map[string]*policy.Policy{}
	for _, f := range files {
		p, err := policy.LoadFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		loaded[filepath.Base(f)] = p
	}
	for file, want := range map[string]struct {
		hosts    []string
		port     int
		binaries []string
	}{
		"npm.yaml":        {[]string{"registry.npmjs.org"}, 443, []string{"/usr/bin/node", "/usr/local/bin/node"}},
		"go-modules.yaml": {[]string{"proxy.golang.org", "sum.golang.org"}, 443, []string{"/usr/local/go/bin/go", "/usr/lib/go-*/bin/go"}},
		"apt.yaml":        {[]string{"deb.debian.org", "security.debian.org"}, 80, []string{"/usr/lib/apt/methods/http"}},
	} {
		p := loaded[file]
		if p == nil {
			t.Errorf("examples/%s is missing or invalid", file)
			continue
		}
		if len(p.NetworkPolicies) != 1 {
			t.Errorf("%s: %d network entries, want 1", file, len(p.NetworkPolicies))
		}
		for name, np := range p.NetworkPolicies {
			var hosts, bins []string
			for _, ep := range np.Endpoints {
				hosts = append(hosts, ep.Host)
				if ep.Protocol != policy.ProtocolREST || ep.Access != policy.AccessReadOnly || len(ep.Rules) > 0 ||
					ep.Enforcement != policy.EnforcementEnforce || !slices.Equal(ep.Ports, []int{want.port}) {
					t.Errorf("%s: %s endpoint %s is not an enforced read-only rest rule on port %d: %+v", file, name, ep.Host, want.port, ep)
				}
				if ok, _ := ep.CheckReading("PUT", "/x", nil, ""); ok {
					t.Errorf("%s: %s allows a PUT to %s", file, name, ep.Host)
				}
			}
			for _, b := range np.Binaries {
				bins = append(bins, b.Path)
			}
			slices.Sort(hosts)
			slices.Sort(bins)
			slices.Sort(want.binaries)
			if !slices.Equal(hosts, want.hosts) || !slices.Equal(bins, want.binaries) {
				t.Errorf("%s: %s reaches %q with %q, want %q with %q", file, name, hosts, bins, want.hosts, want.binaries)
			}
		}
	}
}
