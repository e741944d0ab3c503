package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/sandboxnet"
	"github.com/palisade-sandbox/palisade/pkg/termsafe"
)

// endpointStatus is one entry of the egress proxy's GET /endpoints
// (proxy.EndpointStatus): an inspected endpoint's last observed result.
type endpointStatus struct {
	ID         string    `json:"id"`
	Entry      string    `json:"entry"`
	Address    string    `json:"address"`
	Protocol   string    `json:"protocol"`
	Result     string    `json:"result"`
	ObservedAt time.Time `json:"observed_at,omitzero"`
}

// proxyEndpoints asks the sandbox's egress proxy (its control socket in
// the sandbox's state directory sdir) for its endpoints' status. A
// sandbox without a running proxy has none (nil, nil).
func proxyEndpoints(sdir string) ([]endpointStatus, error) {
	sock := filepath.Join(sdir, sandboxnet.ControlSocketName)
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer cl.CloseIdleConnections()
	resp, err := cl.Get("http://proxy/endpoints")
	if err != nil {
		return nil, nil // no proxy (no network policy, or the sandbox ended)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("egress proxy's /endpoints answered %s", resp.Status)
	}
	var out struct {
		Endpoints []endpointStatus `json:"endpoints"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&out); err != nil {
		return nil, fmt.Errorf("egress proxy's /endpoints: %w", err)
	}
	return out.Endpoints, nil
}

// printEndpoints writes one line per endpoint status for status's
// human output.
func printEndpoints(w io.Writer, eps []endpointStatus) {
	for _, e := range eps {
		at := "-"
		if !e.ObservedAt.IsZero() {
			at = e.ObservedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "endpoint:      %s %s %s %s (%s)\n", termsafe.String(e.ID), termsafe.String(e.Address), termsafe.String(e.Protocol), termsafe.String(e.Result), at)
	}
}
