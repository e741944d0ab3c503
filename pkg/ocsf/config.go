package ocsf

import (
	"fmt"
	"strings"
)

// PolicyType is policy.type for the sandbox policy.
const PolicyType = "openshell-sandbox-policy"

// PolicyRef identifies one policy generation.
type PolicyRef struct {
	Name       string // file name or hub name of the policy
	Path       string // where it was loaded from ("" for the bundled default)
	SHA256     string // hex checksum of the canonical form
	Version    string // policy version (hub version or schema version)
	Generation int64  // proxy reload generation, 0 when not applicable
	Source     string // "flag", "env", "home", "bundled", "hub", ...
}

// Object returns the OCSF policy object: uid "sha256:<hex>", the version,
// and path, generation and source under policy.data.
func (p PolicyRef) Object(applied bool) *Policy {
	o := &Policy{Name: p.Name, Version: p.Version, Type: PolicyType, IsApplied: boolPtr(applied)}
	if p.SHA256 != "" {
		o.UID = "sha256:" + p.SHA256
	}
	data := map[string]any{}
	if p.Path != "" {
		data["path"] = p.Path
	}
	if p.Generation != 0 {
		data["generation"] = p.Generation
	}
	if p.Source != "" {
		data["source"] = p.Source
	}
	if len(data) > 0 {
		o.Data = data
	}
	return o
}

func (s *Source) configChange(activityName string, severity int) *ConfigStateChange {
	e := &ConfigStateChange{Base: s.Base(ClassDeviceConfigStateChange, ConfigOther, severity)}
	e.ActivityName = activityName
	return e
}

// PolicyLoaded is a Device Config State Change (5019) for a policy that is
// now in force: activity "Policy Load" (or "Policy Reload" when reload),
// state Enabled, status Success, the policy under policy.
func (s *Source) PolicyLoaded(p PolicyRef, reload bool) *ConfigStateChange {
	name := ActivityPolicyLoad
	verb := "loaded"
	if reload {
		name, verb = ActivityPolicyReload, "reloaded"
	}
	e := s.configChange(name, SeverityInformational)
	e.StateID = StateEnabled
	e.StatusID = StatusSuccess
	e.Policy = p.Object(true)
	e.Message = fmt.Sprintf("policy %s %s (sha256 %s)", policyLabel(p), verb, short(p.SHA256))
	return e
}

// SendGuard is a Device Config State Change (5019) saying whether the
// egress proxy holds each decided connection to the process it was
// decided on (only it and its descendants may send on it afterwards,
// enforced in the kernel). degraded is why it cannot ("" when it does):
// severity Medium, status Failure, state Disabled, the reason in
// status_detail.
func (s *Source) SendGuard(degraded string) *ConfigStateChange {
	e := s.configChange(ActivitySendGuard, SeverityInformational)
	e.StateID = StateEnabled
	e.StatusID = StatusSuccess
	e.Message = "decided connections are held to their process (send guard)"
	if degraded != "" {
		e.SeverityID = SeverityMedium
		e.StateID = StateDisabled
		e.StatusID = StatusFailure
		e.StatusDetail = degraded
		e.Message = "send guard unavailable (degraded): " + degraded
	}
	return e
}

// AttributionBackend is a Device Config State Change (5019) naming the
// backend that attributes connections to sandbox processes ("bpf" or
// "proc"). fallback says the eBPF backend was wanted ("auto") but did not
// load: severity Low, status Failure, the reason in status_detail, and
// the /proc backend in force (state Enabled either way).
func (s *Source) AttributionBackend(backend string, fallback bool, reason string) *ConfigStateChange {
	e := s.configChange(ActivityAttributionBackend, SeverityInformational)
	e.StateID = StateEnabled
	e.StatusID = StatusSuccess
	e.Message = "connection attribution through " + backend
	if fallback {
		e.SeverityID = SeverityLow
		e.StatusID = StatusFailure
		e.StatusDetail = reason
		e.Message = "eBPF connection attribution unavailable; falling back to " + backend + ": " + reason
	}
	return e
}

