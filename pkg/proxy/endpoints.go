package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Endpoint status results (seed 004, "Tool server connection status"):
// the last observed result of an inspected endpoint's traffic, so an
// operator can tell a policy denial from a missing credential, a TLS or
// network failure or an upstream's refusal without reading client logs.
const (
	// ResultNone: nothing observed since the endpoint was installed.
	ResultNone = "no_observed_exchange"
	// ResultPolicyDenied: the proxy refused a request (or message) to
	// the endpoint: its destination, binary, L7 rules, a protocol
	// version or body rule, a credential used off its endpoint.
	ResultPolicyDenied = "policy_denied"
	// ResultCredentialUnavailable: a placeholder named a credential the
	// proxy does not hold (unknown, revoked, not bound for signing).
	ResultCredentialUnavailable = "credential_unavailable"
	// ResultTLSOrNetwork: the upstream could not be reached, its TLS
	// certificate or handshake failed, or it broke off the exchange.
	ResultTLSOrNetwork = "tls_or_network_failure"
	// ResultUpstreamRejected: the upstream answered with a final
	// status of 400 or more.
	ResultUpstreamRejected = "upstream_rejected"
	// ResultHTTPResponse: the upstream answered with a final status
	// below 400, a protocol upgrade included (the body may still hold an
	// application error).
	ResultHTTPResponse = "http_response_received"
)

// EndpointStatus is one inspected endpoint's last observed result: the
// control socket's GET /endpoints and /status, sandbox-supervisor status
// and the 5019 "Endpoint Status" event on change. It never holds a
// credential, a payload or an upstream's error text: the result is one
// of the fixed classes above.
type EndpointStatus struct {
	// ID names the endpoint in the policy: "ENTRY.endpoints[I]".
	ID       string `json:"id"`
	Entry    string `json:"entry"`
	Address  string `json:"address"` // host:port, or host:{p1,p2}
	Protocol string `json:"protocol"`
	Result   string `json:"result"`
	// ObservedAt is when the result was observed (zero for ResultNone).
	ObservedAt time.Time `json:"observed_at,omitzero"`
}

// endpointInventory lists a policy's inspected endpoints (those whose
// requests the proxy sees one by one), entries in key order.
func endpointInventory(pol *policy.Policy) []EndpointStatus {
	var out []EndpointStatus
	keys := make([]string, 0, len(pol.NetworkPolicies))
	for k := range pol.NetworkPolicies {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for i, ep := range pol.NetworkPolicies[k].Endpoints {
			if ep == nil || !ep.Inspected() {
				continue
			}
			out = append(out, EndpointStatus{ID: endpointID(k, i), Entry: k, Address: endpointAddress(ep), Protocol: ep.Protocol, Result: ResultNone})
		}
	}
	return out
}

// endpointID is the ID of entry key's endpoint i.
func endpointID(key string, i int) string { return fmt.Sprintf("%s.endpoints[%d]", key, i) }

func endpointAddress(ep *policy.Endpoint) string {
	host := ep.Host
	if host == "" {
		host = strings.Join(ep.AllowedIPs, ",")
	}
	if strings.Contains(host, ":") && !strings.Contains(host, ",") {
		host = "[" + host + "]"
	}
	if len(ep.Ports) == 1 {
		return host + ":" + strconv.Itoa(ep.Ports[0])
	}
	ports := make([]string, len(ep.Ports))
	for i, p := range ep.Ports {
		ports[i] = strconv.Itoa(p)
	}
	return host + ":{" + strings.Join(ports, ",") + "}"
}

// endpointBook holds the status of the inspected endpoints of the
// generation in force.
type endpointBook struct {
	mu   sync.Mutex
	gen  int64
	list []EndpointStatus
	idx  map[string]int
}

// install makes inv, generation gen's inventory, the one observed. An
// endpoint with the same ID, address and protocol keeps its last
// result; any other starts at ResultNone.
func (b *endpointBook) install(gen int64, inv []EndpointStatus) {
	b.mu.Lock()
	defer b.mu.Unlock()
	idx := make(map[string]int, len(inv))
	for i := range inv {
		if j, ok := b.idx[inv[i].ID]; ok {
			if old := b.list[j]; old.Address == inv[i].Address && old.Protocol == inv[i].Protocol {
				inv[i].Result, inv[i].ObservedAt = old.Result, old.ObservedAt
			}
		}
		idx[inv[i].ID] = i
	}
	b.gen, b.list, b.idx = gen, inv, idx
}

// observe records result for endpoint id as observed at t by a request
// of generation gen, and calls changed with the new status when the
// result changed. A request of another generation than the one
// installed is not counted (it may name another configuration's
// endpoint). changed runs under the book's lock, so two requests'
// changes reach it in the order they were recorded: the last Endpoint
// Status event is always the status in force.
func (b *endpointBook) observe(gen int64, id, result string, t time.Time, changed func(EndpointStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, ok := b.idx[id]
	if !ok || gen != b.gen {
		return
	}
	s := &b.list[i]
	differs := s.Result != result
	s.Result, s.ObservedAt = result, t
	if differs {
		changed(*s)
	}
}

// snapshot returns a copy of the statuses.
func (b *endpointBook) snapshot() []EndpointStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.list)
}

// Endpoints returns the inspected endpoints' statuses.
func (p *Proxy) Endpoints() []EndpointStatus { return p.endpoints.snapshot() }

// observeEndpoint records the result a finished record shows for its
// endpoint, and emits an Endpoint Status event when it changed.
func (p *Proxy) observeEndpoint(r *Record) {
	if r.EndpointID == "" {
		return
	}
	p.observeResult(r, endpointResult(r), r.End)
}

// observeResult records result ("" none) for r's endpoint as observed
// at t: observeEndpoint's, or a WebSocket's 101 before its connection
// goes on.
func (p *Proxy) observeResult(r *Record, result string, t time.Time) {
	if result == "" || r.EndpointID == "" {
		return
	}
	p.endpoints.observe(r.Generation, r.EndpointID, result, t, func(s EndpointStatus) {
		p.emitEvent(p.src.EndpointStatus(ocsf.EndpointStatusInfo{ID: s.ID, Entry: s.Entry, Address: s.Address, Protocol: s.Protocol, Result: s.Result, ObservedAt: s.ObservedAt}))
	})
}

// endpointResult classifies a finished record ("" when it shows no
// result: a client's malformed request, a tunnel whose requests are
// recorded one by one).
func endpointResult(r *Record) string {
	switch {
	case r.CredentialRefused && credentialUnavailable(r.Reason):
		return ResultCredentialUnavailable
	case r.Outcome == OutcomePolicyDenied, r.Outcome == OutcomeSSRFDenied, r.CredentialRefused, r.protocolRefused:
		return ResultPolicyDenied
	case r.Outcome == OutcomeUpstreamFailed:
		return ResultTLSOrNetwork
	case r.Outcome != OutcomeAllowed || r.Kind != KindHTTP || r.Status == 0:
		return ""
	case r.Status >= 400:
		return ResultUpstreamRejected
	case r.Status >= 200 || r.Status == 101:
		return ResultHTTPResponse
	}
	return ""
}

// credentialUnavailable: a credential refusal that says the proxy does
// not hold the credential (as opposed to one used where it may not be).
func credentialUnavailable(reason string) bool {
	switch reason {
	case credentials.ReasonUnknown, credentials.ReasonRevoked, credentials.ReasonSigningUnbound:
		return true
	}
	return false
}
