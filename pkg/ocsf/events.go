package ocsf

import (
	"errors"
	"fmt"
	"slices"
)

// Event is one OCSF event of a class Palisade emits: *FileActivity, *ProcessActivity,
// *ConfigStateChange, *DetectionFinding, *NetworkActivity or
// *HTTPActivity. Build events with a Source; the interface is sealed.
type Event interface {
	// EventBase returns the attributes every class shares.
	EventBase() *Base
	// prepare fills derived attributes and checks invariants.
	prepare() error
}

// Base holds the attributes every OCSF class shares. Marshal derives
// class_name, category_uid, category_name, type_uid, type_name and every
// caption sibling (activity_name, severity, status) from the ids; set
// ActivityName yourself only for activity OtherID.
type Base struct {
	ActivityID   int            `json:"activity_id"`
	ActivityName string         `json:"activity_name,omitempty"`
	CategoryUID  int            `json:"category_uid"`
	CategoryName string         `json:"category_name,omitempty"`
	ClassUID     int            `json:"class_uid"`
	ClassName    string         `json:"class_name,omitempty"`
	TypeUID      int64          `json:"type_uid"`
	TypeName     string         `json:"type_name,omitempty"`
	Time         int64          `json:"time"`
	SeverityID   int            `json:"severity_id"`
	Severity     string         `json:"severity,omitempty"`
	StatusID     int            `json:"status_id,omitempty"`
	Status       string         `json:"status,omitempty"`
	StatusCode   string         `json:"status_code,omitempty"`
	StatusDetail string         `json:"status_detail,omitempty"`
	Message      string         `json:"message,omitempty"`
	Count        int            `json:"count,omitempty"`
	StartTime    int64          `json:"start_time,omitempty"`
	EndTime      int64          `json:"end_time,omitempty"`
	Duration     int64          `json:"duration,omitempty"`
	Metadata     Metadata       `json:"metadata"`
	Device       *Device        `json:"device,omitempty"`
	Unmapped     map[string]any `json:"unmapped,omitempty"`
}

// EventBase implements Event.
func (b *Base) EventBase() *Base { return b }

// SecurityControl holds the attributes of the OCSF security_control
// profile that Palisade uses: the decision (action, disposition) and what
// made it (firewall_rule, policy).
type SecurityControl struct {
	ActionID      int           `json:"action_id,omitempty"`
	Action        string        `json:"action,omitempty"`
	DispositionID int           `json:"disposition_id,omitempty"`
	Disposition   string        `json:"disposition,omitempty"`
	FirewallRule  *FirewallRule `json:"firewall_rule,omitempty"`
	Policy        *Policy       `json:"policy,omitempty"`
}

func (s *SecurityControl) used() bool {
	return s.ActionID != 0 || s.DispositionID != 0 || s.FirewallRule != nil || s.Policy != nil
}

func (s *SecurityControl) fill() error {
	if err := setOptSibling(&s.Action, "action_id", at("action_id"), s.ActionID); err != nil {
		return err
	}
	return setOptSibling(&s.Disposition, "disposition_id", at("disposition_id"), s.DispositionID)
}

// ProcessActivity is class 1007: a process launched or terminated.
type ProcessActivity struct {
	Base
	Actor    Actor   `json:"actor"`
	Process  Process `json:"process"`
	ExitCode *int    `json:"exit_code,omitempty"`
}

// ConfigStateChange is class 5019 (Device Config State Change): a policy
// loaded or reloaded, or confinement applied to the sandbox.
type ConfigStateChange struct {
	Base
	SecurityControl
	Actor               *Actor `json:"actor,omitempty"`
	StateID             int    `json:"state_id,omitempty"`
	State               string `json:"state,omitempty"`
	SecurityLevelID     int    `json:"security_level_id,omitempty"`
	SecurityLevel       string `json:"security_level,omitempty"`
	PrevSecurityLevelID int    `json:"prev_security_level_id,omitempty"`
	PrevSecurityLevel   string `json:"prev_security_level,omitempty"`
}

// DetectionFinding is class 2004: a degraded run, a bypass attempt, a
// binary identity mismatch.
type DetectionFinding struct {
	Base
	SecurityControl
	FindingInfo  FindingInfo  `json:"finding_info"`
	Actor        *Actor       `json:"actor,omitempty"`
	Evidences    []Evidence   `json:"evidences,omitempty"`
	ConfidenceID int          `json:"confidence_id,omitempty"`
	Confidence   string       `json:"confidence,omitempty"`
	IsAlert      bool         `json:"is_alert,omitempty"`
	Remediation  *Remediation `json:"remediation,omitempty"`
}

