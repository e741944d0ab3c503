package ocsf

import (
	"errors"
	"fmt"
	"strings"
)

// File System Activity (1001) activity_id.
const (
	FileCreate  = 1
	FileRead    = 2
	FileUpdate  = 3
	FileDelete  = 4
	FileRename  = 5
	FileOpen    = 14
	FileOther   = OtherID
	FileUnknown = 0
)

// ActivityDenialLogging is the activity_name of the Device Config State
// Change that says whether per-access filesystem denials are logged.
const ActivityDenialLogging = "Denial Logging"

// FileActivity is class 1001 (File System Activity): an access to a file
// that Landlock refused. It never carries file contents.
type FileActivity struct {
	Base
	SecurityControl
	Actor Actor `json:"actor"`
	File  File  `json:"file"`
}

// FileDenial is one refused filesystem access, as the kernel's Landlock
// audit records describe it.
type FileDenial struct {
	// ActivityID is the File System Activity activity (FileRead, ...);
	// FileOther needs ActivityName.
	ActivityID   int
	ActivityName string
	// Verb is the human word for the access ("read", "write", "create",
	// "execute", "truncate", "signal", ...).
	Verb string
	// Target is the object of the access: the path, or for a scope
	// denial the socket or process.
	Target File
	// Rights are the Landlock rights that blocked it ("fs.read_file",
	// "scope.signal", ...), as the kernel names them.
	Rights []string
	// Domain is the Landlock domain id (hex) that denied it.
	Domain string
	// Actor is the process that tried.
	Actor Actor
	// Policy is the policy in force.
	Policy *PolicyRef
}

// FileDenied is a File System Activity (1001) event for an access Landlock
// refused: action Denied, disposition Blocked, severity Medium, status
// Failure with status_code "landlock_denied" and the blocking rights in
// status_detail (and, as a list, under unmapped.landlock).
func (s *Source) FileDenied(d FileDenial) *FileActivity {
	e := &FileActivity{
		Base:  s.Base(ClassFileActivity, d.ActivityID, SeverityMedium),
		Actor: d.Actor,
		File:  d.Target,
	}
	if d.ActivityID == OtherID {
		e.ActivityName = d.ActivityName
	}
	e.ActionID, e.DispositionID = ActionDenied, DispositionBlocked
	e.StatusID = StatusFailure
	e.StatusCode = "landlock_denied"
	e.StatusDetail = strings.Join(d.Rights, ",")
	if d.Policy != nil {
		e.Policy = d.Policy.Object(true)
	}
	target := d.Target.Path
	if target == "" {
		target = d.Target.Name
	}
	who := "process"
	if p := d.Actor.Process; p != nil {
		who = fmt.Sprintf("%s(%d)", p.Name, p.PID)
		if p.File != nil && p.File.Path != "" {
			who = fmt.Sprintf("%s(%d)", p.File.Path, p.PID)
		}
	}
	e.Message = fmt.Sprintf("%s %s %s denied (%s)", who, d.Verb, target, e.StatusDetail)
	e.Unmapped = map[string]any{"landlock": map[string]any{"blockers": d.Rights, "domain": d.Domain}}
	return e
}

func (e *FileActivity) prepare() error {
	err := e.Base.prepareBase(ClassFileActivity,
		ProfileHost, ifUsed(e.SecurityControl.used(), ProfileSecurityControl))
	if err != nil {
		return err
	}
	if e.Device == nil {
		return errors.New("ocsf: file system activity: device is required")
	}
	if e.File.Name == "" {
		return errors.New("ocsf: file system activity: file.name is required")
	}
	if err := e.SecurityControl.fill(); err != nil {
		return err
	}
	if err := e.File.fill(at("file")); err != nil {
		return err
	}
	if err := e.Actor.fill(at("actor")); err != nil {
		return err
	}
	if e.Actor.Process == nil && e.Actor.User == nil && e.Actor.AppName == "" {
		return errors.New("ocsf: file system activity: actor needs a process, user or app_name")
	}
	return nil
}

// DenialLogging is a Device Config State Change (5019) saying whether the
// sandbox's refused filesystem accesses are logged: state Enabled, or
// Disabled with severity Low and the reason (audit unavailable, the audit
// daemon keeps audit off, ...) in status_detail.
func (s *Source) DenialLogging(enabled bool, detail string) *ConfigStateChange {
	e := s.configChange(ActivityDenialLogging, SeverityInformational)
	e.StatusID = StatusSuccess
	e.StateID = StateEnabled
	e.StatusDetail = detail
	e.Message = "filesystem denial events enabled"
	if !enabled {
		e.StateID = StateDisabled
		e.SeverityID = SeverityLow
		e.StatusID = StatusFailure
		e.Message = "filesystem denial events unavailable"
	}
	if detail != "" {
		e.Message += ": " + detail
	}
	return e
}