// PolicyRejected is a Device Config State Change (5019) for a reload that
// failed: status Failure with the error in status_detail, severity Medium.
// kept is the last-known-good policy that stays in force (state Enabled);
// nil means none is in force (state Disabled). rejectedSHA256 identifies
// the refused file when it could be read.
func (s *Source) PolicyRejected(kept *PolicyRef, rejectedSHA256 string, cause error) *ConfigStateChange {
	e := s.configChange(ActivityPolicyReload, SeverityMedium)
	e.StatusID = StatusFailure
	if cause != nil {
		e.StatusDetail = cause.Error()
	}
	if kept != nil {
		e.StateID = StateEnabled
		e.Policy = kept.Object(true)
		e.Message = fmt.Sprintf("policy reload rejected; keeping last-known-good %s (sha256 %s)", policyLabel(*kept), short(kept.SHA256))
	} else {
		e.StateID = StateDisabled
		e.Message = "policy rejected; no policy in force"
	}
	if rejectedSHA256 != "" {
		e.Unmapped = map[string]any{"rejected_policy_sha256": rejectedSHA256}
	}
	return e
}

// Stages of a policy proposal (ProposalInfo.Stage).
const (
	ProposalGenerated = "generated"
	ProposalApproved  = "approved"
	ProposalRefused   = "refused"
)

// ProposalInfo describes one policy proposal event.
type ProposalInfo struct {
	Stage string
	// Base is the policy the proposal changes (for approved: where the
	// new policy was written).
	Base PolicyRef
	// ResultSHA256 is the checksum of the policy the proposal produces.
	ResultSHA256 string
	// File is the proposal file (apply-proposal), "" for stdout.
	File string
	// Operations, Answered and Unanswered count the patch operations,
	// the denials they answer and the denials left unanswered.
	Operations, Answered, Unanswered int
}

// PolicyProposal is a Device Config State Change (5019) with activity
// "Policy Proposal": generated (status Success, state Disabled: nothing
// is in force yet), approved (Success, state Enabled, policy = the new
// policy now installed) or refused (Failure, severity Medium, the reason
// in status_detail, the base kept). The counts and checksums are under
// unmapped.proposal.
func (s *Source) PolicyProposal(info ProposalInfo, cause error) *ConfigStateChange {
	e := s.configChange(ActivityPolicyProposal, SeverityInformational)
	e.StatusID = StatusSuccess
	base := info.Base
	switch info.Stage {
	case ProposalApproved:
		e.StateID = StateEnabled
		applied := base
		applied.SHA256 = info.ResultSHA256
		e.Policy = applied.Object(true)
		e.Message = fmt.Sprintf("policy proposal approved: %s now holds sha256 %s (was %s)", policyLabel(base), short(info.ResultSHA256), short(base.SHA256))
	case ProposalRefused:
		e.SeverityID = SeverityMedium
		e.StatusID = StatusFailure
		e.StateID = StateEnabled
		e.Policy = base.Object(true)
		if cause != nil {
			e.StatusDetail = cause.Error()
		}
		e.Message = fmt.Sprintf("policy proposal refused; %s unchanged (sha256 %s)", policyLabel(base), short(base.SHA256))
	default:
		e.StateID = StateDisabled
		e.Policy = base.Object(false)
		e.Message = fmt.Sprintf("policy proposal generated for %s: %d operations answering %d denials, %d unanswered", policyLabel(base), info.Operations, info.Answered, info.Unanswered)
	}
	u := map[string]any{"stage": info.Stage, "operations": info.Operations, "answered": info.Answered, "unanswered": info.Unanswered}
	if info.ResultSHA256 != "" {
		u["result_sha256"] = info.ResultSHA256
	}
	if info.File != "" {
		u["file"] = info.File
	}
	e.Unmapped = map[string]any{"proposal": u}
	return e
}

