package proxy

import (
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
)

// Outcome classes: the status_code of every event and the "error" of a
// denial body.
const (
	OutcomeAllowed        = "allowed"
	OutcomePolicyDenied   = "policy_denied"
	OutcomeSSRFDenied     = "ssrf_denied"
	OutcomeBadRequest     = "bad_request"
	OutcomeUpstreamFailed = "upstream_failed"
	OutcomeBypassDenied   = "bypass_denied"
	// OutcomeClientGone: the client closed the connection before it
	// could be attributed (its process exited mid-request). Not a
	// denial: nothing was decided. Nothing was dialled either, exactly
	// as for a denial.
	OutcomeClientGone = "client_gone"
)

// Reasons the proxy itself gives (the engine and the SSRF guard give the
// rest).
const (
	ReasonAttributionFailed = "attribution_failed"
	// ReasonAttributionIncomplete: the attribution backend has no record
	// of who connected the socket (ErrAttributionIncomplete); the holder
	// alone is never decided on.
	ReasonAttributionIncomplete = "attribution_incomplete"
	// ReasonClientClosed goes with OutcomeClientGone.
	ReasonClientClosed = "client_closed_before_attribution"
	// ReasonConnectorDenied: the socket was handed on, and the process
	// that connected it is not allowed (or can no longer be named).
	ReasonConnectorDenied  = "connector_not_allowed"
	ReasonIdentityMismatch = "identity_mismatch"
	// ReasonForeignCode: the caller (or the ancestor or connector the
	// decision needed) maps executable code from a file the sandbox
	// could have written: it lost its binary's identity, and what it is
	// without it is not allowed.
	ReasonForeignCode = "foreign_code"
	// ReasonUndecidedSender: after the decision, a process that is
	// neither the decided one nor its descendant sent on the connection;
	// the kernel refused it and the proxy closed the connection.
	ReasonUndecidedSender  = "undecided_sender"
	ReasonIdentityCheck    = "identity_check_failed"
	ReasonInvalidHost      = "invalid_host"
	ReasonHeadTooLarge     = "head_too_large"
	ReasonHeadTimeout      = "head_timeout"
	ReasonMalformed        = "malformed_request"
	ReasonConnectTimeout   = "connect_timeout"
	ReasonConnectFailed    = "connect_failed"
	ReasonUpstreamError    = "upstream_error"
	ReasonDirectConnection = "direct_connection"
	// The operator's upstream (corporate) proxy did not open a chained
	// tunnel: not reachable, TLS with it failed, it answered 407, 403 or
	// another refusal, its answer was not HTTP, or it did not answer in
	// time. The client gets 502 (504 for the timeouts).
	ReasonUpstreamProxyUnreachable = "upstream_proxy_unreachable"
	ReasonUpstreamProxyTLS         = "upstream_proxy_tls"
	ReasonUpstreamProxyAuth        = "upstream_proxy_auth_required"
	ReasonUpstreamProxyDenied      = "upstream_proxy_denied"
	ReasonUpstreamProxyRefused     = "upstream_proxy_refused"
	ReasonUpstreamProxyProtocol    = "upstream_proxy_protocol"
	ReasonUpstreamProxyTimeout     = "upstream_proxy_timeout"
)

// Listener names.
const (
	ListenerProxy = "proxy"
	ListenerFence = "fence"
	// ListenerTransparent serves connections to policy DNS synthetic
	// addresses (protocol: tcp endpoints).
	ListenerTransparent = "transparent"
)

// Request kinds.
const (
	KindConnect = "connect"
	KindHTTP    = "http"
	KindFence   = "fence"
	KindTCP     = "tcp"
)

// FirewallRuleType is firewall_rule.type in every event: the engine that
// decided.
const FirewallRuleType = "palisade-egress-proxy"

