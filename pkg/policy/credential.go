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
// endpoint, CONNECT tunnels included (protocol rest: TLS terminated,
// requests decided one by one). Credential placeholders resolve only in
// requests the proxy sees; on any other endpoint's CONNECT tunnels they
// travel as they are.
func (e *Endpoint) Inspected() bool {
	return e.Protocol == ProtocolREST && e.TLS != TLSSkip
}

// credentialKeys are the endpoint keys of credential resolution.
var credentialKeys = []string{"credential_binding", "allow_uninspected_credentials", "request_body_credential_rewrite"}

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
	if f, ok := fields["credential_binding"]; ok && !e.Inspected() && !e.AllowUninspectedCredentials {
		d.errf(f.key, path+".credential_binding", "placeholders cannot be resolved on this endpoint's CONNECT tunnels: the proxy does not inspect them (set protocol: rest, or allow_uninspected_credentials: true to accept that they travel unresolved)")
	}
}
