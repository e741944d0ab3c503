package ocsf

import (
	"fmt"
	"path"
	"strings"
)

// finding_info.types Palisade uses.
const (
	FindingTypeDegraded         = "Degraded Confinement"
	FindingTypeBypass           = "Egress Bypass Attempt"
	FindingTypeIdentityMismatch = "Binary Identity Mismatch"
	FindingTypeForeignCode      = "Foreign Code In Process"
	FindingTypeUndecidedSender  = "Undecided Sender On A Decided Connection"
)

// Finding is a Detection Finding (2004) Create, status New, flagged as an
// alert with High confidence. A random finding_info.uid is generated when
// info.UID is empty; created_time defaults to now.
func (s *Source) Finding(info FindingInfo, severity int, evidences ...Evidence) *DetectionFinding {
	e := &DetectionFinding{
		Base:         s.Base(ClassDetectionFinding, FindingCreate, severity),
		FindingInfo:  info,
		Evidences:    evidences,
		ConfidenceID: ConfidenceHigh,
		IsAlert:      true,
	}
	e.StatusID = FindingStatusNew
	if e.FindingInfo.UID == "" {
		e.FindingInfo.UID = s.newUID("finding")
	}
	if e.FindingInfo.CreatedTime == 0 {
		e.FindingInfo.CreatedTime = e.Time
	}
	e.Message = info.Title
	return e
}

// DegradedRun is a finding that the sandbox runs with less confinement
// than full: feature names what is missing (e.g. "seccomp", "landlock"),
// reason why it was allowed (best_effort, --allow-degraded). Severity
// Medium; action Allowed because the run went ahead.
func (s *Source) DegradedRun(feature, reason string) *DetectionFinding {
	info := FindingInfo{
		UID:   s.newUID("degraded"),
		Title: fmt.Sprintf("sandbox %s runs without %s", s.Sandbox, feature),
		Desc:  reason,
		Types: []string{FindingTypeDegraded},
	}
	e := s.Finding(info, SeverityMedium, Evidence{
		Name:   feature,
		Device: s.Device(),
		Data:   map[string]any{"feature": feature, "reason": reason},
	})
	e.ActionID = ActionAllowed
	e.DispositionID = DispositionAllowed
	return e
}

// BypassAttempt is a finding that a sandbox process tried to reach the
// network around the proxy (captured by the fence). Severity High; action
// Denied, disposition Blocked.
func (s *Source) BypassAttempt(c Conn, reason string) *DetectionFinding {
	return s.connFinding(c, "bypass", FindingTypeBypass, "direct connection to %s bypassing the proxy", reason)
}

// connFinding is a High finding about one refused connection of c's
// actor: title is a format taking the destination's label, the
// connection's endpoints are the evidence; action Denied, disposition
// Blocked.
func (s *Source) connFinding(c Conn, kind, typ, title, desc string) *DetectionFinding {
	dst := "unknown destination"
	if c.Dst != nil {
		dst = endpointLabel(c.Dst)
	}
	info := FindingInfo{
		UID:   s.newUID(kind),
		Title: fmt.Sprintf(title, dst),
		Desc:  desc,
		Types: []string{typ},
	}
	ev := Evidence{SrcEndpoint: c.Src, DstEndpoint: c.Dst, ConnectionInfo: c.connInfo()}
	if c.Src == nil && c.Dst == nil {
		ev.Actor = c.Actor // evidences need at least one entity
	}
	e := s.Finding(info, SeverityHigh, ev)
	e.Actor = c.Actor
	e.ActionID = ActionDenied
	e.DispositionID = DispositionBlocked
	return e
}

