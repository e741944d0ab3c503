package ocsf

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Conn is the connection context of a network or HTTP event.
type Conn struct {
	Src   *NetworkEndpoint // the sandbox side (veth address, source port)
	Dst   *NetworkEndpoint // the requested destination (hostname, ip, port)
	Actor *Actor           // the attributed process with its parent chain
	// Protocol is the transport ("tcp", "udp"); empty means tcp.
	Protocol string
}

// Fill fills the caption siblings of c's actor (file types, hash
// algorithms, user types), as Marshal does. A Conn filled once can be
// shared by events marshalled in several goroutines: Marshal then only
// reads it (a caption is written only when it changes).
func (c Conn) Fill() error { return c.Actor.fill(at("actor")) }

func (c Conn) connInfo() *ConnectionInfo {
	proto := c.Protocol
	if proto == "" {
		proto = "tcp"
	}
	ci := &ConnectionInfo{DirectionID: DirectionOutbound, ProtocolName: proto}
	switch proto {
	case "tcp":
		ci.ProtocolNum = 6
	case "udp":
		ci.ProtocolNum = 17
	}
	for _, ep := range []*NetworkEndpoint{c.Dst, c.Src} {
		if ep == nil || ep.IP == "" {
			continue
		}
		if a, err := netip.ParseAddr(ep.IP); err == nil {
			if a.Unmap().Is4() {
				ci.ProtocolVerID = ProtocolVerIPv4
			} else {
				ci.ProtocolVerID = ProtocolVerIPv6
			}
			break
		}
	}
	return ci
}

// Decision is the policy outcome for one connection or request.
type Decision struct {
	Allowed bool
	// Rule is the matched policy entry and the engine that applied it
	// (firewall_rule.type), or the default-deny rule.
	Rule *FirewallRule
	// Code is the machine-readable class (status_code), e.g.
	// "policy_denied", "ssrf_denied".
	Code string
	// Reason is the human reason (status_detail). Never a secret.
	Reason string
}

func (d Decision) apply(b *Base, sc *SecurityControl) {
	sc.FirewallRule = d.Rule
	b.StatusCode = d.Code
	b.StatusDetail = d.Reason
	if d.Allowed {
		sc.ActionID, sc.DispositionID = ActionAllowed, DispositionAllowed
		b.StatusID, b.SeverityID = StatusSuccess, SeverityInformational
		return
	}
	sc.ActionID, sc.DispositionID = ActionDenied, DispositionBlocked
	b.StatusID, b.SeverityID = StatusFailure, SeverityMedium
}

func (s *Source) network(activity int, c Conn) *NetworkActivity {
	return &NetworkActivity{
		Base:           s.Base(ClassNetworkActivity, activity, SeverityInformational),
		Actor:          c.Actor,
		SrcEndpoint:    c.Src,
		DstEndpoint:    c.Dst,
		ConnectionInfo: c.connInfo(),
	}
}

// NetworkOpen is a Network Activity (4001) Open: a connection the proxy
// allowed or denied (before any upstream byte).
func (s *Source) NetworkOpen(c Conn, d Decision) *NetworkActivity {
	e := s.network(NetworkOpen, c)
	d.apply(&e.Base, &e.SecurityControl)
	verb := "allowed"
	if !d.Allowed {
		verb = "denied"
	}
	e.Message = fmt.Sprintf("connection to %s %s%s", endpointLabel(c.Dst), verb, reasonSuffix(d.Reason))
	return e
}

// NetworkRefuse is a Network Activity (4001) Refuse: a connection that
// tried to bypass the proxy, caught by the fence and closed. Always
// denied; pair it with BypassAttempt.
func (s *Source) NetworkRefuse(c Conn, d Decision) *NetworkActivity {
	e := s.network(NetworkRefuse, c)
	d.Allowed = false
	if d.Code == "" {
		d.Code = "bypass_denied"
	}
	d.apply(&e.Base, &e.SecurityControl)
	e.Message = fmt.Sprintf("direct connection to %s refused%s", endpointLabel(c.Dst), reasonSuffix(d.Reason))
	return e
}

