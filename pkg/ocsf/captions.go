package ocsf

import (
	"fmt"
	"strconv"
	"sync"
)

// ClassInfo is the invariant part of one class: its caption and category.
type ClassInfo struct {
	Name         string
	CategoryUID  int
	CategoryName string
}

// classTable lists the classes Palisade emits, as defined in OCSF 1.8.0
// (classes/*.json: caption, category_uid, category_name). TestTables checks
// it against the definitions.
func classTable() map[int]ClassInfo {
	return map[int]ClassInfo{
		ClassFileActivity:            {"File System Activity", CategorySystemActivity, "System Activity"},
		ClassProcessActivity:         {"Process Activity", CategorySystemActivity, "System Activity"},
		ClassDetectionFinding:        {"Detection Finding", CategoryFindings, "Findings"},
		ClassNetworkActivity:         {"Network Activity", CategoryNetworkActivity, "Network Activity"},
		ClassHTTPActivity:            {"HTTP Activity", CategoryNetworkActivity, "Network Activity"},
		ClassDeviceConfigStateChange: {"Device Config State Change", CategoryDiscovery, "Discovery"},
	}
}

// captionTable maps an enum to its id → caption table, copied from the
// OCSF 1.8.0 definitions. Keys are "<class_uid>/<attribute>" for class-specific
// enums, "<attribute>" for enums shared by every emitted class, and
// "<object>.<attribute>" for object enums. TestTables checks every table
// against the definitions, entry for entry.
func captionTable() map[string]map[int]string {
	return map[string]map[int]string{
		"1001/activity_id": {
			0:  "Unknown",
			1:  "Create",
			2:  "Read",
			3:  "Update",
			4:  "Delete",
			5:  "Rename",
			6:  "Set Attributes",
			7:  "Set Security",
			8:  "Get Attributes",
			9:  "Get Security",
			10: "Encrypt",
			11: "Decrypt",
			12: "Mount",
			13: "Unmount",
			14: "Open",
			99: "Other",
		},
		"1007/activity_id": {
			0:  "Unknown",
			1:  "Launch",
			2:  "Terminate",
			3:  "Open",
			4:  "Inject",
			5:  "Set User ID",
			99: "Other",
		},
		"2004/activity_id": {
			0:  "Unknown",
			1:  "Create",
			2:  "Update",
			3:  "Close",
			99: "Other",
		},
		"4001/activity_id": {
			0:  "Unknown",
			1:  "Open",
			2:  "Close",
			3:  "Reset",
			4:  "Fail",
			5:  "Refuse",
			6:  "Traffic",
			7:  "Listen",
			99: "Other",
		},
		"4002/activity_id": {
			0:  "Unknown",
			1:  "Connect",
			2:  "Delete",
			3:  "Get",
			4:  "Head",
			5:  "Options",
			6:  "Post",
			7:  "Put",
			8:  "Trace",
			9:  "Patch",
			99: "Other",
		},
		"5019/activity_id": {
			0:  "Unknown",
			1:  "Log",
			2:  "Collect",
			99: "Other",
		},
		"2004/status_id": {
			0:  "Unknown",
			1:  "New",
			2:  "In Progress",
			3:  "Suppressed",
			4:  "Resolved",
			5:  "Archived",
			6:  "Deleted",
			99: "Other",
		},
		"severity_id": {
			0:  "Unknown",
			1:  "Informational",
			2:  "Low",
			3:  "Medium",
			4:  "High",
			5:  "Critical",
			6:  "Fatal",
			99: "Other",
		},
		"status_id": {
			0:  "Unknown",
			1:  "Success",
			2:  "Failure",
			99: "Other",
		},
		"action_id": {
			0:  "Unknown",
			1:  "Allowed",
			2:  "Denied",
			3:  "Observed",
			4:  "Modified",
			99: "Other",
		},
		"disposition_id": {
			0:  "Unknown",
			1:  "Allowed",
			2:  "Blocked",
			3:  "Quarantined",
			4:  "Isolated",
			5:  "Deleted",
			6:  "Dropped",
			7:  "Custom Action",
			8:  "Approved",
			9:  "Restored",
			10: "Exonerated",
			11: "Corrected",
			12: "Partially Corrected",
			13: "Uncorrected",
			14: "Delayed",
			15: "Detected",
			16: "No Action",
			17: "Logged",
			18: "Tagged",
			19: "Alert",
			20: "Count",
			21: "Reset",
			22: "Captcha",
			23: "Challenge",
			24: "Access Revoked",
			25: "Rejected",
			26: "Unauthorized",
			27: "Error",
			99: "Other",
		},
		"state_id": {
			0:  "Unknown",
			1:  "Disabled",
			2:  "Enabled",
			99: "Other",
		},
		"security_level_id": {
			0:  "Unknown",
			1:  "Secure",
			2:  "At Risk",
			3:  "Compromised",
			99: "Other",
		},
		"confidence_id": {
			0:  "Unknown",
			1:  "Low",
			2:  "Medium",
			3:  "High",
			99: "Other",
		},
		"device.type_id": {
			0:  "Unknown",
			1:  "Server",
			2:  "Desktop",
			3:  "Laptop",
			4:  "Tablet",
			5:  "Mobile",
			6:  "Virtual",
			7:  "IOT",
			8:  "Browser",
			9:  "Firewall",
			10: "Switch",
			11: "Hub",
			12: "Router",
			13: "IDS",
			14: "IPS",
			15: "Load Balancer",
			99: "Other",
		},
		"os.type_id": {
			0:   "Unknown",
			99:  "Other",
			100: "Windows",
			101: "Windows Mobile",
			200: "Linux",
			201: "Android",
			300: "macOS",
			301: "iOS",
			302: "iPadOS",
			400: "Solaris",
			401: "AIX",
			402: "HP-UX",
		},
		"file.type_id": {
			0:  "Unknown",
			1:  "Regular File",
			2:  "Folder",
			3:  "Character Device",
			4:  "Block Device",
			5:  "Local Socket",
			6:  "Named Pipe",
			7:  "Symbolic Link",
			8:  "Executable File",
			99: "Other",
		},
		"fingerprint.algorithm_id": {
			0:  "Unknown",
			1:  "MD5",
			2:  "SHA-1",
			3:  "SHA-256",
			4:  "SHA-512",
			5:  "CTPH",
			6:  "TLSH",
			7:  "quickXorHash",
			8:  "SHA-224",
			9:  "SHA-384",
			10: "SHA-512/224",
			11: "SHA-512/256",
			12: "SHA3-224",
			13: "SHA3-256",
			14: "SHA3-384",
			15: "SHA3-512",
			16: "xxHash H3 64-bit",
			17: "xxHash H3 128-bit",
			18: "Imphash",
			19: "NPF",
			20: "HASSH",
			99: "Other",
		},
		"network_connection_info.direction_id": {
			0:  "Unknown",
			1:  "Inbound",
			2:  "Outbound",
			3:  "Lateral",
			4:  "Local",
			99: "Other",
		},
		"network_connection_info.protocol_ver_id": {
			0:  "Unknown",
			4:  "Internet Protocol version 4 (IPv4)",
			6:  "Internet Protocol version 6 (IPv6)",
			99: "Other",
		},
		"user.type_id": {
			0:  "Unknown",
			1:  "User",
			2:  "Admin",
			3:  "System",
			4:  "Service",
			99: "Other",
		},
	}
}

