package decision

// Reason says why Decide denied a request (ReasonNone when it allowed).
// The proxy puts Reason.String() in its 403 body and events.
type Reason uint8

// Deny reasons, from least to most specific. When several entries select
// the host, the most specific reason among them is reported.
const (
	ReasonNone               Reason = iota // allowed
	ReasonInvalidHost                      // the host is neither a valid DNS name nor an IP literal
	ReasonInvalidPort                      // the port is outside 1-65535
	ReasonNoMatchingEndpoint               // no endpoint selects the host
	ReasonPortNotAllowed                   // an endpoint selects the host, but not on this port
	ReasonBinaryUnknown                    // host and port matched, but the caller's binary is unknown
	ReasonBinaryNotAllowed                 // host and port matched, but neither the binary nor an ancestor is listed
)

var reasonNames = [...]string{
	ReasonNone:               "none",
	ReasonInvalidHost:        "invalid_host",
	ReasonInvalidPort:        "invalid_port",
	ReasonNoMatchingEndpoint: "no_matching_endpoint",
	ReasonPortNotAllowed:     "port_not_allowed",
	ReasonBinaryUnknown:      "binary_unknown",
	ReasonBinaryNotAllowed:   "binary_not_allowed",
}

// String returns the reason's snake_case name ("binary_not_allowed").
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}