// Record is the one summary of one proxied connection: the single source
// of its OCSF event, its metrics and its log line. Field names are
// constant whatever happened.
type Record struct {
	ConnID     uint64
	Listener   string // ListenerProxy or ListenerFence
	Kind       string // KindConnect, KindHTTP, KindFence; "" before a valid head
	Start, End time.Time
	Client     netip.AddrPort // the peer the proxy saw
	Local      netip.AddrPort // the listener address, or the fence's original destination
	Host       string         // canonical requested host ("" before a valid head)
	Port       int
	Upstream   netip.AddrPort // the address dialled (zero when none)
	Identity   *Identity      // nil when unattributed
	Generation int64
	PolicySHA  string
	Outcome    string // Outcome* constant
	Entry      string // matched policy entry ("" when none)
	// EndpointID is the policy endpoint decided on (Verdict.EndpointID),
	// whose status the record's result updates.
	EndpointID string
	Reason     string
	// Rule names the endpoint's rule an L7 refusal rests on, as a field
	// path within the endpoint ("websocket.deny_text[0]"); "" when no
	// single rule decided.
	Rule string
	// Call is what a body-inspected request (mcp, json-rpc, graphql)
	// asked the server to do, as its inspector named it (l7.Decision's
	// Call: names only, checked by l7.EventName).
	Call      l7.Call
	Audit     bool
	L7Rules   bool // the endpoint has L7 rules
	L7Checked bool // and this request was checked against them (forward HTTP)
	Status    int  // HTTP status sent to the client (0: none)
	Method    string
	Proto     string   // HTTP version of a request ("" means HTTP/1.1)
	URL       *url.URL // request URL (redacted when emitted: no query)
	// PerRequest marks the record of one request on an inspected
	// connection: its event is always an HTTP Activity.
	PerRequest bool
	BytesUp    int64  // client to upstream
	BytesDown  int64  // upstream to client
	Cause      string // upstream error text (no secrets: addresses and syscall errors)
	Mismatch   *MismatchError
	// Foreign is the process whose foreign code a refusal rests on
	// (ReasonForeignCode): its Detection Finding names it and the file.
	Foreign *ForeignProcess
	// Violation is a send the kernel refused on this connection after
	// the decision (the send guard): the real sender, for the Detection
	// Finding.
	Violation *SendViolation
	// refused: the connection's own decision (attribution, guard, pin or
	// policy) refused it; a send violation reported after that keeps the
	// decision's reason.
	refused bool
	// guard is the connection's send guard binding (nil without one);
	// every record of a keep-alive connection shares it.
	guard *connGuard
	// Mapping is the policy DNS mapping of a transparent connection (nil
	// for the other listeners).
	Mapping *MappingInfo
	// Route is how a CONNECT tunnel's upstream connection was made when
	// an upstream proxy is configured (nil otherwise, and before a dial).
	Route *Route
	// CredentialRefused marks a request refused for its credential
	// placeholders (Reason says why); CredentialMisuse, one whose
	// placeholder went to an endpoint its credential is not bound to
	// (a Detection Finding goes with its event).
	CredentialRefused bool
	CredentialMisuse  bool
	// scrub, when set, removes the credential values written into the
	// request from what is recorded about it (Cause).
	scrub func(string) string

	// protocolRefused marks a request its endpoint's inspector refused
	// as one its protocol cannot accept (l7.Invalid: 400, 413): for the
	// endpoint's status a policy result, not a client's malformed
	// request (seed 004: MCP version and body rejections are
	// PolicyDenied).
	protocolRefused bool

	// silent marks a connection that closed without sending a byte: no
	// request, no event.
	silent bool
	// shared is the event context of a request on an inspected
	// connection, built once per connection (nil: built per event).
	shared *sharedEventConn
	// Count and First are set by the denial rate limiter: the record
	// stands for Count occurrences since First. Tallies, on a report
	// that stands for folded denials, lists up to 16 of their distinct
	// (method, path, reason, call) with counts.
	Count   int
	First   time.Time
	Tallies []DenialTally
}

