package credentials

import (
	"fmt"
	"slices"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// CheckPolicy checks a policy against the credentials file f (nil: none
// is configured). Every credential_binding must name a provider of f
// that lists no endpoints of its own; and a placeholder must not be
// bound where it cannot be resolved: a policy endpoint that admits a
// provider's endpoint (host and port overlap) without inspecting its
// CONNECT tunnels (policy.Endpoint.Inspected) is refused unless it sets
// allow_uninspected_credentials. The error is an Errors naming policy
// fields; nil when the policy and the credentials agree.
func CheckPolicy(p *policy.Policy, f *File) error {
	var errs Errors
	for _, name := range sortedKeys(p.NetworkPolicies) {
		np := p.NetworkPolicies[name]
		for i, e := range np.Endpoints {
			path := fmt.Sprintf("%s.endpoints[%d]", entryPath(name), i)
			if fe := checkBinding(e, f, path); fe != nil {
				errs = append(errs, fe)
			}
			if fe := checkInspected(e, f, path); fe != nil {
				errs = append(errs, fe)
			}
			if fe := checkSigning(e, f, path); fe != nil {
				errs = append(errs, fe)
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

func entryPath(key string) string {
	if policy.ProviderNameRE().MatchString(key) && !strings.Contains(key, ".") {
		return "network_policies." + key
	}
	return fmt.Sprintf("network_policies[%q]", key)
}

func checkBinding(e *policy.Endpoint, f *File, path string) *FieldError {
	if e.CredentialBinding == nil {
		return nil
	}
	name := e.CredentialBinding.Provider
	path += ".credential_binding.provider"
	if f == nil {
		return &FieldError{Path: path, Msg: fmt.Sprintf("binds provider %s, but no credentials file is loaded (--credentials FILE)", name)}
	}
	prov, ok := f.Providers[name]
	switch {
	case !ok:
		return &FieldError{Path: path, Msg: fmt.Sprintf("the credentials file has no provider %s", name)}
	case len(prov.Endpoints) > 0:
		return &FieldError{Path: path, Msg: fmt.Sprintf("provider %s lists its own endpoints in the credentials file; credential_binding binds only a provider that lists none", name)}
	}
	return nil
}

// checkInspected refuses an uninspected policy endpoint that admits an
// endpoint a provider's credentials are bound to.
func checkInspected(e *policy.Endpoint, f *File, path string) *FieldError {
	if f == nil || e.Inspected() || e.AllowUninspectedCredentials {
		return nil
	}
	for _, name := range sortedKeys(f.Providers) {
		for _, pe := range f.Providers[name].Endpoints {
			if !overlaps(e, pe) {
				continue
			}
			what := "does not inspect its CONNECT tunnels (no protocol: rest)"
			switch {
			case e.Protocol == policy.ProtocolTCP:
				what = "relays protocol tcp connections it never reads"
			case e.TLS == policy.TLSSkip:
				what = "does not inspect its CONNECT tunnels (tls: skip)"
			}
			return &FieldError{Path: path, Msg: fmt.Sprintf(
				"admits %s:%s, where provider %s's credentials are bound, but %s: their placeholders cannot be resolved there; set protocol: rest, or allow_uninspected_credentials: true to accept that they travel unresolved",
				pe.Host, portList(pe.Ports), name, what)}
		}
	}
	return nil
}

// overlaps reports whether a policy endpoint may admit requests to a
// provider's endpoint: a shared port and hosts that may both match one
// name.
func overlaps(e *policy.Endpoint, pe Endpoint) bool {
	shared := false
	for _, p := range pe.Ports {
		if e.HasPort(p) {
			shared = true
			break
		}
	}
	if !shared {
		return false
	}
	hp := e.HostPattern()
	if hp == nil {
		return false // hostless: admits addresses only, never a provider's name
	}
	return hostsMeet(hp, pe.Host)
}

// hostsMeet reports whether two host patterns may match one host: a
// literal is matched by the other pattern; two wildcards are compared
// through a name each could match.
func hostsMeet(a, b *policy.HostPattern) bool {
	switch {
	case !a.IsWildcard():
		return b.Match(a.String())
	case !b.IsWildcard():
		return a.Match(b.String())
	}
	return a.Match(sample(b)) || b.Match(sample(a))
}

// sample is a name a wildcard pattern matches: its first label with
// every '*' made "x" ("**" counts as one label).
func sample(p *policy.HostPattern) string {
	s := p.String()
	first, rest, _ := strings.Cut(s, ".")
	first = strings.ReplaceAll(strings.ReplaceAll(first, "**", "x"), "*", "x")
	return first + "." + rest
}

func portList(ports []int) string {
	ps := slices.Clone(ports)
	slices.Sort(ps)
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, p)
	}
	return b.String()
}

// checkSigning: a credential_signing endpoint must have AWS credentials
// bound to it (seed 004: the policy does not activate without a
// source): a provider with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
// named by its credential_binding, or whose endpoints meet it.
func checkSigning(e *policy.Endpoint, f *File, path string) *FieldError {
	if e.CredentialSigning == "" {
		return nil
	}
	path += ".credential_signing"
	if f == nil {
		return &FieldError{Path: path, Msg: "needs AWS credentials, but no credentials file is loaded (--credentials FILE)"}
	}
	if e.CredentialBinding != nil {
		if p, ok := f.Providers[e.CredentialBinding.Provider]; ok && !hasAWS(p) {
			return &FieldError{Path: path, Msg: fmt.Sprintf("provider %s holds no AWS credentials (%s and %s)", p.Name, KeyAWSAccessKeyID, KeyAWSSecretAccessKey)}
		}
		return nil // a missing provider is checkBinding's
	}
	for _, name := range sortedKeys(f.Providers) {
		p := f.Providers[name]
		if !hasAWS(p) {
			continue
		}
		for _, pe := range p.Endpoints {
			if overlaps(e, pe) {
				return nil
			}
		}
	}
	return &FieldError{Path: path, Msg: fmt.Sprintf("no AWS credentials are bound to this endpoint: bind a provider holding %s and %s with credential_binding, or list the endpoint in such a provider's endpoints", KeyAWSAccessKeyID, KeyAWSSecretAccessKey)}
}