// Caption returns the OCSF caption of id in the enum named by key (see
// captionTable), or "" when the id is not defined there.
func caption(key string, id int) string { return tables().captions[key][id] }

// sibling returns the caption sibling for id: the enum caption, or for
// OtherID the producer's own label (which must then be set and must not be
// the word "Other"). It reports an error naming the attribute for an
// unknown id.
func sibling(key string, name *attr, id int, label string) (string, error) {
	c, ok := tables().captions[key][id]
	if !ok {
		return "", fmt.Errorf("ocsf: %s: %d is not a defined value", name.String(), id)
	}
	if id == OtherID {
		if label == "" || label == c {
			return "", fmt.Errorf("ocsf: %s is %d (Other): its label must name the source value", name.String(), id)
		}
		return label, nil
	}
	return c, nil
}

// setSibling sets *dst to the caption sibling of id (sibling, with *dst
// as the label), writing only when that changes it: objects already
// filled, such as the actor a connection's request events share, are
// only read, so events sharing them can be marshalled concurrently.
func setSibling(dst *string, key string, name *attr, id int) error {
	v, err := sibling(key, name, id, *dst)
	if err != nil {
		return err
	}
	setString(dst, v)
	return nil
}

// setString writes v to *dst unless it is already there.
func setString(dst *string, v string) {
	if *dst != v {
		*dst = v
	}
}