// Allowed reports whether the request was let through (even if the
// upstream then failed).
func (r *Record) Allowed() bool {
	return r.Outcome == OutcomeAllowed || r.Outcome == OutcomeUpstreamFailed
}

func (r *Record) binary() string {
	if r.Identity == nil {
		return ""
	}
	return r.Identity.Exe
}

func (r *Record) pid() int {
	if r.Identity == nil {
		return 0
	}
	return r.Identity.PID
}

// agentPID is the pid a denial tells the agent: the caller's pid in its
// own (the sandbox's) pid namespace, never the host pid that events
// carry; 0 when unknown or when the attributor cannot translate.
func (p *Proxy) agentPID(r *Record) int {
	pider, ok := p.cfg.Attributor.(SandboxPIDer)
	if r.Identity == nil || r.Identity.PID <= 0 || !ok {
		return 0
	}
	return pider.SandboxPID(r.Identity.PID)
}

// sharedEventConn is what the events of every request on one inspected
// connection have in common: the connection context (actor chain,
// endpoints) with its captions filled, and the connection's uids. It is
// built once and only read afterwards, by events emitted from the
// connection's goroutines (h2 streams finish concurrently).
type sharedEventConn struct {
	conn    ocsf.Conn
	corrUID string // metadata.correlation_uid
	connUID string // connection_info.uid
}

func (r *Record) sharedEvents(sandbox string) *sharedEventConn {
	s := &sharedEventConn{conn: r.conn(sandbox), corrUID: correlationUID(sandbox, r.ConnID), connUID: connectionUID(sandbox, r.ConnID)}
	if err := s.conn.Fill(); err != nil {
		return nil // each event fails to marshal and says why
	}
	return s
}

func correlationUID(sandbox string, id uint64) string {
	return sandbox + ":conn:" + strconv.FormatUint(id, 10)
}

func connectionUID(sandbox string, id uint64) string {
	return sandbox + ":" + strconv.FormatUint(id, 10)
}

func (r *Record) conn(sandbox string) ocsf.Conn {
	c := ocsf.Conn{}
	if r.Client.IsValid() {
		c.Src = &ocsf.NetworkEndpoint{IP: r.Client.Addr().Unmap().String(), Port: int(r.Client.Port())}
	}
	dst := &ocsf.NetworkEndpoint{Port: r.Port}
	if a, err := netip.ParseAddr(r.Host); err == nil {
		dst.IP = a.String()
	} else {
		dst.Hostname = r.Host
	}
	if r.Upstream.IsValid() {
		dst.IP = r.Upstream.Addr().Unmap().String()
	}
	if dst.Hostname == "" && dst.IP == "" && r.Local.IsValid() {
		dst.IP, dst.Port = r.Local.Addr().Unmap().String(), int(r.Local.Port())
	}
	if dst.Hostname != "" || dst.IP != "" {
		c.Dst = dst
	}
	c.Actor = r.Identity.actor(sandbox)
	return c
}

// maxAncestors bounds the parent chain put into events.
const maxAncestors = 64

func (id *Identity) actor(sandbox string) *ocsf.Actor {
	if id == nil || (id.PID == 0 && id.Exe == "") {
		return nil
	}
	proc := &ocsf.Process{PID: id.PID, Sandbox: sandbox}
	if id.Exe != "" {
		proc.Name = path.Base(id.Exe)
		proc.File = ocsf.ExeFile(id.Exe, id.SHA256)
	}
	cur := proc
	for i, a := range id.Ancestors {
		if i == maxAncestors {
			break
		}
		pp := &ocsf.Process{PID: a.PID, Sandbox: sandbox}
		if a.Exe != "" {
			pp.Name = path.Base(a.Exe)
			pp.File = ocsf.ExeFile(a.Exe, "")
		}
		cur.ParentProcess = pp
		cur = pp
	}
	return &ocsf.Actor{Process: proc}
}

