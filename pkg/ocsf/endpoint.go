package ocsf

import (
	"fmt"
	"time"
)

// EndpointStatusInfo is an inspected endpoint's newly observed result
// (the egress proxy's endpoint status): its policy ID ("ENTRY.endpoints[I]"),
// entry key, address and protocol as the policy writes them, the result
// class and when it was observed. It never holds a credential, a payload
// or an upstream's error text.
type EndpointStatusInfo struct {
	ID, Entry, Address, Protocol, Result string
	ObservedAt                           time.Time
}

// EndpointStatus is a Device Config State Change (5019) "Endpoint
// Status": the last observed result of an inspected endpoint changed.
// status_code is the result class; http_response_received is status
// Success and severity Informational, every other result Failure and
// Low. The facts are under unmapped.endpoint_status.
func (s *Source) EndpointStatus(info EndpointStatusInfo) *ConfigStateChange {
	e := s.configChange(ActivityEndpointStatus, SeverityInformational)
	e.StateID = StateEnabled
	e.StatusID = StatusSuccess
	e.StatusCode = info.Result
	if info.Result != "http_response_received" {
		e.SeverityID = SeverityLow
		e.StatusID = StatusFailure
	}
	e.Message = fmt.Sprintf("endpoint %s (%s, %s): %s", info.ID, info.Address, info.Protocol, info.Result)
	e.Unmapped = map[string]any{"endpoint_status": map[string]any{
		"id": info.ID, "entry": info.Entry, "address": info.Address, "protocol": info.Protocol,
		"result": info.Result, "observed_at": info.ObservedAt.UTC().Format(time.RFC3339Nano),
	}}
	return e
}
