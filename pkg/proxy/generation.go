package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
)

// Generation is one compiled policy in force. It is immutable; a reload
// makes a new one and swaps the pointer, and every connection keeps the
// Generation it started with.
type Generation struct {
	Number  int64
	Decider Decider
	// SHA256 is the checksum of the whole policy (policy.Checksum).
	SHA256 string
	// StaticSHA256 is the checksum of the static sections only
	// (filesystem_policy, landlock, process), which a running sandbox
	// cannot change.
	StaticSHA256 string
	Path         string
	LoadedAt     time.Time
	// TCP holds the names of the policy's `protocol: tcp` endpoints and
	// their ports: what the policy DNS may answer.
	TCP map[string][]int
}

func (g *Generation) ref() ocsf.PolicyRef {
	return ocsf.PolicyRef{
		Name:       filepath.Base(g.Path),
		Path:       g.Path,
		SHA256:     g.SHA256,
		Version:    "1",
		Generation: g.Number,
		Source:     "file",
	}
}

// staticChecksum is the checksum of p with network_policies emptied:
// equal for two policies that differ only in their dynamic part.
func staticChecksum(p *policy.Policy) string {
	c := p.Clone()
	c.NetworkPolicies = nil
	return c.Checksum()
}

// ReloadResult says what a reload did.
type ReloadResult struct {
	Changed    bool   `json:"changed"`
	Generation int64  `json:"generation"`
	SHA256     string `json:"sha256"`
	// StaticIgnored is set when the file's static sections differ from
	// those the sandbox was created with; they were ignored.
	StaticIgnored bool `json:"static_ignored,omitempty"`
}

// Current returns the generation in force.
func (p *Proxy) Current() *Generation { return p.gen.Load() }

// Reload loads the policy file again and, when its checksum changed and
// it parses, validates and compiles, swaps it in as a new generation and
// emits a 5019 Policy Reload event. On any error the generation in force
// stays, a 5019 rejection event is emitted, and the error is returned.
// trigger names what asked ("inotify", "sighup", "control") for the log.
// Reloads are serialised; connections never wait for them.
func (p *Proxy) Reload(trigger string) (ReloadResult, error) {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	cur := p.gen.Load()
	// The credentials first: a failed load revokes them whatever becomes
	// of the policy, and the policy is checked against those in force.
	if err := p.reloadCredentials(trigger, cur == nil); err != nil && cur == nil {
		return ReloadResult{}, err
	}
	pol, err := policy.LoadFile(p.cfg.PolicyPath)
	if err != nil {
		return p.rejectReload(cur, trigger, err)
	}
	sum := pol.Checksum()
	if cur != nil && sum == cur.SHA256 {
		p.log.Debug("policy unchanged", "trigger", trigger, "sha256", sum)
		return ReloadResult{Generation: cur.Number, SHA256: sum}, nil
	}
	if p.cfg.Admit != nil {
		if err := p.cfg.Admit(pol); err != nil {
			return p.rejectReload(cur, trigger, err)
		}
	}
	if err := p.checkPolicyCredentials(pol); err != nil {
		return p.rejectReload(cur, trigger, err)
	}
	g, err := p.compile(pol, sum)
	if err == nil {
		err = p.checkTCPSubstrate(cur, g)
	}
	if err != nil {
		return p.rejectReload(cur, trigger, err)
	}
	p.gen.Store(g)
	p.endpoints.install(g.Number, endpointInventory(pol))
	p.policy = pol
	p.lastReloadErr.Store(nil)
	p.logBinaryNotes(pol, cur == nil)
	res := ReloadResult{Changed: true, Generation: g.Number, SHA256: sum}
	if cur == nil {
		// The first generation: its static sections are the sandbox's.
		p.baseStatic = g.StaticSHA256
		p.baseTCP = len(g.TCP) > 0
		ev := p.src.PolicyLoaded(g.ref(), false)
		p.emitEvent(ev)
		p.log.Info("policy loaded", "path", p.cfg.PolicyPath, "generation", g.Number, "sha256", sum)
		return res, nil
	}
	p.m.reloadsOK.Add(1)
	ev := p.src.PolicyLoaded(g.ref(), true)
	if g.StaticSHA256 != p.baseStatic {
		res.StaticIgnored = true
		ev.SeverityID = ocsf.SeverityLow
		ev.StatusDetail = joinDetail(ev.StatusDetail, "static sections (filesystem_policy, landlock, process) changed and are ignored: they take effect only in a new sandbox")
		p.log.Warn("policy reload: static sections changed; ignored until the sandbox is recreated", "path", p.cfg.PolicyPath)
	}
	p.emitEvent(ev)
	p.log.Info("policy reloaded", "trigger", trigger, "generation", g.Number, "sha256", sum)
	return res, nil
}

// logBinaryNotes logs the notes on the policy's binaries not logged
// before (Config.BinaryNotes).
func (p *Proxy) logBinaryNotes(pol *policy.Policy, first bool) {
	if p.cfg.BinaryNotes == nil {
		return
	}
	for _, n := range p.cfg.BinaryNotes(pol) {
		line := n.String()
		if p.notesSaid[line] {
			continue
		}
		if p.notesSaid == nil {
			p.notesSaid = map[string]bool{}
		}
		p.notesSaid[line] = true
		level := slog.LevelInfo
		if n.Actionable() && !(first && p.cfg.QuietFirstNotes) {
			level = slog.LevelWarn
		}
		p.log.Log(context.Background(), level, line, "path", p.cfg.PolicyPath)
	}
}

func (p *Proxy) compile(pol *policy.Policy, sum string) (*Generation, error) {
	n := p.genSeq + 1
	d, err := p.cfg.Compile(pol, n)
	if err != nil {
		return nil, fmt.Errorf("compile policy: %w", err)
	}
	if d == nil {
		return nil, errors.New("compile policy: engine returned no decider")
	}
	p.genSeq = n
	return &Generation{
		Number:       n,
		Decider:      d,
		SHA256:       sum,
		StaticSHA256: staticChecksum(pol),
		Path:         p.cfg.PolicyPath,
		LoadedAt:     p.now(),
		TCP:          policydns.TCPNames(pol),
	}, nil
}

func (p *Proxy) rejectReload(cur *Generation, trigger string, cause error) (ReloadResult, error) {
	p.m.reloadsRejected.Add(1)
	msg := cause.Error()
	p.lastReloadErr.Store(&msg)
	var kept *ocsf.PolicyRef
	res := ReloadResult{}
	if cur != nil {
		r := cur.ref()
		kept = &r
		res.Generation, res.SHA256 = cur.Number, cur.SHA256
	}
	p.emitEvent(p.src.PolicyRejected(kept, fileSHA256(p.cfg.PolicyPath), cause))
	if cur == nil {
		// At start-up there is no last-known-good policy to keep: New
		// returns "policy does not load" and the proxy exits.
		return res, cause
	}
	p.log.Error("policy reload rejected; keeping the last-known-good policy", "trigger", trigger, "err", cause)
	return res, cause
}

// fileSHA256 is the hex sha256 of the raw file, "" when unreadable; it
// identifies a rejected file in the event without quoting it.
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, policy.MaxPolicySize+1)); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
