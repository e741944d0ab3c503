package hub_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
)

const sum = "sha256:9b74c9897bac770ffc029102a200c5de9b74c9897bac770ffc029102a200c5de"

type fixture struct {
	srv       *hubtest.Server
	dir       string
	tokenFile string
	token     string
	client    *hub.Client
}

func setup(t *testing.T, agent string) *fixture {
	t.Helper()
	srv := hubtest.Start(t)
	dir := t.TempDir()
	tf, err := srv.TokenFile(dir, agent)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := hub.ReadTokenFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := hub.New(hub.Config{URL: srv.URL, AgentID: agent, TokenFile: tf, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, dir: dir, tokenFile: tf, token: tok, client: c}
}

func noToken(t *testing.T, err error, token string) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), token) {
		t.Errorf("error quotes the token: %v", err)
	}
}

func TestGetPolicy(t *testing.T) {
	f := setup(t, "agent-a")
	ctx := context.Background()

	_, err := f.client.GetPolicy(ctx)
	if !errors.Is(err, hub.ErrNotAssigned) {
		t.Fatalf("no assignment: err %v, want ErrNotAssigned", err)
	}
	var se *hub.StatusError
	if !errors.As(err, &se) || se.Code != 404 || se.Retryable() {
		t.Errorf("no assignment: want non-retryable 404 StatusError, have %#v", err)
	}

	want := hub.Policy{PolicyText: "version: 1\nnetwork_policies: {}\n", Version: 3, Checksum: sum, PolicyName: "fleet"}
	f.srv.Assign("agent-a", want)
	got, err := f.client.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if *got != want {
		t.Errorf("policy = %+v, want %+v", *got, want)
	}
}