// NetworkActivity is class 4001: a connection opened, refused or failed,
// allowed or denied.
type NetworkActivity struct {
	Base
	SecurityControl
	Actor          *Actor           `json:"actor,omitempty"`
	SrcEndpoint    *NetworkEndpoint `json:"src_endpoint,omitempty"`
	DstEndpoint    *NetworkEndpoint `json:"dst_endpoint,omitempty"`
	ConnectionInfo *ConnectionInfo  `json:"connection_info,omitempty"`
}

// HTTPActivity is class 4002: one forwarded (or refused) HTTP request. It
// always carries http_request; http_response when a response was sent
// (the deprecated http_status is not used).
type HTTPActivity struct {
	Base
	SecurityControl
	Actor          *Actor           `json:"actor,omitempty"`
	SrcEndpoint    *NetworkEndpoint `json:"src_endpoint,omitempty"`
	DstEndpoint    *NetworkEndpoint `json:"dst_endpoint,omitempty"`
	ConnectionInfo *ConnectionInfo  `json:"connection_info,omitempty"`
	HTTPRequest    *HTTPRequest     `json:"http_request,omitempty"`
	HTTPResponse   *HTTPResponse    `json:"http_response,omitempty"`
}

// Marshal fills the derived attributes of ev, checks its invariants and
// returns it as one line of JSON without the trailing newline. It fails,
// naming the attribute, rather than produce an event that breaks OCSF.
// Marshal writes the derived attributes into ev, so one event value must
// not be marshalled or emitted from two goroutines at once.
func Marshal(ev Event) ([]byte, error) {
	return appendMarshal(nil, ev)
}

// appendMarshal is Marshal appending to dst (dst unchanged on error).
func appendMarshal(dst []byte, ev Event) ([]byte, error) {
	if ev == nil || ev.EventBase() == nil {
		return dst, errors.New("ocsf: nil event")
	}
	if err := ev.prepare(); err != nil {
		return dst, err
	}
	if out, ok := appendEvent(dst, ev); ok {
		return out, nil
	}
	out, err := marshalStd(dst, ev)
	if err != nil {
		return dst, fmt.Errorf("ocsf: encode class %d: %w", ev.EventBase().ClassUID, err)
	}
	return out, nil
}

// setOptSibling is setSibling for an optional enum whose id 0 means
// "absent" (no caption).
func setOptSibling(dst *string, key string, name *attr, id int) error {
	if id == 0 {
		setString(dst, "")
		return nil
	}
	return setSibling(dst, key, name, id)
}

// prepare fills the base of an event of class uid and declares profiles.
func (b *Base) prepareBase(uid int, profiles ...string) error {
	t := tables()
	info, ok := t.classes[uid]
	if !ok {
		return fmt.Errorf("ocsf: class_uid %d is not a class Palisade emits", uid)
	}
	if b.ClassUID != uid {
		return fmt.Errorf("ocsf: class_uid is %d, want %d for %s", b.ClassUID, uid, info.Name)
	}
	b.ClassName = info.Name
	b.CategoryUID = info.CategoryUID
	b.CategoryName = info.CategoryName
	akey := t.activityKeys[uid]
	if err := setSibling(&b.ActivityName, akey, at("activity_id"), b.ActivityID); err != nil {
		return err
	}
	b.TypeUID = int64(uid)*100 + int64(b.ActivityID)
	b.TypeName = t.typeNames[b.TypeUID]
	if b.Time <= 0 {
		return errors.New("ocsf: time is not set (epoch milliseconds)")
	}
	if err := setSibling(&b.Severity, "severity_id", at("severity_id"), b.SeverityID); err != nil {
		return err
	}
	skey := "status_id"
	if uid == ClassDetectionFinding {
		skey = "2004/status_id"
	}
	if err := setOptSibling(&b.Status, skey, at("status_id"), b.StatusID); err != nil {
		return err
	}
	if b.Metadata.Version != Version {
		return fmt.Errorf("ocsf: metadata.version is %q, want %q", b.Metadata.Version, Version)
	}
	if b.Metadata.Product.Name == "" {
		return errors.New("ocsf: metadata.product.name is empty")
	}
	if err := b.Device.fill(); err != nil {
		return err
	}
	if set, ok := profileSet(profiles); ok && len(b.Metadata.Profiles) == 0 {
		// Nearly every event: a shared, sorted slice (full, so an append
		// copies it) instead of a new one.
		b.Metadata.Profiles = set
		return nil
	}
	for _, p := range profiles {
		if p != "" && !slices.Contains(b.Metadata.Profiles, p) {
			b.Metadata.Profiles = append(b.Metadata.Profiles, p)
		}
	}
	if !slices.IsSorted(b.Metadata.Profiles) {
		slices.Sort(b.Metadata.Profiles)
	}
	return nil
}

