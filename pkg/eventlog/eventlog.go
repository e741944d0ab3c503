// Package eventlog reads one sandbox's OCSF events back from the JSONL
// file they were written to, for `sandbox-supervisor logs`: it keeps the
// lines that belong to the sandbox (an events file may be shared), filters
// by time and by denial, and renders a denial as one human line:
//
//	DENY /usr/bin/curl(4242) -> pastebin.com:443 policy_denied/no_matching_endpoint
//	DENY-FS /usr/bin/cat(4242) read /etc/shadow
//
// Lines are decoded with encoding/json into a small struct of the fields
// it reads; a line that is not an event is skipped.
package eventlog

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

// Event is the part of an OCSF event that logs reads.
type Event struct {
	Time         int64  `json:"time"` // ms since the epoch
	ClassUID     int    `json:"class_uid"`
	ActivityName string `json:"activity_name"`
	TypeName     string `json:"type_name"`
	ActionID     int    `json:"action_id"`
	StatusCode   string `json:"status_code"`
	StatusDetail string `json:"status_detail"`
	Message      string `json:"message"`
	Metadata     struct {
		UID string `json:"uid"`
	} `json:"metadata"`
	Device struct {
		Name string `json:"name"`
	} `json:"device"`
	Actor struct {
		Process struct {
			PID     int    `json:"pid"`
			Sandbox string `json:"sandbox"`
			File    struct {
				Path string `json:"path"`
			} `json:"file"`
		} `json:"process"`
	} `json:"actor"`
	Dst struct {
		Hostname string `json:"hostname"`
		IP       string `json:"ip"`
		Port     int    `json:"port"`
	} `json:"dst_endpoint"`
	File struct {
		Path string `json:"path"`
	} `json:"file"`
	HTTPRequest struct {
		Method string `json:"http_method"`
		URL    struct {
			Hostname string `json:"hostname"`
			Path     string `json:"path"`
			Port     int    `json:"port"`
		} `json:"url"`
	} `json:"http_request"`
}

// OCSF classes logs knows.
const (
	classFileSystem = 1001
	classNetwork    = 4001
	classHTTP       = 4002
	actionDenied    = 2
)

// Parse decodes one line; ok is false for anything that is not an event.
func Parse(line []byte) (Event, bool) {
	var e Event
	if err := json.Unmarshal(line, &e); err != nil || e.ClassUID == 0 {
		return Event{}, false
	}
	return e, true
}

// Filter selects a sandbox's events.
type Filter struct {
	Sandbox string
	// Since drops events before it (zero: none); the sandbox's creation
	// time keeps an earlier sandbox of the same name out.
	Since time.Time
	// Denied keeps only denials (network, HTTP, filesystem).
	Denied bool
}

// Match reports whether e passes f.
func (f Filter) Match(e Event) bool {
	if e.Metadata.UID != f.Sandbox && e.Device.Name != f.Sandbox && e.Actor.Process.Sandbox != f.Sandbox {
		return false
	}
	if !f.Since.IsZero() && time.UnixMilli(e.Time).Before(f.Since) {
		return false
	}
	return !f.Denied || IsDenial(e)
}

// IsDenial reports whether e records something the policy refused: a
// network connection, an HTTP request or a filesystem access.
func IsDenial(e Event) bool {
	switch e.ClassUID {
	case classNetwork, classHTTP, classFileSystem:
		return e.ActionID == actionDenied
	}
	return false
}

// Line renders e as one human line: a denial in the DENY forms above,
// anything else as its time, type and message. The agent names the
// executables and files a line shows, and logs prints it to a root
// operator's terminal: control characters (C0, DEL, C1), line and
// paragraph separators, bidirectional overrides and U+FFFD (an invalid
// byte) are written as Go escapes (\x1b, \n, \u202e) by package
// termsafe, so a name can neither drive the terminal nor forge a second
// line.
func Line(e Event) string { return termsafe.String(line(e)) }

func line(e Event) string {
	p := e.Actor.Process
	who := p.File.Path
	if who == "" {
		who = "?"
	}
	if p.PID > 0 {
		who += "(" + strconv.Itoa(p.PID) + ")"
	}
	if IsDenial(e) {
		switch e.ClassUID {
		case classFileSystem:
			return fmt.Sprintf("DENY-FS %s %s %s", who, strings.ToLower(e.ActivityName), e.File.Path)
		case classHTTP:
			u := e.HTTPRequest.URL
			return fmt.Sprintf("DENY %s -> %s %s%s %s", who, e.HTTPRequest.Method, hostPort(u.Hostname, "", u.Port), u.Path, reason(e))
		default:
			return fmt.Sprintf("DENY %s -> %s %s", who, hostPort(e.Dst.Hostname, e.Dst.IP, e.Dst.Port), reason(e))
		}
	}
	t := time.UnixMilli(e.Time).UTC().Format("2006-01-02T15:04:05.000Z")
	return fmt.Sprintf("%s %s %s", t, e.TypeName, e.Message)
}

func hostPort(host, ip string, port int) string {
	if host == "" {
		host = ip
	}
	if port > 0 {
		return host + ":" + strconv.Itoa(port)
	}
	return host
}

// reason is status_code/status_detail; a detail that is a sentence rather
// than a reason code is left out.
func reason(e Event) string {
	d := strings.TrimPrefix(e.StatusDetail, "audit: ")
	if d == "" || strings.ContainsAny(d, " :") {
		return e.StatusCode
	}
	return e.StatusCode + "/" + d
}
