package graphql

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/palisade-sandbox/palisade/pkg/l7"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// inspector is the l7.Inspector of a protocol graphql endpoint.
type inspector struct {
	ep  *policy.Endpoint
	max int64
}

// New returns the l7.Inspector of ep, a validated protocol graphql
// endpoint: each request's body is read (up to graphql_max_body_bytes)
// and the request decided by Decide.
func New(ep *policy.Endpoint) (l7.Inspector, error) {
	switch {
	case ep.Protocol != policy.ProtocolGraphQL:
		return nil, fmt.Errorf("graphql: endpoint is protocol %q, not graphql", ep.Protocol)
	case ep.GraphQLMaxBodyBytes <= 0:
		return nil, errors.New("graphql: endpoint without a body bound")
	}
	return &inspector{ep: ep, max: int64(ep.GraphQLMaxBodyBytes)}, nil
}

// Request implements l7.Inspector.
func (in *inspector) Request(r *l7.Request) l7.Decision {
	if r.Upgrade != "" {
		// GraphQL over WebSocket (graphql-ws) would carry operations
		// this inspector never reads.
		return l7.Invalid(http.StatusMethodNotAllowed, policy.L7HTTPMethod, "an upgrade is not inspected on a GraphQL endpoint (GraphQL over WebSocket is not supported)")
	}
	body, err := r.Body.ReadAll(in.max)
	tooLarge := errors.Is(err, l7.ErrBodyTooLarge)
	if err != nil && !tooLarge {
		return l7.Invalid(http.StatusBadRequest, policy.GraphQLInvalid, "request body ended before its end")
	}
	d := Decide(in.ep, &Request{Method: r.Method, Query: r.Query, Field: r.Field, Body: body, TooLarge: tooLarge})
	dec := l7.Verdict(d.Allowed, d.Status, d.Reason, d.Rule, d.Detail)
	// A persisted query's hash or id is the client's string, not a
	// name: the event leaves it out (a registered one has its
	// registered type and name).
	dec.Call = l7.Call{OperationType: l7.EventName(d.OperationType), OperationName: l7.EventName(d.OperationName)}
	return dec
}