var (
	profilesHost            = []string{ProfileHost}
	profilesSecurityControl = []string{ProfileSecurityControl}
	profilesBoth            = []string{ProfileHost, ProfileSecurityControl}
)

// profileSet is the sorted set of the profiles named ("" names none) as
// a shared slice whose length is its capacity (nil for none); ok is false
// for a profile it does not know.
func profileSet(profiles []string) (set []string, ok bool) {
	host, sc := false, false
	for _, p := range profiles {
		switch p {
		case ProfileHost:
			host = true
		case ProfileSecurityControl:
			sc = true
		case "":
		default:
			return nil, false
		}
	}
	switch {
	case host && sc:
		return profilesBoth, true
	case host:
		return profilesHost, true
	case sc:
		return profilesSecurityControl, true
	}
	return nil, true
}

func ifUsed(used bool, profile string) string {
	if used {
		return profile
	}
	return ""
}

func (e *ProcessActivity) prepare() error {
	if err := e.Base.prepareBase(ClassProcessActivity); err != nil {
		return err
	}
	if e.Device == nil {
		return errors.New("ocsf: process activity: device is required")
	}
	if e.Process.PID == 0 && e.Process.UID == "" {
		return errors.New("ocsf: process activity: process.pid or process.uid is required")
	}
	if err := e.Actor.fill(at("actor")); err != nil {
		return err
	}
	if e.Actor.Process == nil && e.Actor.User == nil && e.Actor.AppName == "" {
		return errors.New("ocsf: process activity: actor needs a process, user or app_name")
	}
	return e.Process.fill(at("process"))
}

func (e *ConfigStateChange) prepare() error {
	if err := e.Base.prepareBase(ClassDeviceConfigStateChange, ifUsed(e.SecurityControl.used(), ProfileSecurityControl)); err != nil {
		return err
	}
	if e.Device == nil {
		return errors.New("ocsf: device config state change: device is required")
	}
	if err := e.SecurityControl.fill(); err != nil {
		return err
	}
	if err := setOptSibling(&e.State, "state_id", at("state_id"), e.StateID); err != nil {
		return err
	}
	if err := setOptSibling(&e.SecurityLevel, "security_level_id", at("security_level_id"), e.SecurityLevelID); err != nil {
		return err
	}
	if err := setOptSibling(&e.PrevSecurityLevel, "security_level_id", at("prev_security_level_id"), e.PrevSecurityLevelID); err != nil {
		return err
	}
	return e.Actor.fill(at("actor"))
}

func (e *DetectionFinding) prepare() error {
	err := e.Base.prepareBase(ClassDetectionFinding,
		ifUsed(e.Actor != nil, ProfileHost),
		ifUsed(e.SecurityControl.used(), ProfileSecurityControl))
	if err != nil {
		return err
	}
	if e.FindingInfo.UID == "" {
		return errors.New("ocsf: detection finding: finding_info.uid is required")
	}
	if err := e.SecurityControl.fill(); err != nil {
		return err
	}
	if err := setOptSibling(&e.Confidence, "confidence_id", at("confidence_id"), e.ConfidenceID); err != nil {
		return err
	}
	if err := e.Actor.fill(at("actor")); err != nil {
		return err
	}
	for i := range e.Evidences {
		if err := e.Evidences[i].fill((*attr)(nil).elem("evidences", i)); err != nil {
			return err
		}
	}
	return nil
}

func (e *NetworkActivity) prepare() error {
	err := e.Base.prepareBase(ClassNetworkActivity,
		ifUsed(e.Actor != nil || e.Device != nil, ProfileHost),
		ifUsed(e.SecurityControl.used(), ProfileSecurityControl))
	if err != nil {
		return err
	}
	if e.SrcEndpoint == nil && e.DstEndpoint == nil {
		return errors.New("ocsf: network activity: src_endpoint or dst_endpoint is required")
	}
	if err := e.SecurityControl.fill(); err != nil {
		return err
	}
	if err := e.ConnectionInfo.fill(at("connection_info")); err != nil {
		return err
	}
	return e.Actor.fill(at("actor"))
}

func (e *HTTPActivity) prepare() error {
	err := e.Base.prepareBase(ClassHTTPActivity,
		ifUsed(e.Actor != nil || e.Device != nil, ProfileHost),
		ifUsed(e.SecurityControl.used(), ProfileSecurityControl))
	if err != nil {
		return err
	}
	if e.HTTPRequest == nil && e.HTTPResponse == nil {
		return errors.New("ocsf: http activity: http_request or http_response is required")
	}
	if err := e.SecurityControl.fill(); err != nil {
		return err
	}
	if err := e.ConnectionInfo.fill(at("connection_info")); err != nil {
		return err
	}
	return e.Actor.fill(at("actor"))
}
