package ocsf_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// fixedSource is a Source with a pinned clock, used by every example.
func fixedSource() *ocsf.Source {
	s := &ocsf.Source{
		Sandbox:        "sbx-3f9a2c",
		Component:      "sandbox-supervisor",
		ProductVersion: "0.1.0",
		KernelRelease:  "6.18.0",
		Labels:         []string{"kind:task", "agent:agent-7"},
		Now:            func() time.Time { return time.UnixMilli(1767225600123) },
	}
	return s
}

func agentActor() *ocsf.Actor {
	return &ocsf.Actor{Process: &ocsf.Process{
		PID:  4242,
		Name: "curl",
		File: ocsf.ExeFile("/usr/bin/curl", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
		User: &ocsf.User{UID: "10001", Name: "sandbox", TypeID: ocsf.UserTypeUser},
		ParentProcess: &ocsf.Process{
			PID: 4200, Name: "bash", File: ocsf.ExeFile("/usr/bin/bash", ""),
			ParentProcess: &ocsf.Process{PID: 1, Name: "sandbox-init"},
		},
	}}
}

func conn() ocsf.Conn {
	return ocsf.Conn{
		Src:   &ocsf.NetworkEndpoint{IP: "10.200.0.2", Port: 40522},
		Dst:   &ocsf.NetworkEndpoint{Hostname: "api.example.com", IP: "198.51.100.7", Port: 443},
		Actor: agentActor(),
	}
}

// Examples returns one event per constructor, named as in docs/events.md.
func examples() []struct {
	Name string
	Ev   ocsf.Event
} {
	s := fixedSource()
	p := fixedSource() // the proxy's events
	p.Component = "egress-proxy"
	policySync := fixedSource()
	policySync.Component = "policy-sync"
	policy := ocsf.PolicyRef{Name: "openshell-policy.yaml", Path: "/root/.mac/openshell-policy.yaml",
		SHA256: "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8", Version: "1", Source: "home"}
	rule := &ocsf.FirewallRule{Name: "github", UID: "network_policies.github.endpoints[0]", Type: "egress-policy"}
	deny := &ocsf.FirewallRule{Name: "default-deny", UID: "default", Type: "egress-policy"}
	initActor := ocsf.Actor{AppName: "sandbox-supervisor", Process: &ocsf.Process{PID: 1, Name: "palisade-init"}}
	cmd := ocsf.Process{PID: 2, Name: "sh", File: ocsf.ExeFile("/usr/bin/sh", ""),
		User: &ocsf.User{UID: "10001", Name: "sandbox", TypeID: ocsf.UserTypeUser}}
	u, _ := url.Parse("http://user:pw@files.example.com/pub/data.tar.gz?token=SECRET#frag")
	kept := policy
	// Finding uids are random; pin them so the documented examples are stable.
	pin := func(e *ocsf.DetectionFinding, uid string) *ocsf.DetectionFinding {
		e.FindingInfo.UID = uid
		return e
	}
	return []struct {
		Name string
		Ev   ocsf.Event
	}{
		{"process-launch", s.ProcessLaunch(cmd, initActor)},
		{"process-terminate", s.ProcessTerminate(cmd, initActor, ocsf.Exit{Code: 137, Signal: 9})},
		{"policy-load", s.PolicyLoaded(policy, false)},
		{"policy-reload-rejected", p.PolicyRejected(&kept, "aa11", errors.New(`network_policies.github.endpoints[0].host: empty host`))},
		{"policy-proposal-approved", policySync.PolicyProposal(ocsf.ProposalInfo{Stage: ocsf.ProposalApproved, Base: policy,
			ResultSHA256: "9f2b5c1d0e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c", File: "/root/proposal.yaml",
			Operations: 3, Answered: 5, Unanswered: 1}, nil)},
		{"endpoint-status", p.EndpointStatus(ocsf.EndpointStatusInfo{ID: "mcp.endpoints[0]", Entry: "mcp", Address: "tools.example.com:443",
			Protocol: "rest", Result: "upstream_rejected", ObservedAt: time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)})},
		{"confinement-applied", s.ConfinementApplied(ocsf.Confinement{
			Landlock:   &ocsf.LandlockState{ABI: 7, Mode: "hard_requirement", ReadOnlyRules: 9, ReadWriteRules: 2, Scopes: []string{"abstract_unix_socket", "signal"}},
			Seccomp:    &ocsf.SeccompState{Mode: "filter", Instructions: 212, AllThreads: true},
			Namespaces: []string{"mount", "pid", "ipc", "uts", "net", "cgroup"},
			Cgroup:     &ocsf.CgroupState{Version: "v1", Path: "/sys/fs/cgroup/pids/palisade/sbx-3f9a2c", PidsMax: 2048},
			Identity:   &ocsf.IdentityState{UID: 10001, GID: 10001, NoNewPrivs: true},
		}, &policy)},
		{"finding-degraded", pin(s.DegradedRun("seccomp", "--allow-degraded given; seccomp filter mode unavailable"), "sbx-3f9a2c:degraded:5b1e0c9d2f3a4b67")},
		{"finding-bypass", pin(p.BypassAttempt(ocsf.Conn{
			Src: &ocsf.NetworkEndpoint{IP: "10.200.0.2", Port: 40600},
			Dst: &ocsf.NetworkEndpoint{IP: "198.51.100.9", Port: 22}, Actor: agentActor()}, "direct TCP connect captured by the fence"),
			"sbx-3f9a2c:bypass:0e7d4c1a9b8f2e35")},
		{"finding-identity", pin(p.IdentityMismatch(agentActor(), "/usr/bin/curl",
			"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			"60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"),
			"sbx-3f9a2c:identity:7c2a9e4f0d1b3856")},
		{"finding-credential", pin(p.CredentialMisuse(ocsf.Conn{
			Src: &ocsf.NetworkEndpoint{IP: "10.200.0.2", Port: 40622},
			Dst: &ocsf.NetworkEndpoint{Hostname: "pastebin.example.com", IP: "198.51.100.23", Port: 443}, Actor: agentActor()},
			"credential_endpoint_mismatch"), "sbx-3f9a2c:credential:3d6f1a0b9c2e4875")},
		{"credentials-reload-revoked", p.CredentialsRevoked(ocsf.CredentialsRef{Path: "/etc/palisade/credentials.yaml", Generation: 3},
			errors.New(`credentials file /etc/palisade/credentials.yaml: invalid credentials file: providers.openai.credentials.OPENAI_API_KEY.env (line 6): environment variable OPS_OPENAI_KEY is not set`))},
		{"network-open-allowed", p.NetworkOpen(conn(), ocsf.Decision{Allowed: true, Rule: rule})},
		{"network-open-denied", p.NetworkOpen(conn(), ocsf.Decision{Rule: deny, Code: "policy_denied", Reason: "no network policy allows api.example.com:443 for /usr/bin/curl"})},
		{"network-refuse", p.NetworkRefuse(ocsf.Conn{
			Src: &ocsf.NetworkEndpoint{IP: "10.200.0.2", Port: 40600},
			Dst: &ocsf.NetworkEndpoint{IP: "198.51.100.9", Port: 22}, Actor: agentActor()},
			ocsf.Decision{Rule: &ocsf.FirewallRule{Name: "fence", UID: "fence", Type: "nftables-fence"}, Reason: "connection bypassed the proxy"})},
		{"network-fail", p.NetworkFail(conn(), rule, "upstream_connect_failed", errors.New("dial 198.51.100.7:443: connection refused"))},
		{"network-client-gone", p.NetworkAbandoned(ocsf.Conn{
			Src: &ocsf.NetworkEndpoint{IP: "10.200.0.2", Port: 40512},
			Dst: &ocsf.NetworkEndpoint{Hostname: "api.example.com", Port: 443}}, "client_gone", "client_closed_before_attribution")},
		{"http-allowed", p.HTTPRequest(conn(), ocsf.Request{Method: "GET", URL: u, Version: "HTTP/1.1", Status: 200},
			ocsf.Decision{Allowed: true, Rule: rule})},
		{"file-denied", s.FileDenied(ocsf.FileDenial{
			ActivityID: ocsf.FileRead, Verb: "read", Rights: []string{"fs.read_file"}, Domain: "1e7a7a6b6",
			Target: ocsf.File{Name: "shadow", Path: "/etc/shadow", TypeID: ocsf.FileTypeRegular},
			Actor:  ocsf.Actor{Process: &ocsf.Process{PID: 4242, Name: "cat", File: ocsf.ExeFile("/usr/bin/cat", ""), Sandbox: "sbx-3f9a2c"}},
			Policy: &policy})},
		{"denial-logging-unavailable", s.DenialLogging(false, "audit netlink unavailable: operation not permitted")},
		{"http-denied", p.HTTPRequest(conn(), ocsf.Request{Method: "POST", URL: u, Version: "HTTP/1.1", Status: 403},
			ocsf.Decision{Rule: deny, Code: "policy_denied", Reason: "POST not allowed by rules"})},
	}
}

func decode(t *testing.T, ev ocsf.Event) map[string]any {
	t.Helper()
	line, err := ocsf.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(line), "\n") {
		t.Fatal("marshalled event contains a newline")
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConstructorInvariants(t *testing.T) {
	for _, ex := range examples() {
		t.Run(ex.Name, func(t *testing.T) {
			m := decode(t, ex.Ev)
			class := int(m["class_uid"].(float64))
			act := int(m["activity_id"].(float64))
			if got := int64(m["type_uid"].(float64)); got != int64(class)*100+int64(act) {
				t.Errorf("type_uid %d, class %d activity %d", got, class, act)
			}
			info := ocsf.Classes()[class]
			if m["class_name"] != info.Name || int(m["category_uid"].(float64)) != info.CategoryUID {
				t.Errorf("class/category %v/%v, want %+v", m["class_name"], m["category_uid"], info)
			}
			if m["time"].(float64) != 1767225600123 {
				t.Errorf("time %v, want epoch ms 1767225600123", m["time"])
			}
			md := m["metadata"].(map[string]any)
			if md["version"] != "1.8.0" || md["uid"] != "sbx-3f9a2c" {
				t.Errorf("metadata %v", md)
			}
			if p := md["product"].(map[string]any); p["name"] != "Palisade" {
				t.Errorf("product %v", p)
			}
			dev := m["device"].(map[string]any)
			if dev["type_id"].(float64) != 99 || dev["type"] != "Sandbox" {
				t.Errorf("device %v", dev)
			}
			if os := dev["os"].(map[string]any); os["name"] != "Linux" || os["type_id"].(float64) != 200 {
				t.Errorf("device.os %v", os)
			}
			if strings.Contains(mustJSON(t, m), "SECRET") || strings.Contains(mustJSON(t, m), "pw@") {
				t.Error("event carries a secret from the URL")
			}
			// Profiles are declared exactly when their attributes appear.
			var profiles []string
			for _, p := range asSlice(md["profiles"]) {
				profiles = append(profiles, p.(string))
			}
			_, hasAction := m["action_id"]
			_, hasPolicy := m["policy"]
			_, hasRule := m["firewall_rule"]
			if sc := hasAction || hasPolicy || hasRule; sc != slices.Contains(profiles, "security_control") {
				t.Errorf("security_control attributes %v but profiles %v", sc, profiles)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func TestMarshalRejectsBrokenInvariants(t *testing.T) {
	s := fixedSource()
	cases := map[string]func() ocsf.Event{
		"no time": func() ocsf.Event {
			e := s.PolicyLoaded(ocsf.PolicyRef{Name: "p"}, false)
			e.Time = 0
			return e
		},
		"wrong version": func() ocsf.Event {
			e := s.PolicyLoaded(ocsf.PolicyRef{Name: "p"}, false)
			e.Metadata.Version = "1.7.0"
			return e
		},
		"wrong class": func() ocsf.Event {
			e := s.PolicyLoaded(ocsf.PolicyRef{Name: "p"}, false)
			e.ClassUID = ocsf.ClassNetworkActivity
			return e
		},
		"undefined activity": func() ocsf.Event {
			e := s.NetworkOpen(conn(), ocsf.Decision{Allowed: true})
			e.ActivityID = 42
			return e
		},
		"Other without label": func() ocsf.Event {
			e := s.PolicyLoaded(ocsf.PolicyRef{Name: "p"}, false)
			e.ActivityName = ""
			return e
		},
		"undefined severity": func() ocsf.Event {
			e := s.NetworkOpen(conn(), ocsf.Decision{Allowed: true})
			e.SeverityID = 7
			return e
		},
		"undefined disposition": func() ocsf.Event {
			e := s.NetworkOpen(conn(), ocsf.Decision{Allowed: true})
			e.DispositionID = 500
			return e
		},
		"network without endpoints": func() ocsf.Event {
			return s.NetworkOpen(ocsf.Conn{}, ocsf.Decision{})
		},
		"http without request or response": func() ocsf.Event {
			e := s.HTTPRequest(conn(), ocsf.Request{Method: "GET"}, ocsf.Decision{})
			e.HTTPRequest, e.HTTPResponse = nil, nil
			return e
		},
		"finding without uid": func() ocsf.Event {
			e := s.DegradedRun("seccomp", "x")
			e.FindingInfo.UID = ""
			return e
		},
		"process without actor": func() ocsf.Event {
			return s.ProcessLaunch(ocsf.Process{PID: 3}, ocsf.Actor{})
		},
		"bad file type": func() ocsf.Event {
			e := s.ProcessLaunch(ocsf.Process{PID: 3, File: &ocsf.File{Name: "x", TypeID: 77}}, ocsf.Actor{AppName: "a"})
			return e
		},
		"parent cycle": func() ocsf.Event {
			p := &ocsf.Process{PID: 3}
			p.ParentProcess = p
			return s.ProcessLaunch(*p, ocsf.Actor{AppName: "a"})
		},
	}
	for name, build := range cases {
		if _, err := ocsf.Marshal(build()); err == nil {
			t.Errorf("%s: Marshal accepted the event", name)
		}
	}
	if _, err := ocsf.Marshal(nil); err == nil {
		t.Error("Marshal(nil) succeeded")
	}
}

func TestHTTPMethodMapping(t *testing.T) {
	s := fixedSource()
	u, _ := url.Parse("http://example.com/")
	for method, want := range map[string]int{"GET": ocsf.HTTPGet, "post": ocsf.HTTPPost, "PATCH": ocsf.HTTPPatch, "PROPFIND": ocsf.HTTPOther, "bad method\r\n": ocsf.HTTPOther} {
		m := decode(t, s.HTTPRequest(conn(), ocsf.Request{Method: method, URL: u}, ocsf.Decision{Allowed: true}))
		if int(m["activity_id"].(float64)) != want {
			t.Errorf("%q: activity_id %v, want %d", method, m["activity_id"], want)
		}
		req := m["http_request"].(map[string]any)
		_, hasMethod := req["http_method"]
		if (want == ocsf.HTTPOther) == hasMethod {
			t.Errorf("%q: http_method present=%v", method, hasMethod)
		}
		if want == ocsf.HTTPOther && strings.ContainsAny(m["activity_name"].(string), " \r\n") {
			t.Errorf("%q: activity_name %q not sanitised", method, m["activity_name"])
		}
	}
}
