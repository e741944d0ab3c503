package actionevent

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrEmpty is returned by FromOCSF for a blank line. Collectors skip blank
// lines rather than treating them as malformed.
var ErrEmpty = errors.New("empty line")

// FormatError says why a line is not a usable OCSF event. Field names the
// offending attribute path when one is known.
type FormatError struct {
	Field  string
	Reason string
}

func (e *FormatError) Error() string {
	if e.Field == "" {
		return "ocsf: " + e.Reason
	}
	return "ocsf: " + e.Field + ": " + e.Reason
}

// Limits on copied strings, so that one hostile line cannot make a huge
// record. Longer values are cut at a UTF-8 boundary.
const (
	maxShort  = 256  // names, hosts, methods, ids
	maxPath   = 2048 // paths
	maxReason = 1024 // free text
)

// The OCSF 1.8.0 attributes the mapping reads. Everything else in the line
// is ignored (and so never copied: command lines, headers, bodies).
type ocsfEvent struct {
	ClassUID     *int   `json:"class_uid"`
	ClassName    string `json:"class_name"`
	ActivityID   int    `json:"activity_id"`
	ActivityName string `json:"activity_name"`
	Time         *int64 `json:"time"` // ms since the epoch
	TimeDT       string `json:"time_dt"`

	ActionID      int    `json:"action_id"`
	Action        string `json:"action"`
	DispositionID int    `json:"disposition_id"`
	SeverityID    *int   `json:"severity_id"`
	Severity      string `json:"severity"`
	StatusDetail  string `json:"status_detail"`
	Message       string `json:"message"`

	Metadata struct {
		UID    string   `json:"uid"`
		Labels []string `json:"labels"` // an "agent:<id>" label names the agent
	} `json:"metadata"`
	Actor       ocsfActor        `json:"actor"`
	Process     *ocsfProcess     `json:"process"`
	DstEndpoint *ocsfEndpoint    `json:"dst_endpoint"`
	URL         *ocsfURL         `json:"url"`
	HTTPRequest *ocsfHTTPRequest `json:"http_request"`
	File        *ocsfFile        `json:"file"`
	Rule        *ocsfRule        `json:"firewall_rule"`
	Policy      *ocsfPolicy      `json:"policy"`
	StatusCode  string           `json:"status_code"`
	FindingInfo *ocsfFindingInfo `json:"finding_info"`
	Evidences   []ocsfEvidence   `json:"evidences"`
	Device      struct {
		Container struct {
			Name string `json:"name"`
		} `json:"container"`
	} `json:"device"`
	Unmapped ocsfUnmapped `json:"unmapped"`
}

type ocsfFindingInfo struct {
	Title string `json:"title"`
}

type ocsfUnmapped struct {
	SandboxID      string `json:"sandbox_id"`
	PolicyName     string `json:"policy_name"`
	PolicyChecksum string `json:"policy_checksum"`
	PolicySHA256   string `json:"policy_sha256"`
}

type ocsfHash struct {
	AlgorithmID int    `json:"algorithm_id"`
	Algorithm   string `json:"algorithm"`
	Value       string `json:"value"`
}

type ocsfActor struct {
	Process *ocsfProcess `json:"process"`
}

type ocsfProcess struct {
	PID     int64     `json:"pid"`
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Sandbox string    `json:"sandbox"`
	File    *ocsfFile `json:"file"`
}

type ocsfFile struct {
	Path   string     `json:"path"`
	Name   string     `json:"name"`
	Hashes []ocsfHash `json:"hashes"`
}

type ocsfEndpoint struct {
	Hostname string `json:"hostname"`
	Domain   string `json:"domain"`
	IP       string `json:"ip"`
	Port     int    `json:"port"`
}

type ocsfURL struct {
	Hostname  string `json:"hostname"`
	Port      int    `json:"port"`
	Path      string `json:"path"`
	URLString string `json:"url_string"`
}

type ocsfHTTPRequest struct {
	HTTPMethod string   `json:"http_method"`
	URL        *ocsfURL `json:"url"`
}

type ocsfRule struct {
	Name    string `json:"name"`
	UID     string `json:"uid"`
	Version string `json:"version"`
	Desc    string `json:"desc"`
}

