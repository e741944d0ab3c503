package sandbox

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/state"
)

// Component is the metadata.source of the supervisor's events.
const Component = "sandbox-supervisor"

// OCSFEvents turns the sandbox lifecycle into OCSF 1.8.0 events: 5019 for
// the policy load and the applied confinement, 2004 for each degraded
// layer, 1007 for the command's launch and termination (and for a launch
// that failed).
type OCSFEvents struct {
	emit    ocsf.Emitter
	version string
	agentID string
	src     *ocsf.Source
	policy  *ocsf.PolicyRef
	hard    bool
	degr    []string
	args    []string
	uid     uint32
	// CallerUID is the user a launch that failed before the command
	// existed is recorded under: the real caller ($SUDO_UID under sudo,
	// else the real uid), never a made-up 0.
	CallerUID uint32
	mu        sync.Mutex // guards Lost: denials are sent from another goroutine
	// Lost counts events the emitter refused (disk full, closed pipe).
	Lost int
}

// NewOCSFEvents returns an Events that writes to emit; args is the
// command the sandbox runs.
func NewOCSFEvents(emit ocsf.Emitter, agentID, productVersion string, args []string) *OCSFEvents {
	return &OCSFEvents{emit: emit, agentID: agentID, version: productVersion, args: args,
		src: ocsf.NewSource("unnamed", Component, productVersion), CallerUID: state.InvokingUID()}
}

func (e *OCSFEvents) send(ev ocsf.Event) {
	if err := e.emit.Emit(ev); err != nil {
		e.mu.Lock()
		e.Lost++
		e.mu.Unlock()
	}
}

// Created implements Events.
func (e *OCSFEvents) Created(name, kind string) {
	e.src = ocsf.NewSource(name, Component, e.version)
	e.src.Labels = []string{"kind:" + kind}
	if e.agentID != "" {
		e.src.Labels = append(e.src.Labels, "agent:"+e.agentID)
	}
}

// PolicyLoaded implements Events.
func (e *OCSFEvents) PolicyLoaded(p PolicyInfo) {
	name := filepath.Base(p.Path)
	if p.Source == "bundled" {
		name = "default-policy.yaml"
	}
	e.policy = &ocsf.PolicyRef{Name: name, Path: p.Path, SHA256: p.SHA256, Version: "1", Source: p.Source}
	if p.Source == "bundled" {
		e.policy.Path = ""
	}
	e.hard = p.HardRequirement
	e.send(e.src.PolicyLoaded(*e.policy, false))
}

// Degraded implements Events.
func (e *OCSFEvents) Degraded(feature, detail, optIn string) {
	e.degr = append(e.degr, feature)
	reason := fmt.Sprintf("allowed by %s", optIn)
	if detail != "" {
		reason += ": " + detail
	}
	e.send(e.src.DegradedRun(feature, reason))
}

// Confined implements Events.
func (e *OCSFEvents) Confined(c Confinement, cgroupName string) {
	mode := "best_effort"
	if e.hard {
		mode = "hard_requirement"
	}
	oc := ocsf.Confinement{
		Namespaces: c.Namespaces,
		Cgroup:     &ocsf.CgroupState{Version: "hybrid", Path: "/palisade/" + cgroupName},
		Identity:   &ocsf.IdentityState{UID: int(c.UID), GID: int(c.GID), NoNewPrivs: true},
		Degraded:   e.degr,
	}
	if c.Landlock.Enforced {
		ls := &ocsf.LandlockState{ABI: c.Landlock.ABI, Mode: mode, ReadOnlyRules: c.Landlock.ReadOnly, ReadWriteRules: c.Landlock.ReadWrite}
		for _, s := range c.Landlock.Skipped {
			ls.SkippedPaths = append(ls.SkippedPaths, s.Path)
		}
		if c.Landlock.Scopes != "" {
			ls.Scopes = strings.Split(strings.Trim(c.Landlock.Scopes, "{}"), ",")
		}
		oc.Landlock = ls
	}
	if c.Seccomp {
		oc.Seccomp = &ocsf.SeccompState{Mode: "filter", Rules: c.SeccompRules, AllThreads: true}
	}
	e.send(e.src.ConfinementApplied(oc, e.policy))
}

func (e *OCSFEvents) proc(pid int, args []string, uid uint32) ocsf.Process {
	// The command line is left out on purpose: arguments can carry
	// credentials, and secrets never enter events.
	p := ocsf.Process{PID: pid, UID: fmt.Sprintf("%s/%d", e.src.Sandbox, pid)}
	if pid == 0 {
		// A command that never started has no pid; OCSF needs pid or uid.
		p.UID = e.src.Sandbox + "/unstarted"
	}
	if len(args) > 0 {
		p.Name = filepath.Base(args[0])
		if filepath.IsAbs(args[0]) {
			p.File = &ocsf.File{Name: p.Name, Path: args[0], TypeID: 1}
		}
	}
	p.User = &ocsf.User{UID: fmt.Sprint(uid)}
	return p
}

func (e *OCSFEvents) actor() ocsf.Actor {
	return ocsf.Actor{AppName: Component, Process: &ocsf.Process{PID: 1, Name: "palisade-init"}}
}

// Launched implements Events.
func (e *OCSFEvents) Launched(pid int, args []string, uid, gid uint32) {
	e.uid = uid
	if e.args == nil {
		e.args = args // an exec's: the terminate event names it too
	}
	e.send(e.src.ProcessLaunch(e.proc(pid, args, uid), e.actor()))
}

// Exited implements Events.
func (e *OCSFEvents) Exited(pid int, code, signal int) {
	c := code
	if signal != 0 {
		c = 128 + signal
	}
	e.send(e.src.ProcessTerminate(e.proc(pid, e.args, e.uid), e.actor(), ocsf.Exit{Code: c, Signal: signal}))
}

// Failed implements Events: a launch that did not happen.
func (e *OCSFEvents) Failed(stage, msg string, code int) {
	uid := e.uid
	if uid == 0 {
		uid = e.CallerUID // the command never ran as its own user
	}
	ev := e.src.ProcessLaunch(e.proc(0, e.args, uid), e.actor())
	ev.StatusID = ocsf.StatusFailure
	ev.StatusCode = fmt.Sprint(code)
	ev.StatusDetail = stage + ": " + msg
	ev.Message = fmt.Sprintf("sandbox %s: %s failed: %s", e.src.Sandbox, stage, msg)
	e.send(ev)
}

// Incident implements Events: a Detection Finding of type kind.
func (e *OCSFEvents) Incident(kind, title, detail string) {
	ev := e.src.Finding(ocsf.FindingInfo{Title: title, Desc: detail, Types: []string{kind}}, ocsf.SeverityHigh,
		ocsf.Evidence{Name: kind, Device: e.src.Device(), Data: map[string]any{"detail": detail}})
	e.send(ev)
}

// Discards reports whether events go nowhere (no --events): then the
// supervisor does not read denial records at all.
func (e *OCSFEvents) Discards() bool { return e.emit == nil || e.emit == ocsf.Nowhere }

// Warm builds encoding/json's encoders for the event types the supervisor
// emits, so the first event does not pay for it; nothing when events go
// nowhere.
func (e *OCSFEvents) Warm() {
	if e.emit == nil || e.emit == ocsf.Nowhere {
		return
	}
	for _, v := range []any{&ocsf.ConfigStateChange{}, &ocsf.ProcessActivity{}, &ocsf.DetectionFinding{}, ocsf.Confinement{}} {
		json.Marshal(v)
	}
}
