package landlockaudit

import (
	"fmt"
	"path"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// Denial is one access a sandbox's Landlock domain refused, assembled
// from the records of one audit event: the access record (rights,
// object), the domain record (first denial of a domain) and the syscall
// record (who tried).
type Denial struct {
	Millis   int64    // when, epoch milliseconds
	Domain   string   // Landlock domain id, hex
	Blockers []string // "fs.read_file", "scope.signal", ...
	Path     string   // the refused path ("" for scope denials without one)
	// OPID and OComm name the target process of a scope.signal denial.
	OPID  int
	OComm string
	// PID, Exe and Comm name the process that tried (host pid); 0 / ""
	// when the kernel wrote no syscall record for it.
	PID        int
	Exe, Comm  string
	Count      int   // repeats folded into this event (1: none)
	FirstMilli int64 // first folded repeat when Count > 1
}

// verbs maps each Landlock right to the File System Activity activity and
// the verb the event message uses.
var verbs = map[string]struct {
	activity int
	name     string
	verb     string
}{
	"fs.execute":                 {ocsf.FileOther, "Execute", "execute"},
	"fs.write_file":              {ocsf.FileUpdate, "", "write"},
	"fs.read_file":               {ocsf.FileRead, "", "read"},
	"fs.read_dir":                {ocsf.FileRead, "", "list"},
	"fs.remove_dir":              {ocsf.FileDelete, "", "remove"},
	"fs.remove_file":             {ocsf.FileDelete, "", "remove"},
	"fs.make_char":               {ocsf.FileCreate, "", "create in"},
	"fs.make_dir":                {ocsf.FileCreate, "", "create in"},
	"fs.make_reg":                {ocsf.FileCreate, "", "create in"},
	"fs.make_sock":               {ocsf.FileCreate, "", "create in"},
	"fs.make_fifo":               {ocsf.FileCreate, "", "create in"},
	"fs.make_block":              {ocsf.FileCreate, "", "create in"},
	"fs.make_sym":                {ocsf.FileCreate, "", "create in"},
	"fs.refer":                   {ocsf.FileRename, "", "link or rename"},
	"fs.truncate":                {ocsf.FileUpdate, "", "truncate"},
	"fs.ioctl_dev":               {ocsf.FileOther, "Ioctl", "ioctl"},
	"scope.signal":               {ocsf.FileOther, "Signal", "signal"},
	"scope.abstract_unix_socket": {ocsf.FileOther, "Connect", "connect to"},
}

// Verb is the human word for the first blocking right ("read", "write",
// "create", "execute", "truncate", ...).
func (d Denial) Verb() string {
	if len(d.Blockers) > 0 {
		if v, ok := verbs[d.Blockers[0]]; ok {
			return v.verb
		}
		return d.Blockers[0]
	}
	return "access"
}

// OCSF describes the denial for a File System Activity event.
func (d Denial) OCSF(sandbox string, policy *ocsf.PolicyRef) ocsf.FileDenial {
	fd := ocsf.FileDenial{ActivityID: ocsf.FileOther, ActivityName: "Access", Verb: d.Verb(),
		Rights: d.Blockers, Domain: d.Domain, Policy: policy}
	if len(d.Blockers) > 0 {
		if v, ok := verbs[d.Blockers[0]]; ok {
			fd.ActivityID, fd.ActivityName = v.activity, v.name
		} else {
			fd.ActivityName = d.Blockers[0]
		}
	}
	switch {
	case d.has("scope.signal"):
		fd.Target = ocsf.File{Name: d.OComm, Path: fmt.Sprintf("/proc/%d", d.OPID), TypeID: ocsf.OtherID, Type: "Process"}
		if fd.Target.Name == "" {
			fd.Target.Name = fmt.Sprint(d.OPID)
		}
	case d.has("scope.abstract_unix_socket"):
		name := strings.TrimPrefix(d.Path, "\x00")
		fd.Target = ocsf.File{Name: "@" + name, TypeID: 5}
	default:
		fd.Target = ocsf.File{Name: path.Base(d.Path), Path: d.Path, TypeID: ocsf.FileTypeRegular}
		if d.has("fs.read_dir") || d.has("fs.make_dir") || d.has("fs.remove_dir") {
			fd.Target.TypeID = ocsf.FileTypeFolder
		}
		if d.Path == "" {
			fd.Target.Name = "unknown"
		}
	}
	p := &ocsf.Process{PID: d.PID, Name: d.Comm, Sandbox: sandbox}
	if d.Exe != "" {
		p.File = ocsf.ExeFile(d.Exe, "")
	}
	if d.PID == 0 {
		p.UID = sandbox + "/unknown"
	}
	fd.Actor = ocsf.Actor{Process: p}
	return fd
}

func (d Denial) has(right string) bool {
	for _, b := range d.Blockers {
		if b == right {
			return true
		}
	}
	return false
}

// Event is the File System Activity (1001) event for the denial, stamped
// with the time the kernel logged it and, for folded repeats, the count
// and the span.
func (d Denial) Event(src *ocsf.Source, policy *ocsf.PolicyRef) *ocsf.FileActivity {
	e := src.FileDenied(d.OCSF(src.Sandbox, policy))
	if d.Millis > 0 {
		e.Time = d.Millis
	}
	if d.Count > 1 {
		e.Count = d.Count
		if d.FirstMilli > 0 && d.FirstMilli <= e.Time {
			e.StartTime, e.EndTime = d.FirstMilli, e.Time
		}
	}
	return e
}
