package l7

import (
	"errors"
	"net/url"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
)

// Inspector holds the requests of one inspected endpoint to its
// protocol's rules: REST method/path/query rules (package l7/rest),
// WebSocket upgrades and messages (l7/websocket), JSON-RPC and MCP
// methods, GraphQL operations. It is the only thing a protocol package
// implements; the proxy (pkg/proxy) does the rest.
//
// The proxy chooses an endpoint's Inspector by the endpoint's protocol
// field (pkg/proxy's newInspector, one case per protocol) and builds it
// once per policy generation; a constructor
//
//	func New(ep *policy.Endpoint) (l7.Inspector, error)
//
// gets the validated endpoint (which it must not modify) and may compile
// matchers from it; an error refuses every request of the endpoint
// (fail closed), so validation in pkg/policy should have caught it.
//
// The proxy calls Request once for every HTTP request sent to the
// endpoint: forwarded http:// requests and each request inside a CONNECT
// or transparent tunnel, over HTTP/1.1 and HTTP/2 alike. Before it does,
// the proxy has done what every protocol shares: the connection's
// destination, caller and binary are allowed; the request is well-formed
// (strict head parser, no smuggling framing, one Host naming the
// tunnel's authority, no "_" spelling of a field the proxy reads); its
// path parsed into every reading an upstream may take (Path) and its
// query into url.Values. Request decides the rest and returns a
// Decision. Only after an allowing Decision does anything of the request
// reach the upstream: the head, and the body as sent (what Request read
// of it is replayed first).
//
// Enforcement is the proxy's: Request says what the rules decide, and
// under enforcement: audit the proxy relays a request refused with a
// policy denial (Status 0 or 403) and logs it. A refusal with another
// Status (a request the protocol cannot read: 400, a body over the
// inspector's bound: 413) is refused whatever the enforcement.
//
// Request must be safe for concurrent use (the streams of one HTTP/2
// connection are decided at once), must not block except on reading
// r.Body, and must not keep r, or anything it points to, once it
// returns. It never writes to the client or the upstream and never
// logs: the proxy answers, records and emits the event (with Reason and
// Rule). A Reason or Detail never quotes the request's bytes (a body,
// a query value may hold a secret).
//
// An Inspector whose protocol goes on after an upgrade the proxy relays
// (WebSocket) also implements Upgrader.
type Inspector interface {
	Request(r *Request) Decision
}

// Request is what an Inspector reads of one HTTP request.
type Request struct {
	// Method is the request method as received (case-sensitive), except
	// that a WebSocket upgrade is "GET" over HTTP/2 too (RFC 8441's
	// extended CONNECT with :protocol websocket), as it is over
	// HTTP/1.1.
	Method string
	// Path is the request's path with its readings (ParsePath). The
	// upstream receives Path.Escaped.
	Path *Path
	// Query is the request's query, parsed. RawQuery is the query as
	// sent (and as the upstream receives it); "" when there is none.
	Query    url.Values
	RawQuery string
	// Field returns the values of a request header field, by name
	// folded as CGI servers fold it (FieldValues): "X_Foo" and "x-foo"
	// are one field.
	Field func(name string) []string
	// Upgrade is the protocol the request asks to switch to
	// ("websocket"), "" for an ordinary request. The proxy relays no
	// other upgrade (h2c and unknown protocols are refused before
	// Request).
	Upgrade string
	// Proto is "HTTP/1.1", "HTTP/1.0" or "HTTP/2.0" on the client's leg.
	Proto string
	// Body is the request body; never nil (a request without a body has
	// one of Length 0).
	Body Body
}

// Body is a request body an Inspector may read before deciding. What it
// reads is kept and relayed upstream unchanged, before the rest.
type Body interface {
	// ReadAll returns the whole body when it is at most max bytes long.
	// A longer body returns ErrBodyTooLarge once max+1 bytes were read
	// (nothing more is read); a body the client did not finish
	// returns the read error. Called again, it returns the same.
	ReadAll(max int64) ([]byte, error)
	// Length is the length the request declared: -1 when it declared
	// none (HTTP/1.1 chunked, an HTTP/2 request without
	// Content-Length), 0 for no body.
	Length() int64
}

// ErrBodyTooLarge is returned by Body.ReadAll for a body over the bound.
var ErrBodyTooLarge = errors.New("request body larger than the inspection bound")

