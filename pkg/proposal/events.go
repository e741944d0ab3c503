package proposal

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is what was denied.
type Kind string

// Denial kinds.
const (
	KindNetwork    Kind = "network"    // a connection (CONNECT, forwarded request, transparent TCP) refused by policy
	KindHTTP       Kind = "http"       // a request refused by an endpoint's L7 rules
	KindSSRF       Kind = "ssrf"       // a connection to an address the SSRF guard refuses
	KindBypass     Kind = "bypass"     // a direct connection the fence captured
	KindDNS        Kind = "dns"        // a name policy DNS refused
	KindFilesystem Kind = "filesystem" // an access Landlock refused
)

// Denial is one aggregated denial: every event with the same key (all
// fields but Count, First, Last and Ancestors), folded.
type Denial struct {
	Sandbox string `json:"sandbox" yaml:"sandbox"`
	Kind    Kind   `json:"kind" yaml:"kind"`
	// Binary is the executable that was refused ("" when unattributed).
	Binary string `json:"binary,omitempty" yaml:"binary,omitempty"`
	// Host and Port are the destination (network, http, ssrf, bypass;
	// Host alone for dns).
	Host string `json:"host,omitempty" yaml:"host,omitempty"`
	Port int    `json:"port,omitempty" yaml:"port,omitempty"`
	// Transport is the proxy's kind of connection: connect, http, tcp
	// (transparent) or fence.
	Transport string `json:"transport,omitempty" yaml:"transport,omitempty"`
	// Method and Path are an L7 denial's request (the normalised path,
	// never the query).
	Method string `json:"method,omitempty" yaml:"method,omitempty"`
	Path   string `json:"path,omitempty" yaml:"path,omitempty"`
	// File and Rights are a filesystem denial's path and the Landlock
	// rights that blocked it.
	File   string   `json:"file,omitempty" yaml:"file,omitempty"`
	Rights []string `json:"rights,omitempty" yaml:"rights,flow,omitempty"`
	// Reason is the denial reason (no_matching_endpoint, l7_no_rule,
	// not_eligible, ...).
	Reason string `json:"reason,omitempty" yaml:"reason,omitempty"`
	// Entry is the policy entry the proxy named (firewall_rule.name).
	Entry string `json:"entry,omitempty" yaml:"entry,omitempty"`
	// Policy is the checksum of the policy in force when it was denied
	// (the first event's).
	Policy string `json:"-" yaml:"-"`
	// Ancestors are the caller's ancestors' executables, nearest first
	// (the first event's).
	Ancestors []string `json:"-" yaml:"-"`

	Count int       `json:"count" yaml:"count"`
	First time.Time `json:"first_seen" yaml:"first_seen"`
	Last  time.Time `json:"last_seen" yaml:"last_seen"`
}

// key is what makes two denials the same.
type key struct {
	sandbox, binary, host, transport, method, path, file, rights, reason, entry string
	kind                                                                        Kind
	port                                                                        int
}

func (d *Denial) key() key {
	return key{d.Sandbox, d.Binary, d.Host, d.Transport, d.Method, d.Path, d.File, strings.Join(d.Rights, ","), d.Reason, d.Entry, d.Kind, d.Port}
}

// String is the denial on one line, without counts.
func (d *Denial) String() string {
	who := d.Binary
	if who == "" {
		who = "?"
	}
	switch d.Kind {
	case KindFilesystem:
		return fmt.Sprintf("%s %s (%s)", who, d.File, strings.Join(d.Rights, ","))
	case KindHTTP:
		return fmt.Sprintf("%s -> %s %s%s (%s)", who, d.Method, hostPort(d.Host, d.Port), d.Path, d.Reason)
	case KindDNS:
		return fmt.Sprintf("policy DNS %s (%s)", d.Host, d.Reason)
	}
	via := ""
	if d.Transport == "tcp" {
		via = " via native TCP"
	}
	return fmt.Sprintf("%s -> %s%s (%s)", who, hostPort(d.Host, d.Port), via, d.Reason)
}

func hostPort(h string, p int) string {
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if p == 0 {
		return h
	}
	return h + ":" + strconv.Itoa(p)
}

