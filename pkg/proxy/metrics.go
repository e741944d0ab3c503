package proxy

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// metrics are lock-free counters; the per-reason map is a sync.Map whose
// steady state (known reasons) is read-only.
type metrics struct {
	connsProxy     atomic.Uint64
	connsFence     atomic.Uint64
	allowed        atomic.Uint64
	denied         sync.Map // "error/reason" -> *atomic.Uint64
	badRequests    atomic.Uint64
	clientGone     atomic.Uint64
	bypass         atomic.Uint64
	upstreamErrors atomic.Uint64
	identityMismat atomic.Uint64
	// undecidedSenders counts connections closed because another
	// process than the decided one sent on them (the send guard).
	undecidedSenders atomic.Uint64
	overCap          atomic.Uint64
	reloadsOK        atomic.Uint64
	reloadsRejected  atomic.Uint64
	activeConns      atomic.Int64
	activeTunnels    atomic.Int64
	bytesUp          atomic.Uint64
	bytesDown        atomic.Uint64
	eventsEmitted    atomic.Uint64
	eventsSupp       atomic.Uint64
	eventErrors      atomic.Uint64
}

type deniedKey struct{ class, reason string }

func (m *metrics) deny(class, reason string) {
	k := deniedKey{class, reason}
	if v, ok := m.denied.Load(k); ok {
		v.(*atomic.Uint64).Add(1)
		return
	}
	v, _ := m.denied.LoadOrStore(k, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}

// Counters is a snapshot of the proxy's counters (the control socket's
// /status "counters").
type Counters struct {
	ConnectionsProxy   uint64            `json:"connections_proxy"`
	ConnectionsFence   uint64            `json:"connections_fence"`
	Allowed            uint64            `json:"allowed"`
	Denied             uint64            `json:"denied"`
	DeniedByReason     map[string]uint64 `json:"denied_by_reason"`
	BadRequests        uint64            `json:"bad_requests"`
	ClientGone         uint64            `json:"client_gone"`
	Bypass             uint64            `json:"bypass_attempts"`
	UpstreamErrors     uint64            `json:"upstream_errors"`
	IdentityMismatches uint64            `json:"identity_mismatches"`
	UndecidedSenders   uint64            `json:"undecided_senders"`
	OverCapacity       uint64            `json:"over_capacity"`
	ReloadsOK          uint64            `json:"reloads_ok"`
	ReloadsRejected    uint64            `json:"reloads_rejected"`
	ActiveConnections  int64             `json:"active_connections"`
	ActiveTunnels      int64             `json:"active_tunnels"`
	BytesUp            uint64            `json:"bytes_up"`
	BytesDown          uint64            `json:"bytes_down"`
	EventsEmitted      uint64            `json:"events_emitted"`
	EventsSuppressed   uint64            `json:"events_suppressed"`
	EventErrors        uint64            `json:"event_errors"`
}

// Counters returns a snapshot of the counters.
func (p *Proxy) Counters() Counters {
	m := &p.m
	c := Counters{
		ConnectionsProxy:   m.connsProxy.Load(),
		ConnectionsFence:   m.connsFence.Load(),
		Allowed:            m.allowed.Load(),
		DeniedByReason:     map[string]uint64{},
		BadRequests:        m.badRequests.Load(),
		ClientGone:         m.clientGone.Load(),
		Bypass:             m.bypass.Load(),
		UpstreamErrors:     m.upstreamErrors.Load(),
		IdentityMismatches: m.identityMismat.Load(),
		UndecidedSenders:   m.undecidedSenders.Load(),
		OverCapacity:       m.overCap.Load(),
		ReloadsOK:          m.reloadsOK.Load(),
		ReloadsRejected:    m.reloadsRejected.Load(),
		ActiveConnections:  m.activeConns.Load(),
		ActiveTunnels:      m.activeTunnels.Load(),
		BytesUp:            m.bytesUp.Load(),
		BytesDown:          m.bytesDown.Load(),
		EventsEmitted:      m.eventsEmitted.Load(),
		EventsSuppressed:   m.eventsSupp.Load(),
		EventErrors:        m.eventErrors.Load(),
	}
	m.denied.Range(func(k, v any) bool {
		dk := k.(deniedKey)
		n := v.(*atomic.Uint64).Load()
		c.DeniedByReason[dk.class+"/"+dk.reason] += n
		c.Denied += n
		return true
	})
	return c
}

// WriteMetrics writes the counters in the Prometheus text exposition
// format (version 0.0.4).
func (p *Proxy) WriteMetrics(w io.Writer) error {
	bw := bufio.NewWriter(w)
	c := p.Counters()
	g := p.gen.Load()
	metric := func(name, typ, help string) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	metric("palisade_proxy_connections_total", "counter", "Client connections accepted, by listener.")
	fmt.Fprintf(bw, "palisade_proxy_connections_total{listener=\"proxy\"} %d\n", c.ConnectionsProxy)
	fmt.Fprintf(bw, "palisade_proxy_connections_total{listener=\"fence\"} %d\n", c.ConnectionsFence)
	metric("palisade_proxy_allowed_total", "counter", "Requests allowed by policy and the SSRF guard.")
	fmt.Fprintf(bw, "palisade_proxy_allowed_total %d\n", c.Allowed)
	metric("palisade_proxy_denied_total", "counter", "Requests denied, by error class and reason.")
	keys := make([]deniedKey, 0, 8)
	p.m.denied.Range(func(k, _ any) bool { keys = append(keys, k.(deniedKey)); return true })
	slices.SortFunc(keys, func(a, b deniedKey) int {
		if a.class != b.class {
			return cmpString(a.class, b.class)
		}
		return cmpString(a.reason, b.reason)
	})
	for _, k := range keys {
		v, _ := p.m.denied.Load(k)
		fmt.Fprintf(bw, "palisade_proxy_denied_total{error=%q,reason=%q} %d\n", promLabel(k.class), promLabel(k.reason), v.(*atomic.Uint64).Load())
	}
	metric("palisade_proxy_bad_requests_total", "counter", "Malformed, oversized or timed-out request heads.")
	fmt.Fprintf(bw, "palisade_proxy_bad_requests_total %d\n", c.BadRequests)
	metric("palisade_proxy_client_gone_total", "counter", "Connections whose client closed them before they could be attributed (not denials; nothing dialled).")
	fmt.Fprintf(bw, "palisade_proxy_client_gone_total %d\n", c.ClientGone)
	metric("palisade_proxy_bypass_attempts_total", "counter", "Connections captured by the fence (direct egress attempts).")
	fmt.Fprintf(bw, "palisade_proxy_bypass_attempts_total %d\n", c.Bypass)
	metric("palisade_proxy_upstream_errors_total", "counter", "Allowed requests whose upstream dial or exchange failed.")
	fmt.Fprintf(bw, "palisade_proxy_upstream_errors_total %d\n", c.UpstreamErrors)
	metric("palisade_proxy_identity_mismatches_total", "counter", "Binary hashes that differ from the hash pinned on first use.")
	fmt.Fprintf(bw, "palisade_proxy_identity_mismatches_total %d\n", c.IdentityMismatches)
	metric("palisade_proxy_undecided_senders_total", "counter", "Connections closed because a process other than the decided one or its descendants sent on them.")
	fmt.Fprintf(bw, "palisade_proxy_undecided_senders_total %d\n", c.UndecidedSenders)
	metric("palisade_proxy_over_capacity_total", "counter", "Connections refused because the concurrent-connection cap was reached.")
	fmt.Fprintf(bw, "palisade_proxy_over_capacity_total %d\n", c.OverCapacity)
	metric("palisade_proxy_reloads_total", "counter", "Policy reloads, by result.")
	fmt.Fprintf(bw, "palisade_proxy_reloads_total{result=\"ok\"} %d\n", c.ReloadsOK)
	fmt.Fprintf(bw, "palisade_proxy_reloads_total{result=\"rejected\"} %d\n", c.ReloadsRejected)
	metric("palisade_proxy_policy_generation", "gauge", "Generation number of the policy in force.")
	var gen int64
	if g != nil {
		gen = g.Number
	}
	fmt.Fprintf(bw, "palisade_proxy_policy_generation %d\n", gen)
	metric("palisade_proxy_go_maxprocs", "gauge", "CPUs that run proxy code at once (--procs).")
	fmt.Fprintf(bw, "palisade_proxy_go_maxprocs %d\n", runtime.GOMAXPROCS(0))
	metric("palisade_proxy_active_connections", "gauge", "Client connections being served.")
	fmt.Fprintf(bw, "palisade_proxy_active_connections %d\n", c.ActiveConnections)
	metric("palisade_proxy_active_tunnels", "gauge", "Open CONNECT tunnels and forwarded requests.")
	fmt.Fprintf(bw, "palisade_proxy_active_tunnels %d\n", c.ActiveTunnels)
	metric("palisade_proxy_bytes_total", "counter", "Bytes relayed, by direction (up: client to upstream).")
	fmt.Fprintf(bw, "palisade_proxy_bytes_total{direction=\"up\"} %d\n", c.BytesUp)
	fmt.Fprintf(bw, "palisade_proxy_bytes_total{direction=\"down\"} %d\n", c.BytesDown)
	metric("palisade_proxy_events_total", "counter", "OCSF events, by outcome (suppressed: folded into a later counted event).")
	fmt.Fprintf(bw, "palisade_proxy_events_total{outcome=\"emitted\"} %d\n", c.EventsEmitted)
	fmt.Fprintf(bw, "palisade_proxy_events_total{outcome=\"suppressed\"} %d\n", c.EventsSuppressed)
	fmt.Fprintf(bw, "palisade_proxy_events_total{outcome=\"error\"} %d\n", c.EventErrors)
	if ac := p.attributionCounters(); len(ac) > 0 {
		metric("palisade_proxy_attribution_total", "counter", "Attribution backend work, by counter (sock_diag, proc_tables: how sockets were found).")
		names := make([]string, 0, len(ac))
		for k := range ac {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			fmt.Fprintf(bw, "palisade_proxy_attribution_total{counter=%q} %d\n", promLabel(k), ac[k])
		}
	}
	return bw.Flush()
}

// attributionCounters returns the Attributor's counters, if it has any.
func (p *Proxy) attributionCounters() map[string]uint64 {
	if ac, ok := p.cfg.Attributor.(AttributionCounter); ok {
		return ac.AttributionCounters()
	}
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// promLabel keeps a label value printable; %q then escapes quotes and
// backslashes the way the exposition format expects.
func promLabel(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c >= 0x7f {
			b[i] = '_'
		}
	}
	return string(b)
}