type ocsfPolicy struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

type ocsfEvidence struct {
	Actor       *ocsfActor       `json:"actor"`
	Process     *ocsfProcess     `json:"process"`
	DstEndpoint *ocsfEndpoint    `json:"dst_endpoint"`
	URL         *ocsfURL         `json:"url"`
	HTTPRequest *ocsfHTTPRequest `json:"http_request"`
}

// Known OCSF 1.8.0 classes: caption, record category, activity captions.
type classInfo struct {
	name       string
	category   string
	activities map[int]string
}

// activityOther is OCSF's activity_id 99: an activity the class does not
// enumerate, named by the producer's activity_name.
const activityOther = 99

var netActivities = map[int]string{0: "Unknown", 1: "Open", 2: "Close", 3: "Reset", 4: "Fail", 5: "Refuse", 6: "Traffic", 7: "Listen", 99: "Other"}

var classes = map[int]classInfo{
	0:    {"Base Event", CategoryOther, map[int]string{0: "Unknown", 99: "Other"}},
	1001: {"File System Activity", CategoryFile, map[int]string{0: "Unknown", 1: "Create", 2: "Read", 3: "Update", 4: "Delete", 5: "Rename", 6: "Set Attributes", 7: "Set Security", 8: "Get Attributes", 9: "Get Security", 10: "Encrypt", 11: "Decrypt", 12: "Mount", 13: "Unmount", 14: "Open", 99: "Other"}},
	1007: {"Process Activity", CategoryProcess, map[int]string{0: "Unknown", 1: "Launch", 2: "Terminate", 3: "Open", 4: "Inject", 5: "Set User ID", 99: "Other"}},
	2004: {"Detection Finding", CategoryDetection, map[int]string{0: "Unknown", 1: "Create", 2: "Update", 3: "Close", 99: "Other"}},
	4001: {"Network Activity", CategoryNetwork, netActivities},
	4002: {"HTTP Activity", CategoryHTTP, map[int]string{0: "Unknown", 1: "Connect", 2: "Delete", 3: "Get", 4: "Head", 5: "Options", 6: "Post", 7: "Put", 8: "Trace", 9: "Patch", 99: "Other"}},
	4007: {"SSH Activity", CategoryNetwork, netActivities},
	5019: {"Device Config State Change", CategoryPolicy, map[int]string{0: "Unknown", 1: "Log", 2: "Collect", 99: "Other"}},
	6002: {"Application Lifecycle", CategoryApplication, map[int]string{0: "Unknown", 1: "Install", 2: "Remove", 3: "Start", 4: "Stop", 5: "Restart", 6: "Enable", 7: "Disable", 8: "Update", 99: "Other"}},
	6003: {"API Activity", CategoryApplication, map[int]string{0: "Unknown", 1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}},
}

// FromOCSF normalises one OCSF 1.8.0 JSON line into a record for agentID.
// An empty agentID takes the agent from an "agent:<id>" metadata label.
// Classes 4001, 4002, 1001, 1007, 2004 and 5019 get their specific mapping; any
// other class gets the generic one (actor, destination, action, reason).
// A blank line returns ErrEmpty; a line that is not a JSON object, lacks
// class_uid or time, or has a wrongly typed attribute returns a
// *FormatError naming the attribute.
func FromOCSF(line []byte, agentID string) (Record, error) {
	line = trimSpace(line)
	if len(line) == 0 {
		return Record{}, ErrEmpty
	}
	if line[0] != '{' {
		return Record{}, &FormatError{Reason: "not a JSON object"}
	}
	var ev ocsfEvent
	if err := decodeOCSF(line, &ev); err != nil {
		return Record{}, formatError(err)
	}
	return fromEvent(&ev, line, agentID)
}

