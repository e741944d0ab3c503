package proposal

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// Event lines shaped as the producers write them (docs/events.md).

func netDenied(sandbox, bin, host string, port int, reason, kind string, at int64, count int) string {
	c := ""
	if count > 1 {
		c = fmt.Sprintf(`"count":%d,"start_time":%d,"end_time":%d,`, count, at-1000, at)
	}
	return fmt.Sprintf(`{"class_uid":4001,"activity_id":1,"action_id":2,"time":%d,%s"status_code":"policy_denied","status_detail":%q,`+
		`"metadata":{"uid":%q},"device":{"name":%q},"firewall_rule":{"name":"default-deny","type":"palisade-egress-proxy"},`+
		`"actor":{"process":{"pid":42,"file":{"path":%q},"parent_process":{"pid":41,"file":{"path":"/usr/bin/bash"}}}},`+
		`"dst_endpoint":{"hostname":%q,"port":%d},"unmapped":{"egress_proxy":{"kind":%q,"reason":%q}}}`,
		at, c, reason, sandbox, sandbox, bin, host, port, kind, reason)
}

func httpDenied(sandbox, bin, method, host string, port int, path, reason, entry string, at int64) string {
	return fmt.Sprintf(`{"class_uid":4002,"activity_id":6,"activity_name":"Post","action_id":2,"time":%d,"status_code":"policy_denied","status_detail":%q,`+
		`"metadata":{"uid":%q},"firewall_rule":{"name":%q},"actor":{"process":{"pid":43,"file":{"path":%q}}},`+
		`"http_request":{"http_method":%q,"url":{"hostname":%q,"port":%d,"path":%q}}}`,
		at, reason, sandbox, entry, bin, method, host, port, path)
}

func fileDenied(sandbox, bin, path string, rights []string, at int64) string {
	return fmt.Sprintf(`{"class_uid":1001,"activity_id":2,"action_id":2,"time":%d,"status_code":"landlock_denied","status_detail":%q,`+
		`"metadata":{"uid":%q},"actor":{"process":{"pid":44,"file":{"path":%q}}},"file":{"path":%q},`+
		`"unmapped":{"landlock":{"blockers":[%s]}}}`,
		at, strings.Join(rights, ","), sandbox, bin, path, `"`+strings.Join(rights, `","`)+`"`)
}

func dnsRefused(sandbox, name string, at int64) string {
	return fmt.Sprintf(`{"class_uid":4001,"activity_id":1,"action_id":2,"time":%d,"status_code":"dns_denied","status_detail":"not_eligible",`+
		`"metadata":{"uid":%q},"firewall_rule":{"name":"policy-dns","type":"policy_dns"},"dst_endpoint":{"domain":%q,"port":53}}`, at, sandbox, name)
}

const t0 = int64(1767225600000)

const basePolicy = `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /etc]
  read_write: [/tmp]
network_policies:
  api:
    endpoints:
      - host: api.test
        port: 80
        protocol: rest
        rules:
          - allow: {method: GET, path: "/v1/**"}
      - host: files.test
        port: 443
        protocol: rest
        access: read-only
      - host: admin.test
        port: 80
        protocol: rest
        rules: [{allow: {method: "*", path: "/**"}}]
        deny_rules: [{method: DELETE, path: "/**"}]
    binaries:
      - path: /usr/bin/curl
`

