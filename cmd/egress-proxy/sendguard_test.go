package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/attribution"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

// --send-guard off is an operator's opt-in to less protection: in
// sandbox mode it is said in a Send Guard event (status Failure, the
// flag named) and a warning, never silently.
func TestSendGuardOffIsReported(t *testing.T) {
	rec := ocsftest.NewRecorder(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	src := ocsf.NewSource("sbx", "egress-proxy", "test")
	var attr attribution.Backend
	g, err := sendGuard(&flags{sendGuard: "off", cgroup: "/sys/fs/cgroup/x"}, attr, rec, src, log)
	if g != nil || err != nil {
		t.Fatalf("off: %v, %v; want no guard, no error", g, err)
	}
	evs := rec.Events()
	if len(evs) != 1 || evs[0]["activity_name"] != ocsf.ActivitySendGuard || evs[0]["status"] != "Failure" ||
		!strings.Contains(evs[0]["status_detail"].(string), "--send-guard off") {
		t.Errorf("events %v, want one Send Guard event (Failure) naming --send-guard off", evs)
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("no warning logged: %s", logs.String())
	}
}
