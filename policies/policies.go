// Package policies embeds the policy files shipped with Palisade, so every
// binary carries them: DefaultPolicy, the bundled fail-closed lockdown that
// applies when no other policy is configured, and MacHermesTemplate, the
// operator template with __PLACEHOLDER__ tokens that `policy-sync render`
// fills in. The files live beside this package (go:embed cannot reach
// parent directories); pkg/policy parses and validates them.
package policies

import _ "embed"

// DefaultPolicyFile and MacHermesTemplateFile are the embedded file names.
const (
	DefaultPolicyFile     = "default-policy.yaml"
	MacHermesTemplateFile = "mac-hermes-policy.yaml"
)

// DefaultPolicy is policies/default-policy.yaml.
//
//go:embed default-policy.yaml
var DefaultPolicy []byte

// MacHermesTemplate is policies/mac-hermes-policy.yaml.
//
//go:embed mac-hermes-policy.yaml
var MacHermesTemplate []byte
