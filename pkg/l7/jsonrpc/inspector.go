package jsonrpc

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// inspector is the l7.Inspector of a protocol mcp or json-rpc endpoint.
type inspector struct {
	ep  *policy.Endpoint
	max int64
}

// New returns the l7.Inspector of ep, a validated protocol mcp or
// json-rpc endpoint: each request's body is read (up to the endpoint's
// max_body_bytes) and decided by Decide.
func New(ep *policy.Endpoint) (l7.Inspector, error) {
	switch {
	case ep.Protocol != policy.ProtocolMCP && ep.Protocol != policy.ProtocolJSONRPC:
		return nil, fmt.Errorf("jsonrpc: endpoint is protocol %q, not mcp or json-rpc", ep.Protocol)
	case ep.Protocol == policy.ProtocolMCP && (ep.MCP == nil || len(ep.MCP.Versions) == 0):
		return nil, errors.New("jsonrpc: mcp endpoint without its options")
	case ep.MaxBodyBytes() <= 0:
		return nil, errors.New("jsonrpc: endpoint without a body bound")
	}
	return &inspector{ep: ep, max: int64(ep.MaxBodyBytes())}, nil
}

// Request implements l7.Inspector.
func (in *inspector) Request(r *l7.Request) l7.Decision {
	if r.Upgrade != "" {
		// MCP's and JSON-RPC's HTTP transports have no upgrade; the
		// messages after one would go unread.
		return l7.Invalid(http.StatusMethodNotAllowed, policy.L7HTTPMethod, "an upgrade is not inspected on a JSON-RPC endpoint")
	}
	body, err := r.Body.ReadAll(in.max)
	tooLarge := errors.Is(err, l7.ErrBodyTooLarge)
	if err != nil && !tooLarge {
		return l7.Invalid(http.StatusBadRequest, policy.JSONRPCInvalid, "request body ended before its end")
	}
	d := Decide(in.ep, &Request{Method: r.Method, Query: r.Query, Field: r.Field, Body: body, TooLarge: tooLarge})
	dec := l7.Verdict(d.Allowed, d.Status, d.Reason, d.Rule, d.Detail)
	dec.Call = EventCall(d)
	return dec
}

// EventCall is what the event says of the call d rests on: its method
// through l7.EventName, and its tool only when the tool name has the
// recommended syntax (policy.ValidToolName), else l7.InvalidName.
func EventCall(d Decision) l7.Call {
	c := l7.Call{Method: l7.EventName(d.Method)}
	switch {
	case d.Tool == "":
	case policy.ValidToolName(d.Tool):
		c.Tool = d.Tool
	default:
		c.Tool = l7.InvalidName
	}
	return c
}