// fromEvent maps a decoded line (line is the trimmed input, the event id's
// preimage) to a record.
func fromEvent(ev *ocsfEvent, line []byte, agentID string) (Record, error) {
	if ev.ClassUID == nil {
		return Record{}, &FormatError{Field: "class_uid", Reason: "missing"}
	}
	if agentID == "" {
		for _, l := range ev.Metadata.Labels {
			if a, ok := strings.CutPrefix(l, "agent:"); ok {
				agentID = clip(a, maxShort) // the last such label wins
			}
		}
	}
	r := Record{
		Schema:  Schema,
		EventID: ID(agentID, line),
		Layer:   Layer,
		AgentID: clip(agentID, maxShort),
	}
	switch {
	case ev.Time != nil:
		if *ev.Time <= 0 {
			return Record{}, &FormatError{Field: "time", Reason: fmt.Sprintf("%d is not a positive epoch time in milliseconds", *ev.Time)}
		}
		r.Time = time.UnixMilli(*ev.Time).UTC()
	case ev.TimeDT != "":
		t, err := time.Parse(time.RFC3339Nano, ev.TimeDT)
		if err != nil {
			return Record{}, &FormatError{Field: "time_dt", Reason: "not an RFC 3339 time"}
		}
		r.Time = t.UTC()
	default:
		return Record{}, &FormatError{Field: "time", Reason: "missing"}
	}

	uid := *ev.ClassUID
	r.Source.ClassUID = uid
	r.Source.ActivityID = ev.ActivityID
	info, known := classes[uid]
	if known {
		r.Category = info.category
		r.Source.ClassName = info.name
		r.Source.ActivityName = info.activities[ev.ActivityID]
		if ev.ActivityID == activityOther && ev.ActivityName != "" {
			// 99 (Other) is the producer's own activity: its name is the
			// information (5019 Policy Load, Confinement Applied), the
			// caption "Other" says nothing.
			r.Source.ActivityName = clip(ev.ActivityName, maxShort)
		}
	} else {
		r.Category = CategoryOther
	}
	if r.Source.ClassName == "" {
		r.Source.ClassName = clip(ev.ClassName, maxShort)
	}
	if r.Source.ActivityName == "" {
		r.Source.ActivityName = clip(ev.ActivityName, maxShort)
	}

	r.Action = action(ev)
	r.Severity = severity(ev)

	// Actor: for Process Activity the subject of the event is the process
	// launched or terminated inside the sandbox; elsewhere the initiator.
	proc := ev.Actor.Process
	if uid == 1007 && ev.Process != nil {
		proc = ev.Process
	}
	if proc == nil {
		proc = ev.Process
	}
	dst, u, req := ev.DstEndpoint, ev.URL, ev.HTTPRequest
	if uid == 2004 {
		for _, e := range ev.Evidences {
			if proc == nil {
				if e.Process != nil {
					proc = e.Process
				} else if e.Actor != nil {
					proc = e.Actor.Process
				}
			}
			if dst == nil {
				dst = e.DstEndpoint
			}
			if u == nil {
				u = e.URL
			}
			if req == nil {
				req = e.HTTPRequest
			}
		}
	}
	if proc != nil {
		r.Actor = actor(proc)
	}
	r.Target = target(dst, u, req)
	if uid == 1001 && ev.File != nil && r.Target.Path == "" {
		// The file a File System Activity acted on (a refused access).
		p := ev.File.Path
		if p == "" {
			p = ev.File.Name
		}
		r.Target.Path = clip(filePath.Replace(p), maxPath)
	}

	// Policy: the OCSF policy object names the policy in force and carries
	// its checksum as uid ("sha256:<hex>"); the matched firewall_rule names
	// the network_policies entry that decided. Older producers put the
	// checksum in firewall_rule.version or .uid, or under unmapped.
	if p := ev.Policy; p != nil {
		r.Policy.Name = clip(p.Name, maxShort)
		if checksumLike(p.UID) {
			r.Policy.Checksum = strings.ToLower(p.UID)
		}
	}
	if ev.Rule != nil {
		r.Policy.Rule = clip(ev.Rule.Name, maxShort)
		if r.Policy.Checksum == "" {
			switch {
			case checksumLike(ev.Rule.Version):
				r.Policy.Checksum = strings.ToLower(ev.Rule.Version)
			case checksumLike(ev.Rule.UID):
				r.Policy.Checksum = strings.ToLower(ev.Rule.UID)
			}
		}
	}
	if r.Policy.Name == "" {
		r.Policy.Name = clip(ev.Unmapped.PolicyName, maxShort)
	}
	if r.Policy.Checksum == "" {
		switch {
		case checksumLike(ev.Unmapped.PolicyChecksum):
			r.Policy.Checksum = strings.ToLower(ev.Unmapped.PolicyChecksum)
		case checksumLike(ev.Unmapped.PolicySHA256):
			r.Policy.Checksum = strings.ToLower(ev.Unmapped.PolicySHA256)
		}
	}

	// Sandbox: the most specific attribute that names it.
	switch {
	case ev.Unmapped.SandboxID != "":
		r.SandboxID = ev.Unmapped.SandboxID
	case proc != nil && proc.Sandbox != "":
		r.SandboxID = proc.Sandbox
	case ev.Metadata.UID != "":
		r.SandboxID = ev.Metadata.UID
	case ev.Device.Container.Name != "":
		r.SandboxID = ev.Device.Container.Name
	}
	r.SandboxID = clip(r.SandboxID, maxShort)

	switch {
	case ev.StatusDetail != "":
		r.Reason = ev.StatusDetail
	case ev.Message != "":
		r.Reason = ev.Message
	case ev.StatusCode != "":
		r.Reason = ev.StatusCode
	case ev.FindingInfo != nil && ev.FindingInfo.Title != "":
		r.Reason = ev.FindingInfo.Title
	case ev.Rule != nil && ev.Rule.Desc != "":
		r.Reason = ev.Rule.Desc
	}
	r.Reason = clip(ScrubText(r.Reason), maxReason)
	return r, nil
}