func (r *Record) decision() ocsf.Decision {
	rule := &ocsf.FirewallRule{
		Name:    r.Entry,
		Type:    FirewallRuleType,
		Version: strconv.FormatInt(r.Generation, 10),
	}
	if rule.Name == "" {
		rule.Name = "default-deny"
	}
	if r.PolicySHA != "" {
		rule.UID = "sha256:" + r.PolicySHA
	}
	reason := r.Reason
	if r.Audit {
		reason = "audit: " + reason
	}
	return ocsf.Decision{Allowed: r.Allowed(), Rule: rule, Code: r.Outcome, Reason: reason}
}

// unmapped carries what OCSF has no attribute for, under one constant key.
func (r *Record) unmapped() map[string]any {
	return map[string]any{"egress_proxy": r.unmappedProxy()}
}

// unmappedProxy is unmapped.egress_proxy.
func (r *Record) unmappedProxy() proxyUnmapped {
	u := proxyUnmapped{
		Audit:       r.Audit,
		BytesDown:   r.BytesDown,
		BytesUp:     r.BytesUp,
		Cause:       r.refusalCause(),
		Enforcement: enforcement(r.Audit),
		Generation:  r.Generation,
		Kind:        r.Kind,
		L7:          l7State(r.L7Rules, r.L7Checked),
		Listener:    r.Listener,
		Reason:      r.Reason,
		L7Rule:      r.Rule,
		Transparent: r.Mapping,
		Denials:     r.Tallies,
	}
	if r.Call != (l7.Call{}) {
		u.L7Call = &r.Call
	}
	if rt := r.Route; rt != nil {
		u.UpstreamProxy = &upstreamProxyUnmapped{ConnectTarget: rt.Target, NoProxy: rt.NoProxy, Proxy: rt.Proxy, Route: "direct"}
		if rt.Chained() {
			u.UpstreamProxy.Route = "chained"
		}
	}
	if id := r.Identity; id != nil {
		u.Attribution = id.Backend
		if c := id.Connector; c != nil {
			u.Connector = &connectorUnmapped{Exe: c.Exe, PID: c.PID}
		}
	}
	fp := r.Foreign
	if fp == nil {
		fp = r.Identity.foreign()
	}
	if fp != nil {
		u.ForeignCode = &foreignUnmapped{File: fp.Code.File, PID: fp.PID, Reasons: fp.Code.Reasons}
	}
	return u
}

// proxyUnmapped is unmapped.egress_proxy. A struct rather than a map, in
// the keys' sorted order (what a map encoded to), because every request
// of an inspected connection is an event and a map costs a sort per
// encoding.
type proxyUnmapped struct {
	// Attribution is the backend that named the caller ("" when none did).
	Attribution string `json:"attribution,omitempty"`
	Audit       bool   `json:"audit"`
	BytesDown   int64  `json:"bytes_down"`
	BytesUp     int64  `json:"bytes_up"`
	// Cause says why a caller could not be attributed or its identity
	// not checked (refusalCause): on attribution_failed,
	// attribution_incomplete and identity_check_failed refusals and fence
	// captures only.
	Cause string `json:"cause,omitempty"`
	// Connector is a handed-on socket's recorded connector.
	Connector *connectorUnmapped `json:"connector,omitempty"`
	// Denials lists the folded denials of a count report by (method,
	// path, reason, call), with counts.
	Denials     []DenialTally `json:"denials,omitempty"`
	Enforcement string        `json:"enforcement"`
	// ForeignCode is the caller, ancestor or connector that lost its
	// binary's identity, when one did.
	ForeignCode *foreignUnmapped `json:"foreign_code,omitempty"`
	Generation  int64            `json:"generation"`
	Kind        string           `json:"kind"`
	L7          string           `json:"l7"`
	// L7Call is the call a body-inspected request made (Record.Call).
	L7Call *l7.Call `json:"l7_call,omitempty"`
	// L7Rule is the endpoint rule an L7 refusal rests on (Record.Rule).
	L7Rule   string `json:"l7_rule,omitempty"`
	Listener string `json:"listener"`
	Reason   string `json:"reason"`
	// Transparent is the mapping of a transparent TCP connection.
	Transparent *MappingInfo `json:"transparent,omitempty"`
	// UpstreamProxy says how a CONNECT tunnel went when an upstream
	// proxy is configured.
	UpstreamProxy *upstreamProxyUnmapped `json:"upstream_proxy,omitempty"`
}