// IdentityMismatch is a finding that a binary's sha256 differs from the
// hash pinned on first use for its path. Severity High; action Denied.
func (s *Source) IdentityMismatch(actor *Actor, exePath, pinnedSHA256, seenSHA256 string) *DetectionFinding {
	info := FindingInfo{
		UID:   s.newUID("identity"),
		Title: fmt.Sprintf("binary %s changed since first use", exePath),
		Desc:  fmt.Sprintf("pinned sha256 %s, now %s", pinnedSHA256, seenSHA256),
		Types: []string{FindingTypeIdentityMismatch},
	}
	ev := Evidence{
		File: ExeFile(exePath, seenSHA256),
		Data: map[string]any{"pinned_sha256": pinnedSHA256, "seen_sha256": seenSHA256},
	}
	e := s.Finding(info, SeverityHigh, ev)
	e.Actor = actor
	e.ActionID = ActionDenied
	e.DispositionID = DispositionBlocked
	return e
}

// ForeignCodeInfo names a process that lost its binary's identity.
type ForeignCodeInfo struct {
	PID     int
	Exe     string
	File    string   // the foreign file ("" for a ptrace grant)
	Reasons []string // why (writable_path, tmpfs, memfd, deleted, ...)
}

// ForeignCode is a finding that a process mapped executable code from a
// file the sandbox could have written (an LD_PRELOAD or LD_AUDIT object
// in the workdir, a memfd...), so a binary-scoped rule was refused.
// Severity High; action Denied.
func (s *Source) ForeignCode(actor *Actor, fc ForeignCodeInfo) *DetectionFinding {
	what := fc.File
	if what == "" {
		what = "code it did not load from its binary"
	}
	info := FindingInfo{
		UID:   s.newUID("foreign-code"),
		Title: fmt.Sprintf("%s (pid %d) runs %s", fc.Exe, fc.PID, what),
		Desc:  fmt.Sprintf("executable code from a file the sandbox could write (%s): the process lost its binary's identity", strings.Join(fc.Reasons, ", ")),
		Types: []string{FindingTypeForeignCode},
	}
	ev := Evidence{
		Process: &Process{PID: fc.PID, Sandbox: s.Sandbox, File: ExeFile(fc.Exe, "")},
		Data:    map[string]any{"reasons": fc.Reasons},
	}
	if fc.File != "" {
		ev.File = &File{Name: path.Base(fc.File), Path: fc.File, TypeID: FileTypeRegular}
	}
	e := s.Finding(info, SeverityHigh, ev)
	e.Actor = actor
	e.ActionID = ActionDenied
	e.DispositionID = DispositionBlocked
	return e
}

// SenderInfo names the process that sent on a decided connection.
type SenderInfo struct {
	PID  int
	Exe  string // "" when it could no longer be named (Comm then)
	Comm string
}

// UndecidedSender is a finding that, after the proxy decided a
// connection for one process (c.Actor), another process that is not
// its descendant sent bytes on it (a descriptor handed on after the
// decision): the kernel refused the send and the proxy closed the
// connection. The evidence names the real sender. Severity High; action
// Denied.
func (s *Source) UndecidedSender(c Conn, sender SenderInfo) *DetectionFinding {
	name := sender.Exe
	if name == "" {
		name = sender.Comm
	}
	dst := "its destination"
	if c.Dst != nil {
		dst = endpointLabel(c.Dst)
	}
	info := FindingInfo{
		UID:   s.newUID("sender"),
		Title: fmt.Sprintf("%s (pid %d) sent on a connection to %s decided for another process", name, sender.PID, dst),
		Desc:  "bytes on a decided connection are accepted only from the decided process or its descendants: the send was refused and the connection closed",
		Types: []string{FindingTypeUndecidedSender},
	}
	proc := &Process{PID: sender.PID, Name: sender.Comm, Sandbox: s.Sandbox}
	if sender.Exe != "" {
		proc.File = ExeFile(sender.Exe, "")
	}
	ev := Evidence{Process: proc, SrcEndpoint: c.Src, DstEndpoint: c.Dst, ConnectionInfo: c.connInfo()}
	e := s.Finding(info, SeverityHigh, ev)
	e.Actor = c.Actor
	e.ActionID = ActionDenied
	e.DispositionID = DispositionBlocked
	return e
}
