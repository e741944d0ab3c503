package policy

import (
	"regexp"
	"sync"
)

// CredentialBinding binds the credentials of one provider of the
// credentials file (package credentials) to an endpoint: its
// placeholders resolve in requests this endpoint admits. Only a
// provider that lists no endpoints of its own may be bound this way
// (OpenShell's credential_binding.provider).
type CredentialBinding struct {
	Provider string `json:"provider" yaml:"provider"`
}

// ProviderNameRE is what a credentials provider's name must look like
// (the credentials file's providers keys, credential_binding.provider).
var ProviderNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) })

// Inspected reports whether the proxy sees every request to the
// endpoint, CONNECT tunnels included: protocol rest or websocket (or
// REST rules), and TLS not skipped. The proxy terminates such an
// endpoint's tunnels and hands each request to its protocol inspector.
// Credential placeholders resolve only in requests the proxy sees; on
// any other endpoint's CONNECT tunnels they travel as they are.
func (e *Endpoint) Inspected() bool {
	return (e.Protocol == ProtocolREST || e.Protocol == ProtocolWebSocket || e.L7()) && e.TLS != TLSSkip
}

// credentialKeys are the endpoint keys of credential resolution.
var credentialKeys = []string{"credential_binding", "allow_uninspected_credentials", "request_body_credential_rewrite",
	"websocket_credential_rewrite", "credential_signing", "signing_service", "signing_region"}

// credential_signing values (OpenShell's): sigv4 detects the payload mode
// from the client's x-amz-content-sha256; sigv4:body always signs the
// body; sigv4:no_body never does.
const (
	SigningSigV4       = "sigv4"
	SigningSigV4Body   = "sigv4:body"
	SigningSigV4NoBody = "sigv4:no_body"
)

var (
	signingServiceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,62}$`) })
	signingRegionRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`) })
)

// credentialFields decodes an endpoint's credential fields.
func (d *decoder) credentialFields(fields map[string]field, path string, e *Endpoint) {
	if f, ok := fields["allow_uninspected_credentials"]; ok {
		if b, ok := d.boolean(f.val, path+".allow_uninspected_credentials"); ok {
			e.AllowUninspectedCredentials = b
		}
	}
	if f, ok := fields["request_body_credential_rewrite"]; ok {
		if b, ok := d.boolean(f.val, path+".request_body_credential_rewrite"); ok {
			e.RequestBodyCredentialRewrite = b
		}
	}
	if f, ok := fields["websocket_credential_rewrite"]; ok {
		if b, ok := d.boolean(f.val, path+".websocket_credential_rewrite"); ok {
			e.WebSocketCredentialRewrite = b
		}
	}
	for _, k := range []struct {
		key string
		re  *regexp.Regexp
		dst *string
		msg string
	}{
		{"signing_service", signingServiceRE(), &e.SigningService, "an AWS service name such as s3, bedrock or sts"},
		{"signing_region", signingRegionRE(), &e.SigningRegion, "an AWS region such as us-east-1"},
	} {
		if f, ok := fields[k.key]; ok {
			if s, ok := d.str(f.val, path+"."+k.key); ok {
				if !k.re.MatchString(s) {
					d.errf(f.val, path+"."+k.key, "must be %s, not %q", k.msg, s)
				} else {
					*k.dst = s
				}
			}
		}
	}
	if f, ok := fields["credential_signing"]; ok {
		if s, ok := d.oneOf(f.val, path+".credential_signing", SigningSigV4, SigningSigV4Body, SigningSigV4NoBody); ok {
			e.CredentialSigning = s
		}
	}
	f, ok := fields["credential_binding"]
	if !ok {
		return
	}
	bp := path + ".credential_binding"
	bf, ok := d.mapping(f.val, bp, []string{"provider"})
	if !ok {
		return
	}
	pf, ok := bf["provider"]
	if !ok {
		d.errf(f.val, bp+".provider", "is required (the name of a provider in the credentials file)")
		return
	}
	s, ok := d.str(pf.val, bp+".provider")
	if !ok {
		return
	}
	if !ProviderNameRE().MatchString(s) {
		d.errf(pf.val, bp+".provider", "provider names are 1-64 characters of letters, digits, '_', '.', '-', starting with a letter or digit; not %q", s)
		return
	}
	e.CredentialBinding = &CredentialBinding{Provider: s}
}

// credentialCross checks the credential fields against the endpoint's
// protocol: placeholders resolve only where the proxy sees requests, so
// a binding on an endpoint whose CONNECT tunnels pass through unseen is
// refused unless allow_uninspected_credentials says the operator knows.
func (d *decoder) credentialCross(fields map[string]field, path string, e *Endpoint) {
	if e.Protocol == ProtocolTCP {
		for _, k := range credentialKeys {
			if f, ok := fields[k]; ok {
				d.errf(f.key, path+"."+k, "protocol tcp relays bytes it never reads: no credential placeholder can be resolved in them")
			}
		}
		return
	}
	if f, ok := fields["request_body_credential_rewrite"]; ok && e.RequestBodyCredentialRewrite && e.Protocol != ProtocolREST {
		d.errf(f.key, path+".request_body_credential_rewrite", "bodies are read only on protocol: rest endpoints")
	}
	if f, ok := fields["websocket_credential_rewrite"]; ok && e.WebSocketCredentialRewrite && e.Protocol != ProtocolWebSocket {
		d.errf(f.key, path+".websocket_credential_rewrite", "WebSocket messages are read only on protocol: websocket endpoints")
	}
	d.signingCross(fields, path, e)
	if f, ok := fields["credential_binding"]; ok && !e.Inspected() && !e.AllowUninspectedCredentials {
		d.errf(f.key, path+".credential_binding", "placeholders cannot be resolved on this endpoint's CONNECT tunnels: the proxy does not inspect them (set protocol: rest, or allow_uninspected_credentials: true to accept that they travel unresolved)")
	}
}

// signingCross checks credential_signing against the other fields: it
// needs protocol rest (requests are re-signed one by one) and a
// signing_service, excludes request_body_credential_rewrite (seed 004:
// a body rewritten after signing would not match its signature), and
// signing_service and signing_region mean nothing without it.
func (d *decoder) signingCross(fields map[string]field, path string, e *Endpoint) {
	f, signing := fields["credential_signing"]
	if !signing {
		for _, k := range []string{"signing_service", "signing_region"} {
			if g, ok := fields[k]; ok {
				d.errf(g.key, path+"."+k, "goes with credential_signing")
			}
		}
		return
	}
	if e.Protocol != ProtocolREST {
		d.errf(f.key, path+".credential_signing", "requests are re-signed only on protocol: rest endpoints")
	}
	if _, ok := fields["signing_service"]; !ok {
		d.errf(f.key, path+".signing_service", "is required with credential_signing (the AWS service signed for: s3, bedrock, sts, ...)")
	}
	if g, ok := fields["request_body_credential_rewrite"]; ok && e.RequestBodyCredentialRewrite {
		d.errf(g.key, path+".request_body_credential_rewrite", "and credential_signing are mutually exclusive: a body rewritten after signing would not match its signature")
	}
}