// upstreamProxyUnmapped is unmapped.egress_proxy.upstream_proxy: the
// upstream proxy's URL (never a credential), whether the tunnel was
// chained through it or dialled directly, the CONNECT target sent to it,
// and the NO_PROXY entry that made a tunnel direct.
type upstreamProxyUnmapped struct {
	ConnectTarget string `json:"connect_target,omitempty"`
	NoProxy       string `json:"no_proxy,omitempty"`
	Proxy         string `json:"proxy"`
	Route         string `json:"route"`
}

// foreignUnmapped is unmapped.egress_proxy.foreign_code.
type foreignUnmapped struct {
	File    string   `json:"file"`
	PID     int      `json:"pid"`
	Reasons []string `json:"reasons"`
}

// connectorUnmapped is unmapped.egress_proxy.connector.
type connectorUnmapped struct {
	Exe string `json:"exe"`
	PID int    `json:"pid"`
}

// AppendJSON writes what encoding/json writes for u (the struct tags
// above), without reflection: unmapped.egress_proxy is in every event,
// one per request on an inspected tunnel (ocsf.JSONAppender;
// TestUnmappedAppendJSON compares the two).
func (u proxyUnmapped) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	if u.Attribution != "" {
		b = append(b, `"attribution":`...)
		b = ocsf.AppendJSONString(b, u.Attribution)
		b = append(b, ',')
	}
	b = append(b, `"audit":`...)
	b = strconv.AppendBool(b, u.Audit)
	b = append(b, `,"bytes_down":`...)
	b = strconv.AppendInt(b, u.BytesDown, 10)
	b = append(b, `,"bytes_up":`...)
	b = strconv.AppendInt(b, u.BytesUp, 10)
	if u.Cause != "" {
		b = append(b, `,"cause":`...)
		b = ocsf.AppendJSONString(b, u.Cause)
	}
	if c := u.Connector; c != nil {
		b = append(b, `,"connector":{"exe":`...)
		b = ocsf.AppendJSONString(b, c.Exe)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(c.PID), 10)
		b = append(b, '}')
	}
	if len(u.Denials) > 0 {
		b = append(b, `,"denials":[`...)
		for i, d := range u.Denials {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"method":`...)
			b = ocsf.AppendJSONString(b, d.Method)
			b = append(b, `,"path":`...)
			b = ocsf.AppendJSONString(b, d.Path)
			b = append(b, `,"reason":`...)
			b = ocsf.AppendJSONString(b, d.Reason)
			if d.Call != (l7.Call{}) {
				b = appendCall(append(b, `,"l7_call":`...), &d.Call)
			}
			b = append(b, `,"count":`...)
			b = strconv.AppendInt(b, int64(d.Count), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"enforcement":`...)
	b = ocsf.AppendJSONString(b, u.Enforcement)
	if f := u.ForeignCode; f != nil {
		b = append(b, `,"foreign_code":{"file":`...)
		b = ocsf.AppendJSONString(b, f.File)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(f.PID), 10)
		b = append(b, `,"reasons":`...)
		if f.Reasons == nil {
			b = append(b, "null"...)
		} else {
			b = ocsf.AppendJSONStrings(b, f.Reasons)
		}
		b = append(b, '}')
	}
	b = append(b, `,"generation":`...)
	b = strconv.AppendInt(b, u.Generation, 10)
	b = append(b, `,"kind":`...)
	b = ocsf.AppendJSONString(b, u.Kind)
	b = append(b, `,"l7":`...)
	b = ocsf.AppendJSONString(b, u.L7)
	if c := u.L7Call; c != nil {
		b = appendCall(append(b, `,"l7_call":`...), c)
	}
	if u.L7Rule != "" {
		b = append(b, `,"l7_rule":`...)
		b = ocsf.AppendJSONString(b, u.L7Rule)
	}
	b = append(b, `,"listener":`...)
	b = ocsf.AppendJSONString(b, u.Listener)
	b = append(b, `,"reason":`...)
	b = ocsf.AppendJSONString(b, u.Reason)
	if m := u.Transparent; m != nil {
		b = append(b, `,"transparent":{"generation":`...)
		b = strconv.AppendInt(b, m.Generation, 10)
		if m.MappingID != "" {
			b = append(b, `,"mapping_id":`...)
			b = ocsf.AppendJSONString(b, m.MappingID)
		}
		if m.Name != "" {
			b = append(b, `,"name":`...)
			b = ocsf.AppendJSONString(b, m.Name)
		}
		if len(m.Real) > 0 {
			b = ocsf.AppendJSONStrings(append(b, `,"real":`...), m.Real)
		}
		b = append(b, `,"synthetic":`...)
		b = ocsf.AppendJSONString(b, m.Synthetic)
		b = append(b, '}')
	}
	if up := u.UpstreamProxy; up != nil {
		b = append(b, `,"upstream_proxy":{`...)
		if up.ConnectTarget != "" {
			b = append(b, `"connect_target":`...)
			b = ocsf.AppendJSONString(b, up.ConnectTarget)
			b = append(b, ',')
		}
		if up.NoProxy != "" {
			b = append(b, `"no_proxy":`...)
			b = ocsf.AppendJSONString(b, up.NoProxy)
			b = append(b, ',')
		}
		b = append(b, `"proxy":`...)
		b = ocsf.AppendJSONString(b, up.Proxy)
		b = append(b, `,"route":`...)
		b = ocsf.AppendJSONString(b, up.Route)
		b = append(b, '}')
	}
	return append(b, '}')
}

