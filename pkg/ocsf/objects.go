package ocsf

import (
	"fmt"
	"path"
)

// The structs below are OCSF 1.8.0 objects, trimmed to the attributes
// Palisade fills. JSON names are the OCSF attribute names; optional
// attributes are omitempty. Caption siblings (type, algorithm, ...) are
// filled by Marshal from the ids.

// Metadata is the OCSF metadata object.
type Metadata struct {
	Version        string   `json:"version"`
	UID            string   `json:"uid,omitempty"`
	CorrelationUID string   `json:"correlation_uid,omitempty"`
	Product        Product  `json:"product"`
	Source         string   `json:"source,omitempty"`
	LogName        string   `json:"log_name,omitempty"`
	Labels         []string `json:"labels,omitempty"`
	Profiles       []string `json:"profiles,omitempty"`
}

// Product is the OCSF product object (metadata.product).
type Product struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name,omitempty"`
	Version    string `json:"version,omitempty"`
	UID        string `json:"uid,omitempty"`
}

// Device is the OCSF device object. For Palisade it describes the sandbox:
// type_id Other labelled "Sandbox", with the host OS as a separate object.
type Device struct {
	TypeID   int    `json:"type_id"`
	Type     string `json:"type,omitempty"`
	Name     string `json:"name,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	UID      string `json:"uid,omitempty"`
	IP       string `json:"ip,omitempty"`
	OS       *OS    `json:"os,omitempty"`
}

// OS is the OCSF os object.
type OS struct {
	Name          string `json:"name"`
	TypeID        int    `json:"type_id"`
	Type          string `json:"type,omitempty"`
	KernelRelease string `json:"kernel_release,omitempty"`
}

// Process is the OCSF process object. ParentProcess chains ancestors.
type Process struct {
	PID              int      `json:"pid,omitempty"`
	UID              string   `json:"uid,omitempty"`
	Name             string   `json:"name,omitempty"`
	CmdLine          string   `json:"cmd_line,omitempty"`
	WorkingDirectory string   `json:"working_directory,omitempty"`
	Sandbox          string   `json:"sandbox,omitempty"`
	CreatedTime      int64    `json:"created_time,omitempty"`
	TerminatedTime   int64    `json:"terminated_time,omitempty"`
	File             *File    `json:"file,omitempty"`
	User             *User    `json:"user,omitempty"`
	ParentProcess    *Process `json:"parent_process,omitempty"`
}

// File is the OCSF file object.
type File struct {
	Name   string        `json:"name"`
	Path   string        `json:"path,omitempty"`
	TypeID int           `json:"type_id"`
	Type   string        `json:"type,omitempty"`
	Hashes []Fingerprint `json:"hashes,omitempty"`
}

// Fingerprint is the OCSF fingerprint object (file.hashes).
type Fingerprint struct {
	AlgorithmID int    `json:"algorithm_id"`
	Algorithm   string `json:"algorithm,omitempty"`
	Value       string `json:"value"`
}

// User is the OCSF user object.
type User struct {
	UID    string `json:"uid,omitempty"`
	Name   string `json:"name,omitempty"`
	TypeID int    `json:"type_id,omitempty"`
	Type   string `json:"type,omitempty"`
}

// Actor is the OCSF actor object.
type Actor struct {
	Process *Process `json:"process,omitempty"`
	User    *User    `json:"user,omitempty"`
	AppName string   `json:"app_name,omitempty"`
}

// NetworkEndpoint is the OCSF network_endpoint object (src_endpoint,
// dst_endpoint).
type NetworkEndpoint struct {
	// Domain is a DNS query's name (policy DNS events).
	Domain   string `json:"domain,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	IP       string `json:"ip,omitempty"`
	Port     int    `json:"port,omitempty"`
	Name     string `json:"name,omitempty"`
	UID      string `json:"uid,omitempty"`
	SvcName  string `json:"svc_name,omitempty"`
}

// ConnectionInfo is the OCSF network_connection_info object.
type ConnectionInfo struct {
	DirectionID   int    `json:"direction_id"`
	Direction     string `json:"direction,omitempty"`
	ProtocolName  string `json:"protocol_name,omitempty"`
	ProtocolNum   int    `json:"protocol_num,omitempty"`
	ProtocolVerID int    `json:"protocol_ver_id,omitempty"`
	ProtocolVer   string `json:"protocol_ver,omitempty"`
	UID           string `json:"uid,omitempty"`
}

// FirewallRule is the OCSF firewall_rule object: the policy entry that
// decided, and the engine that applied it (Type).
type FirewallRule struct {
	Name         string   `json:"name,omitempty"`
	UID          string   `json:"uid,omitempty"`
	Type         string   `json:"type,omitempty"`
	Version      string   `json:"version,omitempty"`
	Desc         string   `json:"desc,omitempty"`
	Condition    string   `json:"condition,omitempty"`
	MatchDetails []string `json:"match_details,omitempty"`
}

