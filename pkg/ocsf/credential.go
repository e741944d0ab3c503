package ocsf

import "fmt"

// The events of credential resolution (package credentials): none
// names a credential's key, placeholder or value.
const (
	// FindingTypeCredentialMisuse: a placeholder went to an endpoint
	// its credential is not bound to.
	FindingTypeCredentialMisuse = "Credential Misuse"
	ActivityCredentialsLoad     = "Credentials Load"
	ActivityCredentialsReload   = "Credentials Reload"
)

// CredentialsRef describes a set of credentials in force by its file and
// size only.
type CredentialsRef struct {
	Path        string `json:"path"`
	Credentials int    `json:"credentials"`
	Providers   int    `json:"providers"`
	Generation  int64  `json:"generation"`
}

// CredentialsLoaded is a Device Config State Change (5019) for
// credentials now in force: activity "Credentials Load" (or
// "Credentials Reload"), state Enabled, status Success; the file and the
// counts under unmapped.credentials.
func (s *Source) CredentialsLoaded(r CredentialsRef, reload bool) *ConfigStateChange {
	name, verb := ActivityCredentialsLoad, "loaded"
	if reload {
		name, verb = ActivityCredentialsReload, "reloaded"
	}
	e := s.configChange(name, SeverityInformational)
	e.StateID = StateEnabled
	e.StatusID = StatusSuccess
	e.Message = fmt.Sprintf("credentials %s from %s: %d from %d providers", verb, r.Path, r.Credentials, r.Providers)
	e.Unmapped = map[string]any{"credentials": r}
	return e
}

// CredentialsRevoked is a Device Config State Change (5019) for a reload
// of the credentials that failed: every credential is revoked until one
// succeeds (state Disabled, status Failure, severity High), the error in
// status_detail.
func (s *Source) CredentialsRevoked(r CredentialsRef, cause error) *ConfigStateChange {
	e := s.configChange(ActivityCredentialsReload, SeverityHigh)
	e.StateID = StateDisabled
	e.StatusID = StatusFailure
	if cause != nil {
		e.StatusDetail = cause.Error()
	}
	e.Message = fmt.Sprintf("credentials reload from %s failed: every credential is revoked until a reload succeeds", r.Path)
	e.Unmapped = map[string]any{"credentials": r}
	return e
}

// CredentialMisuse is a finding that a sandbox process sent a credential
// placeholder to an endpoint the credential is not bound to; the request
// was refused. reason is the refusal's (credential_endpoint_mismatch).
// Severity High; action Denied, disposition Blocked.
func (s *Source) CredentialMisuse(c Conn, reason string) *DetectionFinding {
	return s.connFinding(c, "credential", FindingTypeCredentialMisuse, "credential placeholder sent to %s, which it is not bound to", reason)
}