// MarshalJSON is AppendJSON for encoding/json.
func (u proxyUnmapped) MarshalJSON() ([]byte, error) { return u.AppendJSON(nil), nil }

// events turns the record into its OCSF events: exactly one summary
// event, plus a Detection Finding for a bypass or an identity mismatch.
func (r *Record) events(src *ocsf.Source) []ocsf.Event {
	var c ocsf.Conn
	if r.shared != nil {
		c = r.shared.conn
	} else {
		c = r.conn(src.Sandbox)
	}
	d := r.decision()
	var sum ocsf.Event
	var base *ocsf.Base
	var ci **ocsf.ConnectionInfo
	switch r.summaryClass() {
	case summaryRefuse:
		e := src.NetworkRefuse(c, d)
		sum, base, ci = e, &e.Base, &e.ConnectionInfo
	case summaryPerRequest:
		proto := r.Proto
		if proto == "" {
			proto = "HTTP/1.1"
		}
		e := src.HTTPRequest(c, ocsf.Request{Method: r.Method, URL: r.URL, Version: proto, Status: r.Status}, d)
		sum, base, ci = e, &e.Base, &e.ConnectionInfo
	case summaryFail:
		e := src.NetworkFail(c, d.Rule, r.Outcome, causeError(r.Reason, r.Cause))
		sum, base, ci = e, &e.Base, &e.ConnectionInfo
	case summaryAbandoned:
		e := src.NetworkAbandoned(c, r.Outcome, r.Reason)
		sum, base, ci = e, &e.Base, &e.ConnectionInfo
	case summaryRequest:
		e := src.HTTPRequest(c, ocsf.Request{Method: r.Method, URL: r.URL, Version: "HTTP/1.1", Status: r.Status}, d)
		sum, base, ci = e, &e.Base, &e.ConnectionInfo
	default:
		e := src.NetworkOpen(c, d)
		sum, base, ci = e, &e.Base, &e.ConnectionInfo
	}
	r.stamp(base, src.Sandbox)
	if *ci != nil {
		if r.shared != nil {
			(*ci).UID = r.shared.connUID
		} else {
			(*ci).UID = connectionUID(src.Sandbox, r.ConnID)
		}
	}
	out := []ocsf.Event{sum}
	switch r.findingClass() {
	case findingBypass:
		f := src.BypassAttempt(c, "connection captured by the network fence: egress must go through the proxy")
		r.stamp(&f.Base, src.Sandbox)
		out = append(out, f)
	case findingMismatch:
		f := src.IdentityMismatch(c.Actor, r.Mismatch.Exe, r.Mismatch.Pinned, r.Mismatch.Seen)
		r.stamp(&f.Base, src.Sandbox)
		out = append(out, f)
	case findingSender:
		v := r.Violation
		f := src.UndecidedSender(c, ocsf.SenderInfo{PID: v.PID, Exe: v.Exe, Comm: v.Comm})
		r.stamp(&f.Base, src.Sandbox)
		out = append(out, f)
	case findingForeign:
		fp := r.Foreign
		f := src.ForeignCode(c.Actor, ocsf.ForeignCodeInfo{PID: fp.PID, Exe: fp.Exe, File: fp.Code.File, Reasons: fp.Code.Reasons})
		r.stamp(&f.Base, src.Sandbox)
		out = append(out, f)
	case findingCredential:
		f := src.CredentialMisuse(c, r.Reason)
		r.stamp(&f.Base, src.Sandbox)
		out = append(out, f)
	}
	return out
}