// NetworkFail is a Network Activity (4001) Fail: policy allowed the
// connection but the upstream dial or relay failed. cause goes to
// status_detail; it must not contain secrets.
func (s *Source) NetworkFail(c Conn, rule *FirewallRule, code string, cause error) *NetworkActivity {
	e := s.network(NetworkFail, c)
	e.FirewallRule = rule
	e.ActionID, e.DispositionID = ActionAllowed, DispositionError
	e.StatusID, e.SeverityID = StatusFailure, SeverityLow
	e.StatusCode = code
	if cause != nil {
		e.StatusDetail = cause.Error()
	}
	e.Message = fmt.Sprintf("connection to %s failed%s", endpointLabel(c.Dst), reasonSuffix(e.StatusDetail))
	return e
}

// NetworkAbandoned is a Network Activity (4001) Close for a connection
// its client closed before the proxy could decide on it (the process
// exited mid-request, so it could not be attributed). Nothing was
// decided, so it carries no security_control attributes (no action,
// disposition or rule): status Failure with code (status_code) and
// reason (status_detail), informational. Nothing was dialled. It is not
// a denial and must not be counted as one.
func (s *Source) NetworkAbandoned(c Conn, code, reason string) *NetworkActivity {
	e := s.network(NetworkClose, c)
	e.StatusID, e.SeverityID = StatusFailure, SeverityInformational
	e.StatusCode, e.StatusDetail = code, reason
	e.Message = fmt.Sprintf("client closed its connection to %s before it was attributed; nothing was sent upstream", endpointLabel(c.Dst))
	return e
}

// Request is one HTTP request seen by the proxy. URL is redacted by
// HTTPRequest; Status is the response code sent to the client (0: none).
type Request struct {
	Method    string
	URL       *url.URL
	Version   string // "HTTP/1.1"
	UserAgent string
	Status    int
}

// httpActivities maps request methods to HTTP Activity (4002) activity_id
// and to the http_request.http_method enum.
var httpActivities = map[string]int{
	"CONNECT": HTTPConnect, "DELETE": HTTPDelete, "GET": HTTPGet, "HEAD": HTTPHead,
	"OPTIONS": HTTPOptions, "POST": HTTPPost, "PUT": HTTPPut, "TRACE": HTTPTrace, "PATCH": HTTPPatch,
}

// HTTPRequest is an HTTP Activity (4002) for one forwarded or refused
// request: activity from the method (Other, named after the method, for
// methods OCSF does not list), http_request with a redacted URL (no query,
// fragment or userinfo), http_response when Status is set.
func (s *Source) HTTPRequest(c Conn, r Request, d Decision) *HTTPActivity {
	method := sanitizeMethod(r.Method)
	act, known := httpActivities[method]
	if !known {
		act = HTTPOther
	}
	e := &HTTPActivity{
		Base:           s.Base(ClassHTTPActivity, act, SeverityInformational),
		Actor:          c.Actor,
		SrcEndpoint:    c.Src,
		DstEndpoint:    c.Dst,
		ConnectionInfo: c.connInfo(),
		HTTPRequest:    &HTTPRequest{URL: NewURL(r.URL), Version: r.Version, UserAgent: r.UserAgent},
	}
	if known {
		e.HTTPRequest.HTTPMethod = method
	} else {
		e.ActivityName = method
	}
	d.apply(&e.Base, &e.SecurityControl)
	if r.Status > 0 {
		e.HTTPResponse = &HTTPResponse{Code: r.Status}
	}
	target := "(no url)"
	if e.HTTPRequest.URL != nil {
		target = e.HTTPRequest.URL.URLString
	}
	verb := "allowed"
	if !d.Allowed {
		verb = "denied"
	}
	e.Message = method + " " + target + " " + verb + reasonSuffix(d.Reason)
	return e
}

// sanitizeMethod upper-cases an HTTP method and keeps it a short token, so
// a hostile client cannot put arbitrary text into activity_name.
func sanitizeMethod(m string) string {
	m = strings.ToUpper(m)
	if len(m) > 24 {
		m = m[:24]
	}
	ok := m != ""
	for i := 0; i < len(m) && ok; i++ {
		c := m[i]
		ok = c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}
	if !ok {
		return "INVALID"
	}
	return m
}

func endpointLabel(ep *NetworkEndpoint) string {
	if ep == nil {
		return "unknown destination"
	}
	host := ep.Hostname
	if host == "" {
		host = ep.IP
	}
	if host == "" {
		host = ep.Name
	}
	if ep.Port == 0 {
		return host
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + strconv.Itoa(ep.Port)
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return ": " + r
}
