package probe

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// CanaryName is the network_policies entry the launcher adds to a policy
// that has none, so that the fence and the proxy exist and their denials
// can be proven. It admits one reserved name (which never resolves) for a
// binary that does not exist: it widens nothing.
const CanaryName = "palisade_probe_canary"

// ProbePolicy returns the policy text the probe sandbox runs under: the
// resolved policy itself, or, when it has no network entries (the bundled
// default), the same policy with the canary entry, so the egress checks
// meet the proxy and the fence rather than an empty namespace. The
// filesystem, landlock and process sections are never changed.
func ProbePolicy(p *policy.Policy) ([]byte, bool, error) {
	c := p.Clone()
	canary := false
	if len(c.NetworkPolicies) == 0 {
		canary = true
		c.NetworkPolicies = map[string]*policy.NetworkPolicy{
			CanaryName: {
				Name:      CanaryName,
				Endpoints: []*policy.Endpoint{{Host: "canary.palisade-probe.invalid", Ports: []int{443}}},
				Binaries:  []policy.Binary{{Path: "/nonexistent/palisade-probe-canary"}},
			},
		}
	}
	text := c.YAML()
	back, err := policy.Parse(text)
	if err != nil {
		return nil, false, fmt.Errorf("probe policy: %w", err)
	}
	// Fail closed: the static sections must be exactly the resolved ones.
	a, b := p.Clone(), back.Clone()
	a.NetworkPolicies, b.NetworkPolicies = nil, nil
	if !bytes.Equal(a.Canonical(), b.Canonical()) {
		return nil, false, fmt.Errorf("probe policy: static sections changed when the canary entry was added")
	}
	return text, canary, nil
}

// ParseResults reads check lines (one JSON object per line) from r;
// other lines (the in-sandbox verdict line, anything else) are ignored:
// the launcher decides the verdict itself.
func ParseResults(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(line), &res); err != nil || res.Check == "" {
			continue
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// Write prints the verdict as the log and stdout carry it: one JSON
// object per check, then OKLine or FailedLine.
func (v Verdict) Write(w io.Writer) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, r := range v.Checks {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	b.WriteString(v.Result + "\n")
	_, err := w.Write(b.Bytes())
	return err
}

// LaunchOptions configure Launch.
type LaunchOptions struct {
	// Policy is the --policy flag ("" follows the resolution order).
	Policy string
	// Supervisor is the sandbox-supervisor binary ("": next to this one).
	Supervisor string
	// ProbeBin is the confinement-probe binary run inside ("": this one).
	ProbeBin string
	// StateDir is passed to the supervisor as --state-dir ("": its default).
	StateDir string
	// TempDir holds the throwaway policy and working directory ("": the
	// system's temporary directory).
	TempDir string
	// Timeout bounds the whole sandbox run (0: 2 minutes).
	Timeout time.Duration
	// Stderr receives the supervisor's diagnostics.
	Stderr io.Writer
	// LogFormat is the supervisor's --log-format ("": its default).
	LogFormat string
}

// Launched describes the probe sandbox.
type Launched struct {
	Sandbox      string `json:"sandbox"`
	PolicySource string `json:"policy_source"`
	PolicyPath   string `json:"policy_path"`
	PolicySHA256 string `json:"policy_sha256"`
	Canary       bool   `json:"canary_network_entry"`
	ExitCode     int    `json:"sandbox_exit_code"`
}
