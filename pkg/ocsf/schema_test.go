package ocsf_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/ocsf/ocsftest"
)

// Every constructor's output validates against the OCSF 1.8.0 definitions.
func TestEveryConstructorValidates(t *testing.T) {
	ocsftest.RequireSchema(t)
	seen := map[int]bool{}
	for _, ex := range examples() {
		t.Run(ex.Name, func(t *testing.T) {
			ocsftest.ValidateEvent(t, ex.Ev)
			seen[ex.Ev.EventBase().ClassUID] = true
		})
	}
	for uid := range ocsf.Classes() {
		if !seen[uid] {
			t.Errorf("no example event of class %d", uid)
		}
	}
}

// Producers may adjust events after construction; the result of the
// documented adjustments still validates.
func TestAdjustedEventsValidate(t *testing.T) {
	s := fixedSource()
	rec := ocsftest.NewRecorder(t)
	ev := s.NetworkOpen(conn(), ocsf.Decision{Code: "policy_denied", Reason: "x"})
	ev.Count = 17 // rate-limited repeats
	ev.StartTime, ev.EndTime = ev.Time-5000, ev.Time
	rec.Emit(ev)
	cfg := s.PolicyLoaded(ocsf.PolicyRef{SHA256: "ab"}, true)
	cfg.SeverityID = ocsf.SeverityLow
	cfg.StatusDetail = "static sections changed; ignored until the sandbox is recreated"
	rec.Emit(cfg)
	fin := s.Finding(ocsf.FindingInfo{Title: "custom", Types: []string{"Other"}}, ocsf.SeverityLow,
		ocsf.Evidence{Process: &ocsf.Process{PID: 9, Name: "x"}})
	fin.Remediation = &ocsf.Remediation{Desc: "recreate the sandbox"}
	rec.Emit(fin)
	// A sandbox without a kernel release and a device IP.
	s2 := &ocsf.Source{Sandbox: "sbx-2", Component: "egress-proxy"}
	d := s2.Device()
	d.IP = "10.200.0.1"
	ev2 := s2.NetworkRefuse(ocsf.Conn{Dst: &ocsf.NetworkEndpoint{IP: "2001:db8::1", Port: 80}}, ocsf.Decision{})
	ev2.Device = d
	rec.Emit(ev2)
	if n := len(rec.ByClass(ocsf.ClassNetworkActivity)); n != 2 {
		t.Fatalf("recorded %d network events, want 2", n)
	}
}

// The Recorder is safe for concurrent emitters.
func TestRecorderConcurrent(t *testing.T) {
	rec := ocsftest.NewRecorder(t)
	s := fixedSource()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec.Emit(s.ProcessLaunch(ocsf.Process{PID: 100 + i, Name: "p"}, ocsf.Actor{AppName: "t"}))
		}()
	}
	wg.Wait()
	if n := len(rec.Lines()); n != 8 {
		t.Fatalf("recorded %d lines, want 8", n)
	}
}

// The caption tables Marshal uses equal the OCSF definitions, entry for
// entry, so ids and captions are never written from memory.
func TestTables(t *testing.T) {
	s := ocsftest.RequireSchema(t)
	tables := ocsf.EnumCaptions()
	classes := ocsf.Classes()
	for uid, info := range classes {
		def := s.Classes[uid]
		if def == nil {
			t.Fatalf("class %d missing from the definitions", uid)
		}
		if def.Caption != info.Name || def.CategoryUID != info.CategoryUID || def.Category != info.CategoryName {
			t.Errorf("class %d: table %+v, definition %q %d %q", uid, info, def.Caption, def.CategoryUID, def.Category)
		}
		// type_name = "<class caption>: <activity caption>".
		acts := tables[fmt.Sprintf("%d/activity_id", uid)]
		for id, c := range acts {
			key := strconv.Itoa(uid*100 + id)
			if got := def.Attributes["type_uid"].Enum[key].Caption; got != info.Name+": "+c {
				t.Errorf("type_uid %s caption %q, Marshal derives %q", key, got, info.Name+": "+c)
			}
		}
	}
	checked := 0
	for key, table := range tables {
		var defs []ocsftest.Attr
		var where []string
		switch {
		case strings.Contains(key, "/"):
			uidStr, attr, _ := strings.Cut(key, "/")
			uid, _ := strconv.Atoi(uidStr)
			defs = append(defs, s.Classes[uid].Attributes[attr])
			where = append(where, key)
		case strings.Contains(key, "."):
			obj, attr, _ := strings.Cut(key, ".")
			if s.Objects[obj] == nil {
				t.Errorf("%s: object %s has no definition", key, obj)
				continue
			}
			defs = append(defs, s.Objects[obj].Attributes[key[len(obj)+1:]])
			where = append(where, key)
			_ = attr
		default:
			for _, uid := range slices.Sorted(maps.Keys(classes)) {
				if _, specific := tables[fmt.Sprintf("%d/%s", uid, key)]; specific {
					continue
				}
				if a, ok := s.Classes[uid].Attributes[key]; ok {
					defs = append(defs, a)
					where = append(where, fmt.Sprintf("%d/%s", uid, key))
				}
			}
		}
		if len(defs) == 0 {
			t.Errorf("%s: no definition found", key)
		}
		for i, a := range defs {
			got := map[int]string{}
			for k, e := range a.Enum {
				id, err := strconv.Atoi(k)
				if err != nil {
					t.Fatalf("%s: enum key %q", where[i], k)
				}
				got[id] = e.Caption
			}
			if !maps.Equal(got, table) {
				t.Errorf("%s: table %v, definition %v", where[i], table, got)
			}
			checked++
		}
	}
	if checked < len(tables) {
		t.Fatalf("checked %d enum definitions for %d tables", checked, len(tables))
	}
}