// event is the part of an OCSF event the aggregation reads.
type event struct {
	Time       int64  `json:"time"`
	ClassUID   int    `json:"class_uid"`
	ActivityID int    `json:"activity_id"`
	Activity   string `json:"activity_name"`
	ActionID   int    `json:"action_id"`
	StatusCode string `json:"status_code"`
	Detail     string `json:"status_detail"`
	Count      int    `json:"count"`
	StartTime  int64  `json:"start_time"`
	EndTime    int64  `json:"end_time"`
	Metadata   struct {
		UID string `json:"uid"`
	} `json:"metadata"`
	Device struct {
		Name string `json:"name"`
	} `json:"device"`
	Actor struct {
		Process *process `json:"process"`
	} `json:"actor"`
	Dst struct {
		Hostname string `json:"hostname"`
		IP       string `json:"ip"`
		Port     int    `json:"port"`
		Domain   string `json:"domain"`
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
	FirewallRule struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
		Type string `json:"type"`
	} `json:"firewall_rule"`
	Policy struct {
		UID string `json:"uid"`
	} `json:"policy"`
	Unmapped struct {
		EgressProxy *struct {
			Kind     string `json:"kind"`
			Listener string `json:"listener"`
			Reason   string `json:"reason"`
			// Denials, on a count event, tallies the folded denials by
			// (method, path, reason): up to 16 of them.
			Denials []struct {
				Method string `json:"method"`
				Path   string `json:"path"`
				Reason string `json:"reason"`
				Count  int    `json:"count"`
			} `json:"denials"`
		} `json:"egress_proxy"`
		Landlock *struct {
			Blockers []string `json:"blockers"`
		} `json:"landlock"`
		PolicyDNS *struct {
			QueryType string `json:"query_type"`
			// Names, on a count event, tallies the refused names: up to
			// 16 of them.
			Names []struct {
				Name  string `json:"name"`
				Count int    `json:"count"`
			} `json:"names"`
		} `json:"policy_dns"`
	} `json:"unmapped"`
}

type process struct {
	PID     int    `json:"pid"`
	Sandbox string `json:"sandbox"`
	File    *struct {
		Path string `json:"path"`
	} `json:"file"`
	Parent *process `json:"parent_process"`
}

// OCSF values the aggregation reads (docs/events.md).
const (
	classFile    = 1001
	classNetwork = 4001
	classHTTP    = 4002
	actionDenied = 2
	activityOpen = 1
	refuse       = 5
	maxAncestors = 64
)

// parse returns the denials an event line carries: one, or for a count
// event that tallies what it folded, one per tally (and the rest of its
// count under the event's own fields). None for lines that are not
// events or not denials.
func parse(line []byte) []Denial {
	var e event
	if err := json.Unmarshal(line, &e); err != nil || e.ClassUID == 0 {
		return nil
	}
	d, ok := parseOne(e)
	if !ok {
		return nil
	}
	return split(e, d)
}

// split spreads a count event over the tallies it carries.
func split(e event, d Denial) []Denial {
	var out []Denial
	rest := d.Count
	add := func(c Denial, n int) {
		if n > 0 {
			c.Count = n
			out = append(out, c)
			rest -= n
		}
	}
	switch {
	case d.Kind == KindDNS && e.Unmapped.PolicyDNS != nil:
		for _, t := range e.Unmapped.PolicyDNS.Names {
			c := d
			c.Host = t.Name
			add(c, min(t.Count, rest))
		}
	case e.Unmapped.EgressProxy != nil && (d.Kind == KindNetwork || d.Kind == KindHTTP):
		for _, t := range e.Unmapped.EgressProxy.Denials {
			c := d
			c.Method, c.Path, c.Reason = t.Method, t.Path, cmp.Or(t.Reason, d.Reason)
			c.Kind = KindNetwork
			if isL7Reason(c.Reason) && c.Method != "" {
				c.Kind = KindHTTP
			} else {
				c.Method, c.Path = "", ""
			}
			add(c, min(t.Count, rest))
		}
	}
	if rest > 0 {
		d.Count = rest
		out = append(out, d)
	}
	return out
}

func isL7Reason(r string) bool { return strings.HasPrefix(r, "l7_") }

func parseOne(e event) (d Denial, ok bool) {
	d.Sandbox = cmp.Or(e.Metadata.UID, e.Device.Name)
	if p := e.Actor.Process; p != nil {
		if d.Sandbox == "" {
			d.Sandbox = p.Sandbox
		}
		d.Binary = p.exe()
		for a := p.Parent; a != nil && len(d.Ancestors) < maxAncestors; a = a.Parent {
			d.Ancestors = append(d.Ancestors, a.exe())
		}
	}
	d.Policy = strings.TrimPrefix(e.Policy.UID, "sha256:")
	d.Count = max(e.Count, 1)
	first, last := e.StartTime, e.EndTime
	if first == 0 {
		first = e.Time
	}
	if last == 0 {
		last = e.Time
	}
	d.First, d.Last = time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
	d.Reason = e.Detail
	switch e.ClassUID {
	case classFile:
		if e.ActionID != actionDenied {
			return Denial{}, false
		}
		d.Kind, d.File = KindFilesystem, e.File.Path
		if e.Unmapped.Landlock != nil {
			d.Rights = slices.Clone(e.Unmapped.Landlock.Blockers)
		}
		d.Reason = e.StatusCode
		return d, true
	case classHTTP:
		if e.ActionID != actionDenied {
			return Denial{}, false
		}
		d.Transport, d.Entry = "http", e.FirewallRule.Name
		if e.FirewallRule.Name == "default-deny" {
			d.Entry = ""
		}
		d.Host, d.Port = e.HTTPRequest.URL.Hostname, e.HTTPRequest.URL.Port
		switch {
		case e.StatusCode == "ssrf_denied":
			d.Kind = KindSSRF
		case e.StatusCode != "policy_denied":
			return Denial{}, false
		case isL7Reason(d.Reason):
			// A request the endpoint's L7 rules refused: its method and path.
			d.Kind = KindHTTP
			d.Method = cmp.Or(e.HTTPRequest.Method, e.Activity)
			d.Path = e.HTTPRequest.URL.Path
			return d, d.Method != "" && d.Host != ""
		default:
			// A forwarded request refused before its rules (the host, the
			// port, the binary): a connection denial.
			d.Kind = KindNetwork
		}
		return d, d.Host != ""
	case classNetwork:
		return fromNetwork(e, d)
	}
	return Denial{}, false
}