// Confinement records what the supervisor applied to a sandbox. It is
// carried under unmapped.confinement: OCSF 1.8.0 has no attributes for
// Landlock, seccomp, namespaces or cgroups (security_states is an enum of
// endpoint-protection states that does not describe them).
type Confinement struct {
	Landlock   *LandlockState `json:"landlock,omitempty"`
	Seccomp    *SeccompState  `json:"seccomp,omitempty"`
	Namespaces []string       `json:"namespaces,omitempty"`
	Cgroup     *CgroupState   `json:"cgroup,omitempty"`
	Identity   *IdentityState `json:"identity,omitempty"`
	// Degraded names every confinement feature that is not in force
	// (best_effort or --allow-degraded); empty means full confinement.
	Degraded []string `json:"degraded,omitempty"`
}

// LandlockState is the Landlock part of Confinement.
type LandlockState struct {
	ABI            int      `json:"abi"`
	Mode           string   `json:"mode"` // hard_requirement | best_effort
	ReadOnlyRules  int      `json:"read_only_rules"`
	ReadWriteRules int      `json:"read_write_rules"`
	SkippedPaths   []string `json:"skipped_paths,omitempty"`
	Scopes         []string `json:"scopes,omitempty"`
}

// SeccompState is the seccomp part of Confinement.
type SeccompState struct {
	Mode         string `json:"mode"` // "filter"
	Instructions int    `json:"instructions,omitempty"`
	Rules        int    `json:"rules,omitempty"`
	AllThreads   bool   `json:"all_threads"`
}

// CgroupState is the cgroup part of Confinement.
type CgroupState struct {
	Version     string  `json:"version"` // "v1", "v2", "hybrid"
	Path        string  `json:"path"`
	PidsMax     int64   `json:"pids_max,omitempty"`
	MemoryBytes int64   `json:"memory_max_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
}

// IdentityState is the privilege part of Confinement.
type IdentityState struct {
	UID          int  `json:"uid"`
	GID          int  `json:"gid"`
	NoNewPrivs   bool `json:"no_new_privs"`
	Capabilities int  `json:"capabilities"` // count of capabilities left in any set
}

// ConfinementApplied is a Device Config State Change (5019) saying the
// sandbox is confined: activity "Confinement Applied", state Enabled,
// security level Secure, or At Risk with severity Medium when anything is
// degraded. policy may be nil.
func (s *Source) ConfinementApplied(c Confinement, policy *PolicyRef) *ConfigStateChange {
	e := s.configChange(ActivityConfinementApplied, SeverityInformational)
	e.StateID = StateEnabled
	e.StatusID = StatusSuccess
	e.SecurityLevelID = SecurityLevelSecure
	if len(c.Degraded) > 0 {
		e.SecurityLevelID = SecurityLevelAtRisk
		e.SeverityID = SeverityMedium
		e.StatusDetail = "degraded: " + strings.Join(c.Degraded, ", ")
	}
	if policy != nil {
		e.Policy = policy.Object(true)
	}
	e.Unmapped = map[string]any{"confinement": c}
	e.Message = c.summary(s.Sandbox)
	return e
}

func (c Confinement) summary(sandbox string) string {
	var parts []string
	if l := c.Landlock; l != nil {
		parts = append(parts, fmt.Sprintf("landlock ABI %d %s (%d read-only, %d read-write rules)", l.ABI, l.Mode, l.ReadOnlyRules, l.ReadWriteRules))
	}
	if sc := c.Seccomp; sc != nil {
		parts = append(parts, "seccomp "+sc.Mode)
	}
	if len(c.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(c.Namespaces, ","))
	}
	if cg := c.Cgroup; cg != nil {
		p := "cgroup " + cg.Version
		if cg.PidsMax > 0 {
			p += fmt.Sprintf(" pids.max=%d", cg.PidsMax)
		}
		parts = append(parts, p)
	}
	if id := c.Identity; id != nil {
		parts = append(parts, fmt.Sprintf("uid %d gid %d", id.UID, id.GID))
	}
	msg := "confinement applied to " + sandbox
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, "; ")
	}
	if len(c.Degraded) > 0 {
		msg += "; DEGRADED: " + strings.Join(c.Degraded, ", ")
	}
	return msg
}

func policyLabel(p PolicyRef) string {
	switch {
	case p.Name != "":
		return p.Name
	case p.Path != "":
		return p.Path
	}
	return "(unnamed)"
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	if sum == "" {
		return "unknown"
	}
	return sum
}