func mustParse(t *testing.T, s string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func aggregate(t *testing.T, lines ...string) *Aggregator {
	t.Helper()
	a := &Aggregator{}
	for _, l := range lines {
		a.Add([]byte(l))
	}
	return a
}

// The run of the acceptance test, as events: two hosts, one L7 method,
// one binary, one filesystem path; plus repeats, noise and denials no
// proposal answers.
func acceptanceEvents() []string {
	return []string{
		netDenied("sbx", "/usr/bin/curl", "one.test", 80, "no_matching_endpoint", "http", t0, 1),
		netDenied("sbx", "/usr/bin/curl", "one.test", 80, "no_matching_endpoint", "http", t0+5000, 3),
		netDenied("sbx", "/usr/bin/curl", "two.test", 443, "no_matching_endpoint", "connect", t0+100, 1),
		httpDenied("sbx", "/usr/bin/curl", "POST", "api.test", 80, "/v1/items", "l7_no_rule", "api", t0+200),
		netDenied("sbx", "/usr/bin/python3.11", "api.test", 80, "binary_not_allowed", "http", t0+300, 1),
		fileDenied("sbx", "/usr/bin/cat", "/opt/data/notes.txt", []string{"fs.read_file"}, t0+400),
		// Not answered.
		httpDenied("sbx", "/usr/bin/curl", "DELETE", "admin.test", 80, "/x", "l7_deny_rule", "api", t0+500),
		httpDenied("sbx", "/usr/bin/curl", "POST", "files.test", 443, "/upload", "l7_access_denied", "api", t0+600),
		dnsRefused("sbx", "db.test", t0+700),
		`{"class_uid":4001,"activity_id":5,"action_id":2,"time":1767225600800,"status_code":"bypass_denied","metadata":{"uid":"sbx"},"dst_endpoint":{"ip":"198.51.100.9","port":22},"actor":{"process":{"file":{"path":"/usr/bin/ssh"}}}}`,
		// Noise: allowed events, other sandboxes, not events.
		`{"class_uid":4001,"activity_id":1,"action_id":1,"time":1767225600900,"status_code":"allowed","metadata":{"uid":"sbx"},"dst_endpoint":{"hostname":"api.test","port":80}}`,
		netDenied("other", "/usr/bin/curl", "three.test", 80, "no_matching_endpoint", "http", t0, 1),
		`not json`,
		``,
	}
}

func TestAggregate(t *testing.T) {
	a := aggregate(t, acceptanceEvents()...)
	a.Filter.Sandbox = "sbx"
	a2 := &Aggregator{Filter: Filter{Sandbox: "sbx"}}
	for _, l := range acceptanceEvents() {
		a2.Add([]byte(l))
	}
	ds := a2.Denials()
	if len(ds) != 9 {
		t.Fatalf("%d groups: %+v", len(ds), ds)
	}
	var one *Denial
	for i := range ds {
		if ds[i].Host == "one.test" {
			one = &ds[i]
		}
	}
	// 1 + a folded event counting 3; first seen from the folded event's
	// start_time, last from its end_time.
	if one == nil || one.Count != 4 || !one.First.Equal(time.UnixMilli(t0).UTC()) || !one.Last.Equal(time.UnixMilli(t0+5000).UTC()) ||
		one.Binary != "/usr/bin/curl" || len(one.Ancestors) != 1 || one.Ancestors[0] != "/usr/bin/bash" {
		t.Errorf("one.test: %+v", one)
	}
	if len(a.Denials()) != 10 {
		t.Errorf("without a filter: %d groups", len(a.Denials()))
	}
	since := &Aggregator{Filter: Filter{Sandbox: "sbx", Since: time.UnixMilli(t0 + 650)}}
	for _, l := range acceptanceEvents() {
		since.Add([]byte(l))
	}
	if n := len(since.Denials()); n != 3 {
		t.Errorf("since: %d groups, want one.test (last seen later), dns, bypass", n)
	}
	var b bytes.Buffer
	WriteSummary(&b, ds, nil)
	for _, want := range []string{"4      2026-01-01T00:00:00.000Z  2026-01-01T00:00:05.000Z  sbx", "/usr/bin/curl -> POST api.test:80/v1/items (l7_no_rule)", "/usr/bin/cat /opt/data/notes.txt (fs.read_file)", "12 denials in 9 groups"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

const wantAcceptance = `# Palisade policy proposal. Review it, then apply it with
#   policy-sync apply-proposal FILE --approve
# which writes the new policy only if the base is unchanged and the
# result lies within the ceiling.
kind: palisade.policy-proposal/v1
base:
  path: /etc/palisade/policy.yaml
  checksum: BASE
result_checksum: RESULT
patch:
  - op: add_read_only
    path: /opt/data/notes.txt
    answers:
      - sandbox: sbx
        kind: filesystem
        binary: /usr/bin/cat
        file: /opt/data/notes.txt
        rights: [fs.read_file]
        reason: landlock_denied
        count: 1
        first_seen: 2026-01-01T00:00:00.4Z
        last_seen: 2026-01-01T00:00:00.4Z
  - op: add_rule
    entry: api
    endpoint: 1
    rule:
      allow:
        method: POST
        path: /v1/items
    answers:
      - sandbox: sbx
        kind: http
        binary: /usr/bin/curl
        host: api.test
        port: 80
        transport: http
        method: POST
        path: /v1/items
        reason: l7_no_rule
        entry: api
        count: 1
        first_seen: 2026-01-01T00:00:00.2Z
        last_seen: 2026-01-01T00:00:00.2Z
  - op: add_entry
    entry: proposed_curl
    value:
      endpoints:
        - host: one.test
          ports: [80]
        - host: two.test
          ports: [443]
      binaries:
        - path: /usr/bin/curl
    answers:
      - sandbox: sbx
        kind: network
        binary: /usr/bin/curl
        host: one.test
        port: 80
        transport: http
        reason: no_matching_endpoint
        count: 4
        first_seen: 2026-01-01T00:00:00Z
        last_seen: 2026-01-01T00:00:05Z
      - sandbox: sbx
        kind: network
        binary: /usr/bin/curl
        host: two.test
        port: 443
        transport: connect
        reason: no_matching_endpoint
        count: 1
        first_seen: 2026-01-01T00:00:00.1Z
        last_seen: 2026-01-01T00:00:00.1Z
  - op: add_entry
    entry: proposed_python3_11
    value:
      endpoints:
        - host: api.test
          ports: [80]
          protocol: rest
          enforcement: enforce
          rules:
            - allow:
                method: GET
                path: /v1/**
      binaries:
        - path: /usr/bin/python3.11
    answers:
      - sandbox: sbx
        kind: network
        binary: /usr/bin/python3.11
        host: api.test
        port: 80
        transport: http
        reason: binary_not_allowed
        count: 1
        first_seen: 2026-01-01T00:00:00.3Z
        last_seen: 2026-01-01T00:00:00.3Z
unanswered:
  - sandbox: sbx
    kind: bypass
    binary: /usr/bin/ssh
    host: 198.51.100.9
    port: 22
    count: 1
    first_seen: 2026-01-01T00:00:00.8Z
    last_seen: 2026-01-01T00:00:00.8Z
    why: a direct connection that bypassed the proxy; the client must use the proxy (HTTP_PROXY) or a name of the policy (policy DNS)
  - sandbox: sbx
    kind: dns
    host: db.test
    reason: not_eligible
    count: 1
    first_seen: 2026-01-01T00:00:00.7Z
    last_seen: 2026-01-01T00:00:00.7Z
    why: a client that does not use the proxy variables looked the name up; policy DNS answers only names of the policy's endpoints, and the port it wanted is not known (add an endpoint by hand)
  - sandbox: sbx
    kind: http
    binary: /usr/bin/curl
    host: admin.test
    port: 80
    transport: http
    method: DELETE
    path: /x
    reason: l7_deny_rule
    entry: api
    count: 1
    first_seen: 2026-01-01T00:00:00.5Z
    last_seen: 2026-01-01T00:00:00.5Z
    why: a deny rule refuses it; a proposal never removes deny rules
  - sandbox: sbx
    kind: http
    binary: /usr/bin/curl
    host: files.test
    port: 443
    transport: http
    method: POST
    path: /upload
    reason: l7_access_denied
    entry: api
    count: 1
    first_seen: 2026-01-01T00:00:00.6Z
    last_seen: 2026-01-01T00:00:00.6Z
    why: 'api''s endpoint uses access: read-only; allowing POST /upload means rewriting the preset as rules (a preset cannot be widened by one method and path)'
`

// The acceptance run's denials give exactly the hand-written patch, with
// each denial it answers, and the unanswered ones with why; applied, the
// patch allows every answered denial and nothing else was added.
func TestProposeAcceptanceRun(t *testing.T) {
	base := mustParse(t, basePolicy)
	a := &Aggregator{Filter: Filter{Sandbox: "sbx"}}
	for _, l := range acceptanceEvents() {
		a.Add([]byte(l))
	}
	p, err := Propose(base, a.Denials(), Options{BasePath: "/etc/palisade/policy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Marshal()
	want := strings.NewReplacer("BASE", base.Checksum(), "RESULT", p.Result).Replace(wantAcceptance)
	if string(got) != want {
		t.Fatalf("proposal differs from the hand-written one:\n%s\n--- want:\n%s", got, want)
	}
	// Same input, same bytes, whatever the order of the lines.
	rev := &Aggregator{Filter: Filter{Sandbox: "sbx"}}
	lines := acceptanceEvents()
	for i := len(lines) - 1; i >= 0; i-- {
		rev.Add([]byte(lines[i]))
	}
	p2, _ := Propose(base, rev.Denials(), Options{BasePath: "/etc/palisade/policy.yaml"})
	if !bytes.Equal(p2.Marshal(), got) {
		t.Error("the same denials in another order give other bytes")
	}
	q, err := Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	out, err := q.Apply(base)
	if err != nil {
		t.Fatal(err)
	}
	if out.Checksum() != p.Result {
		t.Fatal("applying the parsed proposal gives another policy")
	}
	if xs := ceiling.Contains(out, base, ceiling.Options{}); len(xs) > 0 {
		t.Errorf("the result does not keep the base: %v", xs[0])
	}
}

func proposeLines(t *testing.T, base string, opts Options, lines ...string) *Proposal {
	t.Helper()
	p, err := Propose(mustParse(t, base), aggregate(t, lines...).Denials(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hostsOf(p *Proposal, entry string) []string {
	var out []string
	for _, op := range p.Patch {
		if op.Op == OpAddEntry && op.Entry == entry {
			for _, e := range op.Value.Endpoints {
				out = append(out, fmt.Sprintf("%s:%v", e.Host, e.Ports))
			}
		}
	}
	return out
}

// A host pattern only for MinWildcardNames or more names one label under
// the same parent (same binary, same port); fewer stay exact; a pattern
// the ceiling refuses falls back to the exact names.
func TestWildcardOnlyFromEnoughNames(t *testing.T) {
	three := []string{
		netDenied("s", "/usr/bin/curl", "a.cdn.test", 443, "no_matching_endpoint", "connect", t0, 1),
		netDenied("s", "/usr/bin/curl", "b.cdn.test", 443, "no_matching_endpoint", "connect", t0, 1),
		netDenied("s", "/usr/bin/curl", "c.cdn.test", 443, "no_matching_endpoint", "connect", t0, 1),
		netDenied("s", "/usr/bin/curl", "x.y.cdn.test", 443, "no_matching_endpoint", "connect", t0, 1), // two labels under cdn.test
		netDenied("s", "/usr/bin/curl", "d.cdn.test", 80, "no_matching_endpoint", "http", t0, 1),       // another port
	}
	p := proposeLines(t, basePolicy, Options{}, three...)
	if got := strings.Join(hostsOf(p, "proposed_curl"), " "); got != "*.cdn.test:[443] d.cdn.test:[80] x.y.cdn.test:[443]" {
		t.Errorf("three names: %s", got)
	}
	if g, n := p.Answered(); g != 5 || n != 5 {
		t.Errorf("answered %d groups, %d denials", g, n)
	}
	p = proposeLines(t, basePolicy, Options{}, three[:2]...)
	if got := strings.Join(hostsOf(p, "proposed_curl"), " "); got != "a.cdn.test:[443] b.cdn.test:[443]" {
		t.Errorf("two names: %s", got)
	}
	p = proposeLines(t, basePolicy, Options{MinWildcardNames: -1}, three...)
	if got := strings.Join(hostsOf(p, "proposed_curl"), " "); strings.Contains(got, "*") {
		t.Errorf("patterns off: %s", got)
	}
	// A ceiling holding the three names but no pattern.
	c := mustParse(t, basePolicy+`  cdn:
    endpoints: [{host: a.cdn.test, port: 443}, {host: b.cdn.test, port: 443}, {host: c.cdn.test, port: 443}]
    binaries: [{path: /usr/bin/curl}]
`)
	p = proposeLines(t, basePolicy, Options{Ceiling: checkAgainst(c)}, three[:4]...)
	if got := strings.Join(hostsOf(p, "proposed_curl"), " "); got != "a.cdn.test:[443] b.cdn.test:[443] c.cdn.test:[443]" {
		t.Errorf("under the ceiling: %s", got)
	}
	if len(p.Unanswered) != 1 || p.Unanswered[0].Denial.Host != "x.y.cdn.test" ||
		!strings.Contains(p.Unanswered[0].Why, "policy exceeds the ceiling test-ceiling: network_policies.proposed_curl.endpoints[3]: host x.y.cdn.test not within the ceiling") {
		t.Errorf("unanswered: %+v", p.Unanswered)
	}
}

func checkAgainst(c *policy.Policy) func(*policy.Policy) error {
	return func(p *policy.Policy) error {
		if xs := ceiling.Contains(c, p, ceiling.Options{}); len(xs) > 0 {
			return &ceiling.Error{Ceiling: "test-ceiling", Excesses: xs}
		}
		return nil
	}
}

// Never a binary under a writable path, never a binary the caller could
// not be attributed to, never a glob.
func TestBinariesAProposalRefuses(t *testing.T) {
	p := proposeLines(t, basePolicy, Options{},
		netDenied("s", "/tmp/curl", "one.test", 80, "no_matching_endpoint", "http", t0, 1),
		netDenied("s", "", "one.test", 80, "no_matching_endpoint", "http", t0, 1),
		netDenied("s", "/usr/bin/x[1]", "one.test", 80, "no_matching_endpoint", "http", t0, 1),
		netDenied("s", "/memfd:x (deleted)", "one.test", 80, "no_matching_endpoint", "http", t0, 1),
		netDenied("s", "/usr/bin/curl", "one.test", 80, "attribution_failed", "http", t0, 1),
	)
	if len(p.Patch) != 0 || len(p.Unanswered) != 5 {
		t.Fatalf("patch %+v", p.Patch)
	}
	whys := map[string]string{}
	for _, u := range p.Unanswered {
		whys[u.Denial.Binary+"/"+u.Denial.Reason] = u.Why
	}
	for k, want := range map[string]string{
		"/tmp/curl/no_matching_endpoint":          "/tmp/curl can match files under read_write path /tmp",
		"/no_matching_endpoint":                   "could not be attributed",
		"/usr/bin/x[1]/no_matching_endpoint":      "glob characters",
		"/memfd:x (deleted)/no_matching_endpoint": "not an executable file a policy can name",
		"/usr/bin/curl/attribution_failed":        "no policy change answers",
	} {
		if !strings.Contains(whys[k], want) {
			t.Errorf("%s: %q, want %q", k, whys[k], want)
		}
	}
}

// Filesystem grants: the denied file itself for rights on a file, the
// reported directory for rights on a directory, never above; a write to
// a read_only path moves it to read_write; nothing already allowed.
func TestFilesystemGrants(t *testing.T) {
	p := proposeLines(t, basePolicy+"  fs: {endpoints: [{host: x.test, port: 1}], binaries: [{path: /opt/bin/tool}]}\n", Options{},
		fileDenied("s", "/usr/bin/cp", "/opt/data/a", []string{"fs.read_file"}, t0),
		fileDenied("s", "/usr/bin/cp", "/opt/data/a", []string{"fs.write_file"}, t0+1),
		fileDenied("s", "/usr/bin/cp", "/srv/out", []string{"fs.make_reg"}, t0),
		fileDenied("s", "/usr/bin/ls", "/srv/in", []string{"fs.read_dir"}, t0),
		fileDenied("s", "/usr/bin/cp", "/etc/hosts", []string{"fs.read_file"}, t0),
		fileDenied("s", "/usr/bin/cp", "/etc/hosts", []string{"fs.write_file"}, t0),
		fileDenied("s", "/usr/bin/kill", "/proc/1", []string{"scope.signal"}, t0),
		fileDenied("s", "/usr/bin/cp", "/opt/bin", []string{"fs.make_reg"}, t0), // would make a binary writable
	)
	var ops []string
	for _, op := range p.Patch {
		ops = append(ops, op.Op+" "+op.Path)
	}
	if got := strings.Join(ops, ", "); got != "add_read_write /etc/hosts, add_read_write /opt/data/a, add_read_only /srv/in, add_read_write /srv/out" {
		t.Errorf("ops: %s", got)
	}
	whys := map[string]string{}
	for _, u := range p.Unanswered {
		whys[u.Denial.File+" "+strings.Join(u.Denial.Rights, ",")] = u.Why
	}
	for k, want := range map[string]string{
		"/etc/hosts fs.read_file": "already allowed",
		"/proc/1 scope.signal":    "scope.signal is not a filesystem right",
		"/opt/bin fs.make_reg":    "/opt/bin/tool can match files under read_write path /opt/bin",
	} {
		if !strings.Contains(whys[k], want) {
			t.Errorf("%s: %q, want %q", k, whys[k], want)
		}
	}
	out, err := p.Apply(mustParse(t, basePolicy+"  fs: {endpoints: [{host: x.test, port: 1}], binaries: [{path: /opt/bin/tool}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(out.Filesystem.ReadOnly, " ") != "/etc /srv/in /usr" || strings.Join(out.Filesystem.ReadWrite, " ") != "/etc/hosts /opt/data/a /srv/out /tmp" {
		t.Errorf("result: %v %v", out.Filesystem.ReadOnly, out.Filesystem.ReadWrite)
	}
}

// Apply refuses another base, an edited patch, and Parse refuses what is
// not a proposal.
func TestApplyAndParseRefuse(t *testing.T) {
	base := mustParse(t, basePolicy)
	p := proposeLines(t, basePolicy, Options{}, acceptanceEvents()...)
	other := mustParse(t, strings.Replace(basePolicy, "/usr, /etc", "/usr", 1))
	if _, err := p.Apply(other); err == nil || !strings.Contains(err.Error(), "not the proposal's base") {
		t.Errorf("another base: %v", err)
	}
	edited := strings.Replace(string(p.Marshal()), "host: one.test", "host: evil.test", 1)
	q, err := Parse([]byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Apply(base); err == nil || !strings.Contains(err.Error(), "the proposal was edited") {
		t.Errorf("edited: %v", err)
	}
	for _, bad := range []string{
		"",
		"kind: other\nbase: {checksum: x}\nresult_checksum: y\n",
		"kind: palisade.policy-proposal/v1\nbase: {checksum: x}\nresult_checksum: y\nsurprise: 1\n",
		"kind: palisade.policy-proposal/v1\nbase: {checksum: x}\nresult_checksum: y\npatch: [{op: remove_entry, entry: a}]\n",
		"kind: palisade.policy-proposal/v1\nbase: {checksum: x}\nresult_checksum: y\npatch: [{op: add_rule, entry: a}]\n",
		"kind: palisade.policy-proposal/v1\nresult_checksum: y\n",
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("parsed: %q", bad)
		}
	}
}

// FuzzParse: no input panics the parser; whatever parses, marshals and
// parses back to the same bytes.
func FuzzParse(f *testing.F) {
	p, _ := Propose(mustParseF(basePolicy), aggregateF(acceptanceEvents()...).Denials(), Options{})
	f.Add(p.Marshal())
	f.Add([]byte("kind: palisade.policy-proposal/v1\nbase: {checksum: x}\nresult_checksum: y\npatch: [{op: add_read_only, path: /x}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := Parse(data)
		if err != nil {
			return
		}
		r, err := Parse(q.Marshal())
		if err != nil {
			t.Fatalf("a parsed proposal does not parse back: %v\n%s", err, q.Marshal())
		}
		if !bytes.Equal(r.Marshal(), q.Marshal()) {
			t.Fatalf("not a fixed point:\n%s\n%s", q.Marshal(), r.Marshal())
		}
	})
}

// FuzzAggregate: no event line panics the aggregation, and what it keeps
// has a positive count and a kind.
func FuzzAggregate(f *testing.F) {
	for _, l := range acceptanceEvents() {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		a := &Aggregator{}
		a.Add(line)
		a.Add(line)
		for _, d := range a.Denials() {
			if d.Count < 2 || d.Kind == "" {
				t.Fatalf("%+v", d)
			}
		}
	})
}

func mustParseF(s string) *policy.Policy {
	p, err := policy.Parse([]byte(s))
	if err != nil {
		panic(err)
	}
	return p
}

func aggregateF(lines ...string) *Aggregator {
	a := &Aggregator{}
	for _, l := range lines {
		a.Add([]byte(l))
	}
	return a
}

func TestParseRefusesAliases(t *testing.T) {
	_, err := Parse([]byte("kind: &k palisade.policy-proposal/v1\nbase: {checksum: *k}\nresult_checksum: y\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2: YAML aliases are not allowed") {
		t.Fatalf("%v", err)
	}
}

// A count event that tallies what it folded (the proxy's
// unmapped.egress_proxy.denials, policy DNS's unmapped.policy_dns.names)
// is spread over its tallies, the rest of its count kept under its own
// fields; a forwarded request refused before its L7 rules is a network
// denial whatever its class.
func TestCountEventsWithTallies(t *testing.T) {
	l7Count := `{"class_uid":4002,"activity_id":6,"action_id":2,"time":1767225610000,"count":9,"start_time":1767225600000,"end_time":1767225610000,` +
		`"status_code":"policy_denied","status_detail":"l7_no_rule","metadata":{"uid":"s"},"firewall_rule":{"name":"api"},` +
		`"actor":{"process":{"file":{"path":"/usr/bin/curl"}}},"http_request":{"http_method":"DELETE","url":{"hostname":"api.test","port":80,"path":"/v1/b"}},` +
		`"unmapped":{"egress_proxy":{"kind":"http","reason":"l7_no_rule","denials":[` +
		`{"method":"POST","path":"/v1/a","reason":"l7_no_rule","count":4},{"method":"DELETE","path":"/v1/b","reason":"l7_no_rule","count":2}]}}}`
	dnsCount := `{"class_uid":4001,"activity_id":1,"action_id":2,"time":1767225610000,"count":5,"status_code":"dns_denied","status_detail":"not_eligible",` +
		`"metadata":{"uid":"s"},"firewall_rule":{"name":"policy-dns","type":"policy_dns"},"dst_endpoint":{"domain":"x.test","port":53},` +
		`"unmapped":{"policy_dns":{"names":[{"name":"a.test","count":3},{"name":"b.test","count":2}]}}}`
	fwd := `{"class_uid":4002,"activity_id":3,"action_id":2,"time":1767225600000,"status_code":"policy_denied","status_detail":"no_matching_endpoint",` +
		`"metadata":{"uid":"s"},"firewall_rule":{"name":"default-deny"},"actor":{"process":{"file":{"path":"/usr/bin/curl"}}},` +
		`"http_request":{"http_method":"GET","url":{"hostname":"new.test","port":80,"path":"/x"}}}`
	a := aggregate(t, l7Count, dnsCount, fwd)
	got := map[string]int{}
	for _, d := range a.Denials() {
		got[d.String()] = d.Count
	}
	want := map[string]int{
		"/usr/bin/curl -> POST api.test:80/v1/a (l7_no_rule)":   4,
		"/usr/bin/curl -> DELETE api.test:80/v1/b (l7_no_rule)": 5, // 2 tallied, 3 not
		"policy DNS a.test (not_eligible)":                      3,
		"policy DNS b.test (not_eligible)":                      2,
		"/usr/bin/curl -> new.test:80 (no_matching_endpoint)":   1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

// A grant for another binary or port of a host an MCP or GraphQL
// endpoint selects keeps that endpoint's protocol, rules and options
// (revisions, bounds, persisted queries), not the protocol's defaults.
func TestGrantKeepsProtocolOptions(t *testing.T) {
	base := basePolicy + `  tools:
    endpoints:
      - host: mcp.test
        port: 443
        protocol: mcp
        mcp: {versions: [2025-03-26], max_body_bytes: 4096}
        rules: [{allow: {method: initialize}}, {allow: {method: tools/call, tool: read_file}}]
      - host: gql.test
        port: 443
        protocol: graphql
        access: read-only
        persisted_queries: allow_registered
        graphql_persisted_queries: {abc: {operation_type: query}}
        graphql_max_batch_size: 2
    binaries: [{path: /usr/bin/node}]
`
	p := proposeLines(t, base, Options{},
		netDenied("s", "/usr/bin/curl", "mcp.test", 443, "binary_not_allowed", "connect", t0, 1),
		netDenied("s", "/usr/bin/curl", "gql.test", 443, "binary_not_allowed", "connect", t0, 1))
	var eps []*policy.Endpoint
	for _, op := range p.Patch {
		if op.Op == OpAddEntry && op.Entry == "proposed_curl" {
			eps = op.Value.Endpoints
		}
	}
	if len(eps) != 2 {
		t.Fatalf("proposed endpoints %+v (patch %+v)", eps, p.Patch)
	}
	for _, e := range eps {
		switch e.Host {
		case "mcp.test":
			if e.Protocol != policy.ProtocolMCP || e.MCP == nil || fmt.Sprint(e.MCP.Versions) != "[2025-03-26]" || e.MCP.MaxBodyBytes != 4096 || len(e.Rules) != 2 {
				t.Errorf("mcp grant %+v %+v", e, e.MCP)
			}
		case "gql.test":
			if e.Protocol != policy.ProtocolGraphQL || e.Access != policy.AccessReadOnly || e.PersistedQueries != policy.PersistedQueriesAllowRegistered ||
				e.GraphQLPersistedQueries["abc"].OperationType != "query" || e.GraphQLMaxBatchSize != 2 {
				t.Errorf("graphql grant %+v", e)
			}
		}
	}
}