func TestGetPolicyOtherAgentForbidden(t *testing.T) {
	f := setup(t, "agent-a")
	f.srv.Assign("agent-b", hub.Policy{PolicyText: "x", Version: 1, Checksum: sum})
	// agent-a's token, agent-b's path.
	c, err := hub.New(hub.Config{URL: f.srv.URL, AgentID: "agent-b", TokenFile: f.tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetPolicy(context.Background())
	if !errors.Is(err, hub.ErrForbidden) {
		t.Fatalf("err %v, want ErrForbidden", err)
	}
	noToken(t, err, f.token)
}

func TestUnauthorizedAndTokenReload(t *testing.T) {
	f := setup(t, "agent-a")
	f.srv.Assign("agent-a", hub.Policy{PolicyText: "x", Version: 1, Checksum: sum})
	bad := filepath.Join(f.dir, "bad.token")
	os.WriteFile(bad, []byte("not-a-known-token\n"), 0o600)
	c, err := hub.New(hub.Config{URL: f.srv.URL, AgentID: "agent-a", TokenFile: bad})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.GetPolicy(context.Background())
	if !errors.Is(err, hub.ErrUnauthorized) {
		t.Fatalf("err %v, want ErrUnauthorized", err)
	}
	noToken(t, err, "not-a-known-token")
	// The operator rotates the token file; the next call picks it up.
	os.WriteFile(bad, []byte(f.token+"\r\n"), 0o600)
	if _, err := c.GetPolicy(context.Background()); err != nil {
		t.Fatalf("after token rotation: %v", err)
	}
}

func TestMalformedResponses(t *testing.T) {
	f := setup(t, "agent-a")
	f.srv.Assign("agent-a", hub.Policy{PolicyText: "x", Version: 1, Checksum: sum})
	ctx := context.Background()
	for _, body := range []string{`{"policy_text":`, `[]`, `{"policy_text":"","version":1,"checksum":"` + sum + `"}`, `{"policy_text":"x","version":1,"checksum":"md5:abc"}`, `{"policy_text":"x","version":0,"checksum":"` + sum + `"}`, `{"policy_text":"x","version":1,"checksum":"` + sum + `"} {}`} {
		f.srv.SetMalformed(body)
		_, err := f.client.GetPolicy(ctx)
		var re *hub.ResponseError
		if !errors.As(err, &re) {
			t.Errorf("policy body %s: err %v, want *ResponseError", body, err)
		}
	}
	for _, body := range []string{`not json`, `{"accepted":0,"duplicates":0}`, `{"accepted":-1,"duplicates":2}`, `null`} {
		f.srv.SetMalformed(body)
		_, err := f.client.PostActionEvents(ctx, records(t, "agent-a", 1))
		var re *hub.ResponseError
		if !errors.As(err, &re) {
			t.Errorf("batch body %s: err %v, want *ResponseError", body, err)
		}
	}
}

func TestStatusErrorsAndRetryAfter(t *testing.T) {
	f := setup(t, "agent-a")
	ctx := context.Background()
	f.srv.Fail(hubtest.Failure{Route: hubtest.RouteActionEvents, Code: 429, RetryAfter: "7", Count: 1})
	_, err := f.client.PostActionEvents(ctx, records(t, "agent-a", 2))
	var se *hub.StatusError
	if !errors.As(err, &se) || se.Code != 429 || se.RetryAfter != 7*time.Second || !se.Retryable() {
		t.Fatalf("429: err %#v, want retryable StatusError with RetryAfter 7s", err)
	}
	if hub.RetryAfter(fmt.Errorf("wrapped: %w", err)) != 7*time.Second {
		t.Error("RetryAfter does not see through wrapping")
	}
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	f.srv.Fail(hubtest.Failure{Code: 503, RetryAfter: date, Count: 1})
	_, err = f.client.PostActionEvents(ctx, records(t, "agent-a", 2))
	if ra := hub.RetryAfter(err); ra < 85*time.Second || ra > 91*time.Second {
		t.Errorf("503 with HTTP-date Retry-After: %v (RetryAfter %v)", err, ra)
	}
	f.srv.Fail(hubtest.Failure{Code: 500, Count: 1})
	_, err = f.client.PostActionEvents(ctx, records(t, "agent-a", 2))
	if !errors.As(err, &se) || se.Code != 500 || !se.Retryable() || se.RetryAfter != 0 {
		t.Errorf("500: %#v", err)
	}
	// The failures were consumed: the next post goes through.
	if _, err := f.client.PostActionEvents(ctx, records(t, "agent-a", 2)); err != nil {
		t.Fatal(err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":                              0,
		"0":                             0,
		"-3":                            0,
		"12":                            12 * time.Second,
		"junk":                          0,
		"Thu, 01 Jan 2026 00:00:30 GMT": 30 * time.Second,
		"Wed, 31 Dec 2025 23:00:00 GMT": 0,
		"999999999":                     24 * time.Hour,
	}
	for in, want := range cases {
		if got := hub.ParseRetryAfter(in, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestSlowDownAndHangUp(t *testing.T) {
	f := setup(t, "agent-a")
	c, err := hub.New(hub.Config{URL: f.srv.URL, AgentID: "agent-a", TokenFile: f.tokenFile, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	f.srv.SetDelay(3 * time.Second)
	start := time.Now()
	_, err = c.PostActionEvents(ctx, records(t, "agent-a", 1))
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("slow hub: err %v after %v, want a timeout within ~300ms", err, time.Since(start))
	}
	f.srv.SetDelay(0)

	if err := f.srv.SetDown(true); err != nil {
		t.Fatal(err)
	}
	_, err = c.PostActionEvents(ctx, records(t, "agent-a", 1))
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Errorf("down hub: err %v, want a connection error", err)
	}
	if err := f.srv.SetDown(false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostActionEvents(ctx, records(t, "agent-a", 1)); err != nil {
		t.Errorf("hub back up: %v", err)
	}

	f.srv.SetHangUp(true)
	_, err = c.PostActionEvents(ctx, records(t, "agent-a", 1))
	var se *hub.StatusError
	if err == nil || errors.As(err, &se) {
		t.Errorf("hang-up: err %v, want a transport error", err)
	}
	f.srv.SetHangUp(false)
	noToken(t, err, f.token)
}

func records(t testing.TB, agent string, n int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		line := fmt.Sprintf(`{"class_uid":4001,"activity_id":1,"time":%d,"action_id":2,"dst_endpoint":{"hostname":"h%d.example","port":443}}`, 1700000000000+i, time.Now().UnixNano())
		r, err := actionevent.FromOCSF([]byte(line), agent)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = r.AppendJSON(nil)
	}
	return out
}

func TestPostActionEventsIdempotent(t *testing.T) {
	f := setup(t, "agent-a")
	ctx := context.Background()
	batch := records(t, "agent-a", 50)
	res, err := f.client.PostActionEvents(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 50 || res.Duplicates != 0 {
		t.Errorf("first post: %+v", res)
	}
	res, err = f.client.PostActionEvents(ctx, append(batch[:10:10], records(t, "agent-a", 5)...))
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != 5 || res.Duplicates != 10 {
		t.Errorf("resend: %+v, want 5 accepted 10 duplicates", res)
	}
	st := f.srv.Stats()
	if st.Distinct != 55 || st.Received != 65 || st.Duplicates() != 10 || st.Batches != 2 {
		t.Errorf("hub stats %+v", st)
	}
	rec, _ := actionevent.Parse(batch[3])
	stored, ok := f.srv.Event(rec.EventID)
	if !ok || stored.Target != rec.Target || stored.EventID != rec.EventID {
		t.Errorf("stored event %+v, want %+v", stored, rec)
	}
}

func TestPostActionEventsRefusals(t *testing.T) {
	f := setup(t, "agent-a")
	ctx := context.Background()
	// Another agent's records with agent-a's token.
	_, err := f.client.PostActionEvents(ctx, records(t, "agent-b", 2))
	if !errors.Is(err, hub.ErrForbidden) {
		t.Errorf("agent mismatch: %v, want ErrForbidden", err)
	}
	// An invalid record: 422, not retryable, nothing stored.
	good := records(t, "agent-a", 2)
	bad := []byte(strings.Replace(string(good[1]), `"action":"deny"`, `"action":"maybe"`, 1))
	_, err = f.client.PostActionEvents(ctx, [][]byte{good[0], bad})
	var se *hub.StatusError
	if !errors.As(err, &se) || se.Code != 422 || se.Retryable() || !strings.Contains(se.Detail, "events[1]") {
		t.Errorf("invalid event: %v", err)
	}
	if st := f.srv.Stats(); st.Distinct != 0 || st.Rejected != 2 {
		t.Errorf("hub stored from refused batches: %+v", st)
	}
}

func TestConvergence(t *testing.T) {
	f := setup(t, "agent-a")
	ctx := context.Background()
	cv := hub.Convergence{Converged: true, InstalledChecksum: sum, InstalledVersion: 3, DesiredChecksum: sum, DesiredVersion: 3, Source: hub.SourceHub, Reason: "installed"}
	if err := f.client.ReportConvergence(ctx, cv); err != nil {
		t.Fatal(err)
	}
	got := f.srv.Convergence("agent-a")
	if len(got) != 1 || got[0].InstalledChecksum != sum || !got[0].Converged || got[0].Source != "hub" || got[0].ObservedAt.IsZero() {
		t.Fatalf("hub recorded %+v", got)
	}
	// Client-side validation: nothing is sent.
	for _, bad := range []hub.Convergence{
		{Source: "elsewhere", Reason: "x"},
		{Source: hub.SourceHub, Reason: ""},
		{Source: hub.SourceHub, Reason: "x", Converged: true},
		{Source: hub.SourceHub, Reason: "x", InstalledChecksum: "abc"},
	} {
		if err := f.client.ReportConvergence(ctx, bad); err == nil {
			t.Errorf("invalid report %+v accepted", bad)
		}
	}
	if n := len(f.srv.Convergence("agent-a")); n != 1 {
		t.Errorf("invalid reports reached the hub: %d recorded", n)
	}
	// Reporting for another agent is forbidden.
	c, _ := hub.New(hub.Config{URL: f.srv.URL, AgentID: "agent-b", TokenFile: f.tokenFile})
	if err := c.ReportConvergence(ctx, cv); !errors.Is(err, hub.ErrForbidden) {
		t.Errorf("other agent: %v, want ErrForbidden", err)
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		content string
		want    string
		ok      bool
	}{
		{"tok123\n", "tok123", true},
		{"tok123\r\n", "tok123", true},
		{"tok123", "tok123", true},
		{"", "", false},
		{"\n", "", false},
		{"tok 123\n", "", false},
		{"tok123\n\n", "", false},
		{"s3cr3t\x00x", "", false},
	}
	for i, c := range cases {
		p := filepath.Join(dir, fmt.Sprintf("t%d", i))
		os.WriteFile(p, []byte(c.content), 0o600)
		got, err := hub.ReadTokenFile(p)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%q: got %q, %v", c.content, got, err)
		}
		// The token's own characters, not just "123": the temp dir's
		// random name may contain those digits.
		if err != nil && (strings.Contains(err.Error(), "tok1") || strings.Contains(err.Error(), "tok 1") || strings.Contains(err.Error(), "s3cr3t")) {
			t.Errorf("%q: error quotes the token: %v", c.content, err)
		}
	}
	if _, err := hub.ReadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "t")
	os.WriteFile(tf, []byte("tok\n"), 0o600)
	cases := []struct {
		cfg  hub.Config
		want string
	}{
		{hub.Config{URL: "", AgentID: "a", TokenFile: tf}, "URL"},
		{hub.Config{URL: "ftp://h", AgentID: "a", TokenFile: tf}, "scheme"},
		{hub.Config{URL: "http://u:p@h", AgentID: "a", TokenFile: tf}, "user information"},
		{hub.Config{URL: "http://h/?t=1", AgentID: "a", TokenFile: tf}, "query"},
		{hub.Config{URL: "http:///x", AgentID: "a", TokenFile: tf}, "no host"},
		{hub.Config{URL: "http://h", AgentID: "../x", TokenFile: tf}, "agent id"},
		{hub.Config{URL: "http://h", AgentID: "", TokenFile: tf}, "agent id"},
		{hub.Config{URL: "http://h", AgentID: "a", TokenFile: ""}, "token file"},
		{hub.Config{URL: "http://h", AgentID: "a", TokenFile: filepath.Join(dir, "nope")}, "token file"},
	}
	for _, c := range cases {
		_, err := hub.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one mentioning %q", c.cfg, err, c.want)
		}
	}
}

// A path prefix in the hub URL is kept, and redirects are not followed
// (the bearer token must not travel anywhere else).
func TestPathPrefixAndNoRedirects(t *testing.T) {
	srv := hubtest.Start(t)
	dir := t.TempDir()
	tf, _ := srv.TokenFile(dir, "agent-a")
	srv.Assign("agent-a", hub.Policy{PolicyText: "x", Version: 2, Checksum: sum})
	var redirected bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			redirected = true
			return
		}
		if p, ok := strings.CutPrefix(r.URL.Path, "/api"); ok {
			r2 := r.Clone(r.Context())
			r2.URL.Path = p
			srv.ServeHTTP(w, r2)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer front.Close()
	c, err := hub.New(hub.Config{URL: front.URL + "/api/", AgentID: "agent-a", TokenFile: tf})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.GetPolicy(context.Background())
	if err != nil || p.Version != 2 {
		t.Fatalf("via prefix: %v %+v", err, p)
	}
	c2, _ := hub.New(hub.Config{URL: front.URL, AgentID: "agent-a", TokenFile: tf})
	_, err = c2.GetPolicy(context.Background())
	var se *hub.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusFound || redirected {
		t.Errorf("redirect: err %v, followed %v", err, redirected)
	}
}