// summaryClass is which event a record's summary is (events builds it).
type summaryClass int

const (
	// summaryOpen: a Network Activity Open, allowed or denied: a CONNECT
	// tunnel or transparent connection, a refused forwarded request's
	// host, port or binary, a malformed request.
	summaryOpen       summaryClass = iota
	summaryRefuse                  // a fence capture: Network Activity Refuse
	summaryPerRequest              // one request on an inspected connection: HTTP Activity
	summaryFail                    // an upstream failure: Network Activity Fail
	summaryAbandoned               // the client left before attribution: Network Activity Close
	summaryRequest                 // a forwarded request that was read: HTTP Activity
)

func (r *Record) summaryClass() summaryClass {
	switch {
	case r.Listener == ListenerFence:
		return summaryRefuse
	case r.PerRequest:
		return summaryPerRequest
	case r.Outcome == OutcomeUpstreamFailed:
		return summaryFail
	case r.Outcome == OutcomeClientGone:
		return summaryAbandoned
	case r.Kind == KindHTTP && (r.Outcome == OutcomeAllowed || r.URL != nil && (r.L7Checked || r.CredentialRefused || r.Outcome == OutcomeBadRequest)):
		// An allowed forwarded request, one refused by the endpoint's L7
		// rules or for a credential placeholder, or a malformed one whose
		// target parsed: the request was read, so its event names its
		// method and path (what `policy-sync propose` turns into a rule).
		// A refusal of its host, port or binary stays a Network Activity,
		// like a refused CONNECT.
		return summaryRequest
	}
	return summaryOpen
}

// findingClass is the Detection Finding that goes with a record's
// summary event, if any (events builds it).
type findingClass int

const (
	findingNone       findingClass = iota
	findingBypass                  // captured by the fence
	findingMismatch                // the binary's identity changed
	findingSender                  // another process sent after the decision
	findingForeign                 // foreign code refused
	findingCredential              // a credential placeholder sent elsewhere
)