// Policy is the OCSF policy object.
type Policy struct {
	Name      string         `json:"name,omitempty"`
	UID       string         `json:"uid,omitempty"`
	Version   string         `json:"version,omitempty"`
	Type      string         `json:"type,omitempty"`
	Desc      string         `json:"desc,omitempty"`
	IsApplied *bool          `json:"is_applied,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
}

// FindingInfo is the OCSF finding_info object.
type FindingInfo struct {
	UID         string   `json:"uid"`
	Title       string   `json:"title,omitempty"`
	Desc        string   `json:"desc,omitempty"`
	Types       []string `json:"types,omitempty"`
	CreatedTime int64    `json:"created_time,omitempty"`
	DataSources []string `json:"data_sources,omitempty"`
}

// Evidence is one element of the OCSF evidences array. At least one of the
// entity attributes (actor, process, endpoints, file, url, device,
// connection_info) must be set.
type Evidence struct {
	Name           string           `json:"name,omitempty"`
	Actor          *Actor           `json:"actor,omitempty"`
	Process        *Process         `json:"process,omitempty"`
	SrcEndpoint    *NetworkEndpoint `json:"src_endpoint,omitempty"`
	DstEndpoint    *NetworkEndpoint `json:"dst_endpoint,omitempty"`
	ConnectionInfo *ConnectionInfo  `json:"connection_info,omitempty"`
	File           *File            `json:"file,omitempty"`
	URL            *URL             `json:"url,omitempty"`
	Device         *Device          `json:"device,omitempty"`
	Data           map[string]any   `json:"data,omitempty"`
}

// Remediation is the OCSF remediation object.
type Remediation struct {
	Desc string `json:"desc"`
}

// URL is the OCSF url object. Build it with NewURL, which redacts: it
// never carries a query string, fragment or userinfo.
type URL struct {
	URLString string `json:"url_string,omitempty"`
	Scheme    string `json:"scheme,omitempty"`
	Hostname  string `json:"hostname,omitempty"`
	Port      int    `json:"port,omitempty"`
	Path      string `json:"path,omitempty"`
}

// HTTPRequest is the OCSF http_request object. It has no headers, query
// or body attributes on purpose.
type HTTPRequest struct {
	HTTPMethod string `json:"http_method,omitempty"`
	URL        *URL   `json:"url,omitempty"`
	Version    string `json:"version,omitempty"`
	UserAgent  string `json:"user_agent,omitempty"`
}

// HTTPResponse is the OCSF http_response object.
type HTTPResponse struct {
	Code    int    `json:"code"`
	Message string `json:"message,omitempty"`
}

// ExeFile describes an executable by path and sha256 (hex), as attribution
// reports it: file.type_id Executable File, one SHA-256 fingerprint.
func ExeFile(exePath, sha256hex string) *File {
	f := &File{Name: path.Base(exePath), Path: exePath, TypeID: FileTypeExecutable}
	if sha256hex != "" {
		f.Hashes = []Fingerprint{{AlgorithmID: AlgorithmSHA256, Value: sha256hex}}
	}
	return f
}

// maxDepth bounds parent_process chains (attribution walks at most 64
// ancestors; this leaves room and stops cycles).
const maxDepth = 128

func (d *Device) fill() error {
	if d == nil {
		return nil
	}
	label := d.Type
	if d.TypeID == DeviceTypeOther && label == "" {
		label = DeviceTypeLabel
	}
	t, err := sibling("device.type_id", at("device.type_id"), d.TypeID, label)
	if err != nil {
		return err
	}
	setString(&d.Type, t)
	if d.OS != nil {
		if err := setSibling(&d.OS.Type, "os.type_id", at("device.os.type_id"), d.OS.TypeID); err != nil {
			return err
		}
	}
	return nil
}

func (f *File) fill(name *attr) error {
	if f == nil {
		return nil
	}
	if err := setSibling(&f.Type, "file.type_id", name.child("type_id"), f.TypeID); err != nil {
		return err
	}
	for i := range f.Hashes {
		h := &f.Hashes[i]
		if err := setSibling(&h.Algorithm, "fingerprint.algorithm_id", name.elem("hashes", i).child("algorithm_id"), h.AlgorithmID); err != nil {
			return err
		}
	}
	return nil
}

func (u *User) fill(name *attr) error {
	if u == nil {
		return nil
	}
	if u.TypeID == 0 {
		setString(&u.Type, "")
		return nil
	}
	return setSibling(&u.Type, "user.type_id", name.child("type_id"), u.TypeID)
}

func (p *Process) fill(name *attr) error { return p.fillChain(name, 0) }

// fillChain fills p and its ancestors (recursive rather than a loop, so
// the names of the chain stay on the stack).
func (p *Process) fillChain(name *attr, depth int) error {
	if p == nil {
		return nil
	}
	if depth > maxDepth {
		return fmt.Errorf("ocsf: %s: parent_process chain deeper than %d", name.String(), maxDepth)
	}
	if err := p.File.fill(name.child("file")); err != nil {
		return err
	}
	if err := p.User.fill(name.child("user")); err != nil {
		return err
	}
	return p.ParentProcess.fillChain(name.child("parent_process"), depth+1)
}

func (a *Actor) fill(name *attr) error {
	if a == nil {
		return nil
	}
	if err := a.Process.fill(name.child("process")); err != nil {
		return err
	}
	return a.User.fill(name.child("user"))
}

func (c *ConnectionInfo) fill(name *attr) error {
	if c == nil {
		return nil
	}
	if err := setSibling(&c.Direction, "network_connection_info.direction_id", name.child("direction_id"), c.DirectionID); err != nil {
		return err
	}
	if c.ProtocolVerID == 0 {
		setString(&c.ProtocolVer, "")
		return nil
	}
	return setSibling(&c.ProtocolVer, "network_connection_info.protocol_ver_id", name.child("protocol_ver_id"), c.ProtocolVerID)
}

func (e *Evidence) fill(name *attr) error {
	if err := e.Actor.fill(name.child("actor")); err != nil {
		return err
	}
	if err := e.Process.fill(name.child("process")); err != nil {
		return err
	}
	if err := e.ConnectionInfo.fill(name.child("connection_info")); err != nil {
		return err
	}
	if err := e.File.fill(name.child("file")); err != nil {
		return err
	}
	return e.Device.fill()
}