// attr names an attribute in Marshal's errors ("actor.process.file.type_id"):
// a chain of names whose dotted form is built only when an error is
// reported, so filling an event allocates nothing.
type attr struct {
	parent *attr
	name   string
	index  int // >= 0: the element name[index] of an array
}

// at names a top-level attribute.
func at(name string) *attr { return &attr{name: name, index: -1} }

// child names the attribute name of a.
func (a *attr) child(name string) *attr { return &attr{parent: a, name: name, index: -1} }

// elem names element i of the array attribute name of a.
func (a *attr) elem(name string, i int) *attr { return &attr{parent: a, name: name, index: i} }

func (a *attr) String() string { return string(a.append(nil)) }

// append writes the dotted name (copying it: nothing of a reaches the
// result, so a chain of attrs stays on the stack).
func (a *attr) append(b []byte) []byte {
	if a == nil {
		return b
	}
	if a.parent != nil {
		b = append(a.parent.append(b), '.')
	}
	b = append(b, a.name...)
	if a.index >= 0 {
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(a.index), 10)
		b = append(b, ']')
	}
	return b
}

// captionTables are the tables Marshal and the event constructors read:
// classTable, captionTable, and computed from them the captions key of
// each class's activity_id and type_name for each type_uid
// (class_uid*100 + activity_id) the tables define.
type captionTables struct {
	classes      map[int]ClassInfo
	captions     map[string]map[int]string
	activityKeys map[int]string
	typeNames    map[int64]string
}

// tables builds the caption tables on first use. Built at package
// initialisation they cost every binary linking this package 0.03-0.06 ms
// and 17 kB of heap in 139 allocations at each start (GODEBUG=inittrace=1,
// 2026-12-02), sandbox-supervisor and palisade-init included, whose
// `run -- /bin/true` emits no event unless --events is given.
var tables = sync.OnceValue(func() *captionTables {
	t := &captionTables{classes: classTable(), captions: captionTable()}
	t.activityKeys = make(map[int]string, len(t.classes))
	t.typeNames = make(map[int64]string)
	for uid, info := range t.classes {
		k := strconv.Itoa(uid) + "/activity_id"
		t.activityKeys[uid] = k
		for id, c := range t.captions[k] {
			t.typeNames[int64(uid)*100+int64(id)] = info.Name + ": " + c
		}
	}
	return t
})

// EnumCaptions returns a copy of the enum caption tables Marshal uses,
// keyed as described at captionTable, so validators and tests can compare
// them with the OCSF definitions.
func EnumCaptions() map[string]map[int]string {
	captions := tables().captions
	out := make(map[string]map[int]string, len(captions))
	for k, t := range captions {
		c := make(map[int]string, len(t))
		for id, s := range t {
			c[id] = s
		}
		out[k] = c
	}
	return out
}

// Classes returns the caption, category_uid and category_name of every
// class Palisade emits, keyed by class_uid.
func Classes() map[int]ClassInfo {
	classes := tables().classes
	out := make(map[int]ClassInfo, len(classes))
	for uid, c := range classes {
		out[uid] = c
	}
	return out
}