func (p *process) exe() string {
	if p.File == nil {
		return ""
	}
	return p.File.Path
}

func fromNetwork(e event, d Denial) (Denial, bool) {
	if e.FirewallRule.Type == "policy_dns" {
		// dns_denied: a name in no endpoint (dns_refused before the
		// policy DNS answered every name of the policy).
		if e.StatusCode != "dns_denied" && e.StatusCode != "dns_refused" {
			return Denial{}, false
		}
		d.Kind, d.Host, d.Binary, d.Ancestors = KindDNS, e.Dst.Domain, "", nil
		return d, d.Host != ""
	}
	if e.ActionID != actionDenied {
		return Denial{}, false
	}
	d.Host, d.Port = cmp.Or(e.Dst.Hostname, e.Dst.IP), e.Dst.Port
	if u := e.Unmapped.EgressProxy; u != nil {
		d.Transport = u.Kind
	}
	if e.FirewallRule.Name != "default-deny" {
		d.Entry = e.FirewallRule.Name
	}
	switch {
	case e.ActivityID == refuse || e.StatusCode == "bypass_denied":
		d.Kind, d.Entry = KindBypass, ""
	case e.StatusCode == "ssrf_denied":
		d.Kind = KindSSRF
	case e.StatusCode == "policy_denied":
		d.Kind = KindNetwork
	default:
		return Denial{}, false
	}
	return d, d.Host != ""
}

// Filter selects the denials an Aggregator keeps.
type Filter struct {
	// Sandbox keeps one sandbox's denials ("" all).
	Sandbox string
	// Since keeps denials last seen at or after it (zero: all).
	Since time.Time
}

// Aggregator folds denials. The zero value is ready; it is not safe for
// concurrent use.
type Aggregator struct {
	Filter Filter
	byKey  map[key]*Denial
	lines  int
}

// Add reads one event line and reports whether it held a denial the
// filter keeps.
func (a *Aggregator) Add(line []byte) bool {
	ds := parse(line)
	if len(ds) == 0 {
		return false
	}
	d0 := ds[0]
	if a.Filter.Sandbox != "" && d0.Sandbox != a.Filter.Sandbox || !a.Filter.Since.IsZero() && d0.Last.Before(a.Filter.Since) {
		return false
	}
	if a.byKey == nil {
		a.byKey = map[key]*Denial{}
	}
	a.lines++
	for _, d := range ds {
		k := d.key()
		if cur, ok := a.byKey[k]; ok {
			cur.Count += d.Count
			if d.First.Before(cur.First) {
				cur.First = d.First
			}
			if d.Last.After(cur.Last) {
				cur.Last = d.Last
			}
			continue
		}
		a.byKey[k] = &d
	}
	return true
}

// Events is how many event lines were folded in.
func (a *Aggregator) Events() int { return a.lines }

// Denials returns the aggregated denials in a fixed order: sandbox,
// kind, binary, destination or path, reason.
func (a *Aggregator) Denials() []Denial {
	out := make([]Denial, 0, len(a.byKey))
	for _, d := range a.byKey {
		c := *d
		c.Rights = slices.Clone(d.Rights)
		c.Ancestors = slices.Clone(d.Ancestors)
		out = append(out, c)
	}
	slices.SortFunc(out, compareDenials)
	return out
}

func compareDenials(a, b Denial) int {
	return cmp.Or(cmp.Compare(a.Sandbox, b.Sandbox), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Binary, b.Binary),
		cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Transport, b.Transport),
		cmp.Compare(a.Method, b.Method), cmp.Compare(a.Path, b.Path), cmp.Compare(a.File, b.File),
		cmp.Compare(strings.Join(a.Rights, ","), strings.Join(b.Rights, ",")), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Entry, b.Entry))
}
