package policy

import (
	"strings"
	"testing"
)

// credential_binding and allow_uninspected_credentials: decoded, in the
// canonical form (and so the checksum), refused where no placeholder
// could be resolved.
func TestCredentialFields(t *testing.T) {
	p, err := Parse([]byte(withEndpoint("host: api.example.com", "port: 443", "protocol: rest", "access: full",
		"credential_binding: {provider: svc.prod}")))
	if err != nil {
		t.Fatal(err)
	}
	ep := p.NetworkPolicies["e"].Endpoints[0]
	if ep.CredentialBinding == nil || ep.CredentialBinding.Provider != "svc.prod" || !ep.Inspected() {
		t.Fatalf("endpoint %+v", ep)
	}
	if !strings.Contains(string(p.Canonical()), `"credential_binding":{"provider":"svc.prod"}`) {
		t.Errorf("canonical form lacks the binding: %s", p.Canonical())
	}
	c := p.Clone()
	c.NetworkPolicies["e"].Endpoints[0].CredentialBinding.Provider = "other"
	if ep.CredentialBinding.Provider != "svc.prod" {
		t.Error("Clone shares the binding")
	}
	if c.Checksum() == p.Checksum() {
		t.Error("the binding is not in the checksum")
	}
	rw, err := Parse([]byte(withEndpoint("host: api.example.com", "port: 443", "protocol: rest", "access: full", "request_body_credential_rewrite: true")))
	if err != nil || !rw.NetworkPolicies["e"].Endpoints[0].RequestBodyCredentialRewrite || !strings.Contains(string(rw.Canonical()), `"request_body_credential_rewrite":true`) {
		t.Errorf("body rewrite: %v", err)
	}
	ws, err := Parse([]byte(withEndpoint("host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{exact: a}]}", "websocket_credential_rewrite: true")))
	if err != nil || !ws.NetworkPolicies["e"].Endpoints[0].WebSocketCredentialRewrite || !strings.Contains(string(ws.Canonical()), `"websocket_credential_rewrite":true`) {
		t.Errorf("websocket rewrite: %v", err)
	}
	sg, err := Parse([]byte(withEndpoint("host: minio.example.com", "port: 9000", "protocol: rest", "access: full",
		"credential_signing: sigv4:no_body", "signing_service: s3", "signing_region: auto")))
	if err != nil {
		t.Fatal(err)
	}
	if se := sg.NetworkPolicies["e"].Endpoints[0]; se.CredentialSigning != SigningSigV4NoBody || se.SigningService != "s3" || se.SigningRegion != "auto" ||
		!strings.Contains(string(sg.Canonical()), `"credential_signing":"sigv4:no_body","signing_service":"s3","signing_region":"auto"`) {
		t.Errorf("signing fields: %+v %s", se, sg.Canonical())
	}
	// Passthrough with the explicit acceptance loads.
	if _, err := Parse([]byte(withEndpoint("host: api.example.com", "port: 443",
		"credential_binding: {provider: svc}", "allow_uninspected_credentials: true"))); err != nil {
		t.Errorf("accepted passthrough: %v", err)
	}
	for _, tc := range []struct {
		name  string
		lines []string
		path  string
		msg   string
	}{
		{"passthrough", []string{"host: api.example.com", "port: 443", "credential_binding: {provider: svc}"}, ep0 + ".credential_binding", "cannot be resolved on this endpoint's CONNECT tunnels"},
		{"tls skip", []string{"host: api.example.com", "port: 443", "tls: skip", "credential_binding: {provider: svc}"}, ep0 + ".credential_binding", "the proxy does not inspect them"},
		{"tcp", []string{"host: db.example.com", "port: 5432", "protocol: tcp", "credential_binding: {provider: svc}"}, ep0 + ".credential_binding", "protocol tcp relays bytes"},
		{"tcp acceptance", []string{"host: db.example.com", "port: 5432", "protocol: tcp", "allow_uninspected_credentials: true"}, ep0 + ".allow_uninspected_credentials", "protocol tcp relays bytes"},
		{"no provider", []string{"host: api.example.com", "port: 443", "protocol: rest", "access: full", "credential_binding: {}"}, ep0 + ".credential_binding.provider", "is required"},
		{"bad provider", []string{"host: api.example.com", "port: 443", "protocol: rest", "access: full", "credential_binding: {provider: 'a b'}"}, ep0 + ".credential_binding.provider", "provider names are"},
		{"unknown key", []string{"host: api.example.com", "port: 443", "protocol: rest", "access: full", "credential_binding: {provider: a, env: X}"}, ep0 + ".credential_binding.env", `unknown key "env"`},
		{"not a bool", []string{"host: api.example.com", "port: 443", "allow_uninspected_credentials: yes-please"}, ep0 + ".allow_uninspected_credentials", "must be true or false"},
		{"body rewrite without rest", []string{"host: api.example.com", "port: 443", "request_body_credential_rewrite: true"}, ep0 + ".request_body_credential_rewrite", "bodies are read only on protocol: rest endpoints"},
		{"signing without rest", []string{"host: s3.us-east-1.amazonaws.com", "port: 443", "credential_signing: sigv4", "signing_service: s3"}, ep0 + ".credential_signing", "only on protocol: rest endpoints"},
		{"signing without service", []string{"host: s3.us-east-1.amazonaws.com", "port: 443", "protocol: rest", "access: full", "credential_signing: sigv4"}, ep0 + ".signing_service", "is required with credential_signing"},
		{"signing mode", []string{"host: s3.us-east-1.amazonaws.com", "port: 443", "protocol: rest", "access: full", "credential_signing: sigv2", "signing_service: s3"}, ep0 + ".credential_signing", "must be one of sigv4, sigv4:body, sigv4:no_body"},
		{"signing and body rewrite", []string{"host: s3.us-east-1.amazonaws.com", "port: 443", "protocol: rest", "access: full", "credential_signing: sigv4", "signing_service: s3", "request_body_credential_rewrite: true"}, ep0 + ".request_body_credential_rewrite", "mutually exclusive"},
		{"region without signing", []string{"host: s3.us-east-1.amazonaws.com", "port: 443", "protocol: rest", "access: full", "signing_region: us-east-1"}, ep0 + ".signing_region", "goes with credential_signing"},
		{"bad region", []string{"host: s3.example.com", "port: 443", "protocol: rest", "access: full", "credential_signing: sigv4", "signing_service: s3", "signing_region: US East"}, ep0 + ".signing_region", "must be an AWS region"},
		{"bad service", []string{"host: s3.example.com", "port: 443", "protocol: rest", "access: full", "credential_signing: sigv4", "signing_service: S3!"}, ep0 + ".signing_service", "must be an AWS service name"},
		{"signing on tcp", []string{"host: db.example.com", "port: 5432", "protocol: tcp", "credential_signing: sigv4"}, ep0 + ".credential_signing", "protocol tcp relays bytes"},
		{"websocket rewrite on rest", []string{"host: api.example.com", "port: 443", "protocol: rest", "access: full", "websocket_credential_rewrite: true"}, ep0 + ".websocket_credential_rewrite", "read only on protocol: websocket endpoints"},
		{"websocket rewrite not a bool", []string{"host: ws.example.com", "port: 443", "protocol: websocket", "websocket: {text: [{exact: a}]}", "websocket_credential_rewrite: 1"}, ep0 + ".websocket_credential_rewrite", "must be true or false"},
		{"websocket rewrite on tcp", []string{"host: db.example.com", "port: 5432", "protocol: tcp", "websocket_credential_rewrite: true"}, ep0 + ".websocket_credential_rewrite", "protocol tcp relays bytes"},
		{"body rewrite on tcp", []string{"host: db.example.com", "port: 5432", "protocol: tcp", "request_body_credential_rewrite: true"}, ep0 + ".request_body_credential_rewrite", "protocol tcp relays bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(withEndpoint(tc.lines...)))
			errs, ok := AsErrors(err)
			if !ok {
				t.Fatalf("accepted or not Errors: %v", err)
			}
			for _, fe := range errs {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					return
				}
			}
			t.Errorf("%v, want %s: ...%s...", err, tc.path, tc.msg)
		})
	}
}
