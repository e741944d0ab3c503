package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// A reserved variable is refused whatever its case: some clients read
// proxy variables case-insensitively (Python's urllib lowercases every
// *_proxy name), so Http_Proxy or No_Proxy set by --env would redirect or
// bypass the proxy the supervisor configured.
func TestReservedEnvRefusedInAnyCase(t *testing.T) {
	for _, kv := range []string{
		"Http_Proxy=http://198.51.100.1:3128", "hTTPS_PROXY=http://198.51.100.1:3128", "All_Proxy=socks5://198.51.100.1",
		"No_Proxy=*", "nO_pRoXy=*", "Ssl_Cert_File=/tmp/ca.pem", "node_extra_ca_certs=/tmp/ca.pem", "palisade_sandbox=other",
	} {
		if _, err := ExecEnv([]string{"PATH=/bin"}, []string{kv}); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("exec --env %s: %v, want refused as reserved", kv, err)
		}
		if _, err := BuildEnv(EnvInput{Workdir: "/w", Name: "t", Set: []string{kv}}); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("run --env %s: %v, want refused as reserved", kv, err)
		}
		name, _, _ := strings.Cut(kv, "=")
		if _, err := BuildEnv(EnvInput{Workdir: "/w", Name: "t", Host: []string{kv}, Passthrough: []string{name}}); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("--env-passthrough %s: %v, want refused as reserved", name, err)
		}
	}
	env, err := ExecEnv([]string{"PATH=/bin"}, []string{"GOPROXY=off", "proxy_user=me"})
	if err != nil || len(env) != 3 {
		t.Fatalf("unreserved names: %v %v", env, err)
	}
}

// A credential's key gets its placeholder (a reserved value), and neither
// the key nor the variable its value comes from can be passed through
// or set: the sandbox's environment never holds a value.
func TestCredentialNamesNeverPassThrough(t *testing.T) {
	in := EnvInput{Workdir: "/w", Name: "t", Host: []string{"OPS_TOKEN=real-value", "API_TOKEN=real-value"},
		Secrets:  []string{"API_TOKEN", "OPS_TOKEN"},
		Reserved: []string{"API_TOKEN=openshell:resolve:env:API_TOKEN"}}
	env, err := BuildEnv(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, "API_TOKEN=openshell:resolve:env:API_TOKEN") || strings.Contains(strings.Join(env, "\n"), "real-value") {
		t.Errorf("environment %v", env)
	}
	for _, name := range []string{"API_TOKEN", "OPS_TOKEN"} {
		p := in
		p.Passthrough = []string{name}
		if _, err := BuildEnv(p); err == nil || !strings.Contains(err.Error(), "--env-passthrough: "+name+" holds or names a credential") {
			t.Errorf("passthrough %s: %v", name, err)
		}
		s := in
		s.Set = []string{name + "=x"}
		if _, err := BuildEnv(s); err == nil || !strings.Contains(err.Error(), "--env "+name+": holds or names a credential") {
			t.Errorf("--env %s: %v", name, err)
		}
	}
}