func action(ev *ocsfEvent) string {
	switch ev.ActionID {
	case 1:
		return ActionAllow
	case 2:
		return ActionDeny
	case 3, 4:
		return ActionAudit
	}
	switch ev.DispositionID {
	case 1, 8: // Allowed, Approved
		return ActionAllow
	case 2, 3, 4, 5, 6, 21, 24, 25, 26: // Blocked, Quarantined, Isolated, Deleted, Dropped, Reset, Access Revoked, Rejected, Unauthorized
		return ActionDeny
	case 0:
	default:
		return ActionAudit
	}
	switch strings.ToLower(ev.Action) {
	case "allowed", "allow":
		return ActionAllow
	case "denied", "deny", "blocked":
		return ActionDeny
	}
	// A refused connection with no explicit action is a denial.
	if ev.ClassUID != nil && (*ev.ClassUID == 4001 || *ev.ClassUID == 4007) && ev.ActivityID == 5 {
		return ActionDeny
	}
	return ActionAudit
}

func severity(ev *ocsfEvent) string {
	if ev.SeverityID != nil {
		if s, ok := severities[*ev.SeverityID]; ok {
			return s
		}
		return "other"
	}
	s := strings.ToLower(ev.Severity)
	for _, v := range severities {
		if s == v {
			return v
		}
	}
	return "unknown"
}

func actor(p *ocsfProcess) Actor {
	a := Actor{PID: p.PID, Process: clip(p.Name, maxShort)}
	if a.PID < 0 {
		a.PID = 0
	}
	if p.File != nil {
		a.Binary = p.File.Path
		for _, h := range p.File.Hashes {
			v := strings.ToLower(h.Value)
			if (h.AlgorithmID == 3 || strings.EqualFold(h.Algorithm, "SHA-256") || strings.EqualFold(h.Algorithm, "sha256")) && isHex(v, 64) {
				a.BinarySHA256 = v
				break
			}
		}
	}
	if a.Binary == "" {
		a.Binary = p.Path
	}
	a.Binary = clip(a.Binary, maxPath)
	return a
}

func target(dst *ocsfEndpoint, u *ocsfURL, req *ocsfHTTPRequest) Target {
	var t Target
	if req != nil {
		t.Method = method(req.HTTPMethod)
		if req.URL != nil {
			u = req.URL
		}
	}
	if u != nil {
		t.Host = u.Hostname
		t.Port = u.Port
		t.Path = u.Path
		if u.URLString != "" && (t.Host == "" || t.Path == "") {
			if pu, err := url.Parse(u.URLString); err == nil {
				if t.Host == "" {
					t.Host = pu.Hostname()
				}
				if t.Port == 0 {
					t.Port = atoiPort(pu.Port())
				}
				if t.Path == "" {
					t.Path = pu.EscapedPath()
				}
			}
		}
	}
	if dst != nil {
		if t.Host == "" {
			switch {
			case dst.Hostname != "":
				t.Host = dst.Hostname
			case dst.Domain != "":
				t.Host = dst.Domain
			default:
				t.Host = dst.IP
			}
		}
		if t.Port == 0 {
			t.Port = dst.Port
		}
	}
	t.Host = clip(cleanHost(t.Host), maxShort)
	t.Path = clip(cleanPath(t.Path), maxPath)
	if t.Port < 0 || t.Port > 65535 {
		t.Port = 0
	}
	return t
}