func (r *Record) findingClass() findingClass {
	switch {
	case r.Listener == ListenerFence:
		return findingBypass
	case r.Mismatch != nil:
		return findingMismatch
	case r.Violation != nil && r.Violation.Code == nil:
		return findingSender
	case r.Foreign != nil:
		return findingForeign
	case r.CredentialMisuse:
		return findingCredential
	}
	return findingNone
}

// span is the time span an event of r covers: from the first folded
// occurrence (a count report) or the start, to the end or, for a record
// not ended, the start.
func (r *Record) span() (start, end time.Time) {
	start = r.Start
	if r.Count > 1 && !r.First.IsZero() {
		start = r.First
	}
	end = r.End
	if end.IsZero() {
		end = start
	}
	return start, end
}

// stamp sets the time span, count and correlation of an event.
func (r *Record) stamp(b *ocsf.Base, sandbox string) {
	start, end := r.span()
	b.StartTime = start.UnixMilli()
	b.EndTime = end.UnixMilli()
	if d := end.Sub(start).Milliseconds(); d > 0 {
		b.Duration = d
	}
	if r.Count > 1 {
		b.Count = r.Count
	}
	if r.shared != nil {
		b.Metadata.CorrelationUID = r.shared.corrUID
	} else {
		b.Metadata.CorrelationUID = correlationUID(sandbox, r.ConnID)
	}
	b.Unmapped = r.unmapped()
}

func l7State(rules, checked bool) string {
	switch {
	case rules && checked:
		return "enforced"
	case rules:
		return "not_enforced"
	}
	return "none"
}

// maxRefusalCause bounds the cause an attribution refusal's event and
// log line carry.
const maxRefusalCause = 256

// refusalCause is the operator's answer to why a caller could not be
// attributed or its identity not checked: the attribution error (which
// socket or process was not found, a process that exited, a connect
// record missing, a send guard that could not hold the socket) on an
// attribution_failed or attribution_incomplete refusal, the pin check's
// error (the pin set full, a pin that could not be saved) on an
// identity_check_failed refusal, and on a fence capture the error that
// left it without an actor; "" otherwise. The error names addresses,
// socket inodes, host pids and file paths (never a credential: the
// proxy holds none of those on these paths), and may name an executable
// path the sandbox chose, so it is cut to printable ASCII (anything else
// becomes '?') of at most maxRefusalCause bytes. It goes to the event
// and the log only, never to the agent's 403 body.
func (r *Record) refusalCause() string {
	if r.Cause == "" {
		return ""
	}
	switch {
	case r.Reason == ReasonAttributionFailed, r.Reason == ReasonAttributionIncomplete,
		r.Reason == ReasonIdentityCheck, r.Listener == ListenerFence:
		return printableCause(r.Cause)
	}
	return ""
}

// printableCause is s as printable ASCII ('?' for any other byte),
// cut to maxRefusalCause bytes.
func printableCause(s string) string {
	if len(s) > maxRefusalCause {
		s = s[:maxRefusalCause]
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if c < ' ' || c > '~' {
			b[i] = '?'
		}
	}
	return string(b)
}

type causeErr string

func (e causeErr) Error() string { return string(e) }

func causeError(reason, cause string) error {
	if cause == "" {
		return causeErr(reason)
	}
	return causeErr(reason + ": " + cause)
}

func enforcement(audit bool) string {
	if audit {
		return "audit"
	}
	return "enforce"
}

// appendCall writes what encoding/json writes for c.
func appendCall(b []byte, c *l7.Call) []byte {
	b = append(b, '{')
	sep := false
	for _, f := range [...]struct{ key, v string }{
		{`"method":`, c.Method}, {`"operation_name":`, c.OperationName},
		{`"operation_type":`, c.OperationType}, {`"tool":`, c.Tool},
	} {
		if f.v == "" {
			continue
		}
		if sep {
			b = append(b, ',')
		}
		b = ocsf.AppendJSONString(append(b, f.key...), f.v)
		sep = true
	}
	return append(b, '}')
}
