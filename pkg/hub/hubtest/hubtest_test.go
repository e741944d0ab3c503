package hubtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/actionevent"
	"github.com/palisade-sandbox/palisade/pkg/hub"
)

func do(t *testing.T, method, url, token, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func event(t *testing.T, agent string, i int) string {
	line := fmt.Sprintf(`{"class_uid":4002,"activity_id":3,"time":%d,"action_id":1,"http_request":{"http_method":"GET","url":{"hostname":"pypi.org","path":"/simple/x"}}}`, 1700000000000+i)
	r, err := actionevent.FromOCSF([]byte(line), agent)
	if err != nil {
		t.Fatal(err)
	}
	return string(r.AppendJSON(nil))
}

func TestAuthAndRoutes(t *testing.T) {
	s := Start(t)
	s.AddAgent("a1", "tok-a1")
	s.Assign("a1", hub.Policy{PolicyText: "p", Version: 1, Checksum: strings.Repeat("0", 64)})
	cases := []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/agents/a1/openshell/policy", "", 401},
		{"GET", "/agents/a1/openshell/policy", "wrong", 401},
		{"GET", "/agents/a1/openshell/policy", "tok-a1", 200},
		{"GET", "/agents/a2/openshell/policy", "tok-a1", 403},
		{"POST", "/agents/a1/openshell/policy", "tok-a1", 405},
		{"GET", "/agents/a1/openshell/policy/convergence", "tok-a1", 405},
		{"GET", "/action-events", "tok-a1", 405},
		{"GET", "/nope", "tok-a1", 404},
		{"GET", "/agents//openshell/policy", "tok-a1", 404},
	}
	for _, c := range cases {
		code, _, body := do(t, c.method, s.URL+c.path, c.token, "")
		if code != c.want {
			t.Errorf("%s %s (token %q): %d %s, want %d", c.method, c.path, c.token, code, body, c.want)
		}
	}
}

func TestLedgerDedupAndValidation(t *testing.T) {
	s := Start(t)
	s.AddAgent("a1", "tok")
	e1, e2 := event(t, "a1", 1), event(t, "a1", 2)
	code, _, body := do(t, "POST", s.URL+"/action-events", "tok", `{"events":[`+e1+`,`+e2+`,`+e1+`]}`)
	if code != 200 || !strings.Contains(body, `"accepted":2`) || !strings.Contains(body, `"duplicates":1`) {
		t.Fatalf("post: %d %s", code, body)
	}
	st := s.Stats()
	if st.Distinct != 2 || st.Received != 3 || st.Duplicates() != 1 {
		t.Errorf("stats %+v", st)
	}
	id1, _ := actionevent.Parse([]byte(e1))
	if s.Deliveries(id1.EventID) != 2 || len(s.EventIDs()) != 2 || s.EventIDs()[0] != id1.EventID {
		t.Errorf("deliveries %d ids %v", s.Deliveries(id1.EventID), s.EventIDs())
	}
	for _, bad := range []struct {
		body string
		code int
	}{
		{`{"events":[` + e1, 400},
		{`{"evts":[]}`, 400},
		{`{"events":[` + strings.Replace(e2, `"layer":"sandbox"`, `"layer":"host"`, 1) + `]}`, 422},
		{`{"events":[` + strings.Replace(e2, `"schema"`, `"extra":1,"schema"`, 1) + `]}`, 422},
		{`{"events":[` + event(t, "a2", 9) + `]}`, 403},
	} {
		code, _, body := do(t, "POST", s.URL+"/action-events", "tok", bad.body)
		if code != bad.code {
			t.Errorf("%.60s...: %d %s, want %d", bad.body, code, body, bad.code)
		}
	}
	if st := s.Stats(); st.Distinct != 2 || st.Rejected != 5 {
		t.Errorf("after refusals: %+v", st)
	}
	var many strings.Builder
	many.WriteString(`{"events":[`)
	for i := 0; i <= hub.MaxBatchEvents; i++ {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteString(`{}`)
	}
	many.WriteString(`]}`)
	if code, _, _ := do(t, "POST", s.URL+"/action-events", "tok", many.String()); code != 413 {
		t.Errorf("oversized batch: %d, want 413", code)
	}
}

func TestFailureKnobs(t *testing.T) {
	s := Start(t)
	s.AddAgent("a1", "tok")
	s.Fail(Failure{Route: RouteActionEvents, Code: 429, RetryAfter: "2", Count: 2})
	s.Fail(Failure{Route: RoutePolicy, Code: 500})
	for i := 0; i < 2; i++ {
		code, h, _ := do(t, "POST", s.URL+"/action-events", "tok", `{"events":[]}`)
		if code != 429 || h.Get("Retry-After") != "2" {
			t.Errorf("attempt %d: %d Retry-After %q", i, code, h.Get("Retry-After"))
		}
	}
	if code, _, _ := do(t, "POST", s.URL+"/action-events", "tok", `{"events":[]}`); code != 200 {
		t.Errorf("after the counted failures: %d", code)
	}
	for i := 0; i < 3; i++ { // persistent until cleared
		if code, _, _ := do(t, "GET", s.URL+"/agents/a1/openshell/policy", "tok", ""); code != 500 {
			t.Errorf("policy attempt %d: %d, want 500", i, code)
		}
	}
	s.ClearFailures()
	if code, _, _ := do(t, "GET", s.URL+"/agents/a1/openshell/policy", "tok", ""); code != 404 {
		t.Errorf("after clear: %d, want 404 (nothing assigned)", code)
	}

	s.SetMalformed(`{"accepted":`)
	code, _, body := do(t, "POST", s.URL+"/action-events", "tok", `{"events":[`+event(t, "a1", 5)+`]}`)
	if code != 200 || body != `{"accepted":` {
		t.Errorf("malformed: %d %q", code, body)
	}
	s.SetMalformed("")

	s.SetDelay(300 * time.Millisecond)
	start := time.Now()
	do(t, "GET", s.URL+"/agents/a1/openshell/policy", "tok", "")
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("delay not applied: %v", d)
	}
	s.SetDelay(0)

	if err := s.SetDown(true); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("down server accepted a connection")
	}
	if err := s.SetDown(false); err != nil {
		t.Fatal(err)
	}
	code, _, body = do(t, "GET", s.URL+"/_hubtest/stats", "", "")
	var st map[string]int
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st["distinct"] != 1 {
		t.Errorf("stats after restart: %d %s", code, body)
	}
	reqs := s.Requests()
	if len(reqs) < 8 || reqs[0].Status != 429 || reqs[0].Route != RouteActionEvents || reqs[0].Agent != "a1" {
		t.Errorf("request log: %+v", reqs)
	}
}