// Decision is what an Inspector decides about one request or message.
type Decision struct {
	// Allow relays the request (or message).
	Allow bool
	// Reason says why a request was refused, machine-readable: one of
	// pkg/policy's L7* reasons or the protocol's own (e.g.
	// "websocket_message_denied"). It goes into the refusal's JSON body,
	// Proxy-Status and event.
	Reason string
	// Rule names the rule that decided, as the field path within the
	// endpoint ("rules[2]", "deny_rules[0]"); "" when no single rule did
	// (no allow rule matched, an access preset).
	Rule string
	// Status is the HTTP status of a refusal: 0 (or 403) is a policy
	// denial, answered with the policy_denied body; any other 4xx is a
	// request the protocol cannot accept (400 unreadable, 413 too
	// large), answered with a bad_request body holding Detail, and
	// refused under enforcement: audit as well.
	Status int
	// Detail is a fixed sentence for the client about a non-403
	// refusal. It never quotes the request.
	Detail string
	// Call names what a body-inspected request asked the server to do
	// (the refused call, else the first), for the event; zero when the
	// protocol names no call (REST, WebSocket) or the request could not
	// be read that far. Its names pass through EventName.
	Call Call
}

// Call names the call a request makes, for the event
// (unmapped.egress_proxy.l7_call): a JSON-RPC method and, for an MCP
// tools/call, its tool; a GraphQL operation's type and name. Never
// params, arguments, variables or documents. The JSON tags are the
// event's keys, in sorted order.
type Call struct {
	Method        string `json:"method,omitempty"`
	OperationName string `json:"operation_name,omitempty"`
	OperationType string `json:"operation_type,omitempty"`
	Tool          string `json:"tool,omitempty"`
}

// InvalidName stands in an event for a name the request sent that
// EventName does not pass.
const InvalidName = "(invalid)"

// MaxEventName bounds a name an event quotes from a request, in bytes.
const MaxEventName = 128

// EventName is what an event may say of a name the client sent (a
// JSON-RPC method, an operation name): the name itself when it is 1 to
// MaxEventName bytes of printable ASCII without spaces and holds no
// credential placeholder, "" for "", else InvalidName. The client chose
// the name: an event quotes no control byte, no long string and no
// placeholder from it. (A name is read from the body before any
// placeholder in it is resolved, so it never holds a credential's
// value.)
func EventName(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > MaxEventName || strings.Contains(s, credentials.Prefix) {
		return InvalidName
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return InvalidName
		}
	}
	return s
}

// Allowed is the Decision that relays a request.
func Allowed() Decision { return Decision{Allow: true} }

// Denied is a policy denial for reason, by rule ("" when no single rule
// decided).
func Denied(reason, rule string) Decision { return Decision{Reason: reason, Rule: rule} }

// Invalid refuses a request the protocol cannot accept, with status
// (a 4xx other than 403) and a fixed detail for the client.
func Invalid(status int, reason, detail string) Decision {
	return Decision{Reason: reason, Status: status, Detail: detail}
}

// Verdict is the Decision for a body inspector's own verdict: allowed;
// a policy denial (status 403) by rule; else a request the protocol
// cannot accept (status, detail).
func Verdict(allowed bool, status int, reason, rule, detail string) Decision {
	switch {
	case allowed:
		return Allowed()
	case status == 403:
		return Denied(reason, rule)
	}
	return Invalid(status, reason, detail)
}

// Policy reports whether d is a policy denial (as opposed to allowed or
// an invalid request).
func (d Decision) Policy() bool { return !d.Allow && (d.Status == 0 || d.Status == 403) }

// Upgrader is implemented by an Inspector whose protocol continues
// after an upgrade (WebSocket). For an upgrade request it allowed, the
// proxy calls Upgrade with the same Request (its Body is empty) and
// holds the upgraded connection's client-to-server messages to what it
// returns; nil keeps the messages unread (framing checks only).
type Upgrader interface {
	Upgrade(r *Request) Messages
}

// Messages decides the client-to-server messages of one upgraded
// connection. The proxy reassembles each data message from its frames
// (up to MaxMessage bytes; a longer one closes the connection with
// 1009), checks a text message is UTF-8 (else closes with 1007), and
// calls Message with the whole unmasked payload before relaying any of
// its frames; control frames (ping, pong, close) are relayed unread.
// A refused message closes both sides with 1008 (policy violation), and
// the event names Decision.Reason and Rule. Message is called from one
// goroutine per connection, must not block, and must not keep m.
type Messages interface {
	// Message decides one complete data message.
	Message(m *Message) Decision
	// MaxMessage bounds a reassembled message, in bytes.
	MaxMessage() int64
}

// Message is one complete client-to-server data message.
type Message struct {
	// Text is set for a text message, clear for a binary one.
	Text bool
	// Data is the message's payload, unmasked and reassembled.
	Data []byte
}