func atoiPort(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' || n > 65535 {
			return 0
		}
		n = n*10 + int(s[i]-'0')
	}
	if n > 65535 {
		return 0
	}
	return n
}

// cleanHost drops user information and lower-cases the name.
func cleanHost(h string) string {
	if i := strings.LastIndexByte(h, '@'); i >= 0 {
		h = h[i+1:]
	}
	return strings.ToLower(strings.TrimSpace(h))
}

// cleanPath keeps only the path of what may be a full URL or a path with a
// query string or fragment.
// filePath escapes the characters target.path never carries ('?' and
// '#', which would start a URL's query or fragment) in a file path, and
// '%' so that the escaping is reversible.
var filePath = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")

func cleanPath(p string) string {
	if strings.Contains(p, "://") {
		if u, err := url.Parse(p); err == nil {
			p = u.EscapedPath()
		} else {
			p = ""
		}
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	return p
}

func method(m string) string {
	m = strings.ToUpper(strings.TrimSpace(m))
	if len(m) > 32 {
		return ""
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return ""
		}
	}
	return m
}

// checksumLike accepts "sha256:<64 hex>" or "<64 hex>", any case.
func checksumLike(s string) bool {
	s = strings.ToLower(s)
	s = strings.TrimPrefix(s, "sha256:")
	return isHex(s, 64)
}

// ScrubText removes the secret-bearing parts of URLs and paths embedded in
// free text: in every space- or quote-delimited token that contains "://"
// the user information, query string and fragment are dropped; in every
// token that starts with '/' the query string and fragment are dropped.
// Text with neither "://" nor '?' nor '#' is returned unchanged.
func ScrubText(s string) string {
	if !strings.Contains(s, "://") && !strings.ContainsAny(s, "?#") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for len(s) > 0 {
		// copy delimiters through
		i := 0
		for i < len(s) && isURLEnd(s[i]) {
			i++
		}
		b.WriteString(s[:i])
		s = s[i:]
		j := 0
		for j < len(s) && !isURLEnd(s[j]) {
			j++
		}
		tok := s[:j]
		s = s[j:]
		if k := strings.Index(tok, "://"); k >= 0 {
			// keep any prefix before the scheme (e.g. "url=")
			start := k
			for start > 0 && isSchemeChar(tok[start-1]) {
				start--
			}
			b.WriteString(tok[:start])
			b.WriteString(scrubURL(tok[start:]))
		} else if strings.HasPrefix(tok, "/") {
			if k := strings.IndexAny(tok, "?#"); k >= 0 {
				tok = tok[:k]
			}
			b.WriteString(tok)
		} else {
			b.WriteString(tok)
		}
	}
	return b.String()
}

func scrubURL(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	// user information sits between "://" and the first '@' before any '/'.
	i := strings.Index(raw, "://")
	rest := raw[i+3:]
	slash := strings.IndexByte(rest, '/')
	auth := rest
	if slash >= 0 {
		auth = rest[:slash]
	}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	return raw[:i+3] + rest
}

func isSchemeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isURLEnd(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '"' || c == '\'' || c == '<' || c == '>' || c == '`'
}

// clip cuts s to at most n bytes at a UTF-8 boundary and drops control
// characters other than tab.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
		for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
			r, size := utf8.DecodeLastRuneInString(s)
			if r != utf8.RuneError || size != 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	if strings.IndexFunc(s, isControl) >= 0 {
		s = strings.Map(func(r rune) rune {
			if isControl(r) {
				return -1
			}
			return r
		}, s)
	}
	return s
}

func isControl(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }
