// Package policysync converges a worker on the sandbox policy its hub
// assigns it (seed 000, "Policy delivery"): it pulls
// GET /agents/{id}/openshell/policy, checks that the text is a valid policy
// whose checksum is the one the hub claims, installs it at
// ~/.mac/openshell-policy.yaml by write-then-rename at mode 0600 when it
// differs from what is installed, and reports what is installed with
// POST .../policy/convergence.
//
// Every failure is fail-safe: an unreachable hub, a missing assignment, a
// refused token, a malformed answer or an invalid policy leaves the
// installed file byte-identical. An explicit MAC_OPENSHELL_POLICY override
// is never overwritten. Installing never touches a running sandbox: the
// supervisor reads the policy only when it creates one.
//
// Checksums are pkg/policy's canonical checksum (sha256 of the canonical
// form), so "converged" means "the installed file means exactly what the
// hub assigned", whatever its formatting.
package policysync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// EnvSync is the knob that turns policy sync off (seed 000:
// MAC_OPENSHELL_POLICY_SYNC, default 1).
const EnvSync = "MAC_OPENSHELL_POLICY_SYNC"

// Enabled reports whether policy sync is on: it is unless EnvSync is "0",
// "false", "no" or "off" (any case). Unset or empty means on.
func Enabled(getenv func(string) string) bool {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch strings.ToLower(strings.TrimSpace(getenv(EnvSync))) {
	case "0", "false", "no", "off":
		return false
	}
	return true
}

// Outcome is what one sync did.
type Outcome string

// Outcomes. Only OutcomeFailedSafe is a failure.
const (
	// OutcomeInstalled: the assignment differed from what was installed
	// and is now installed.
	OutcomeInstalled Outcome = "installed"
	// OutcomeAlreadyConverged: the installed file already means the same
	// as the assignment; nothing was written.
	OutcomeAlreadyConverged Outcome = "already_converged"
	// OutcomeOverride: MAC_OPENSHELL_POLICY is set; nothing was written.
	OutcomeOverride Outcome = "override"
	// OutcomeFailedSafe: something went wrong; the installed file is
	// untouched (byte-identical).
	OutcomeFailedSafe Outcome = "failed_safe"
	// OutcomeDisabled: MAC_OPENSHELL_POLICY_SYNC=0; nothing was done.
	OutcomeDisabled Outcome = "disabled"
)

// Failure classes of OutcomeFailedSafe (Result.Failure).
const (
	FailHubUnreachable = "hub_unreachable"    // transport error, timeout
	FailNotAssigned    = "not_assigned"       // 404
	FailForbidden      = "forbidden"          // 403: the token's agent is another agent
	FailUnauthorized   = "unauthorized"       // 401: the token is not accepted
	FailHubError       = "hub_error"          // any other non-2xx (500, 429, ...)
	FailMalformed      = "malformed_response" // 2xx that breaks the contract
	FailChecksum       = "checksum_mismatch"  // policy_text does not hash to checksum
	FailInvalidPolicy  = "invalid_policy"     // policy_text is not a valid policy
	FailInstall        = "install_failed"     // writing the file failed
	FailNoHome         = "home_unset"         // no HOME: nowhere to install
	FailCeiling        = "exceeds_ceiling"    // the assignment is not within the host's ceiling (or the ceiling is unusable)
)

// Result describes one sync. It is also the JSON that `policy-sync once
// --json` prints.
type Result struct {
	Time    time.Time `json:"time"`
	Outcome Outcome   `json:"outcome"`
	// Converged is true when the policy a new sandbox would use is the
	// assigned one.
	Converged bool `json:"converged"`
	// Path is the file considered installed: ~/.mac/openshell-policy.yaml,
	// or the MAC_OPENSHELL_POLICY file under an override.
	Path string `json:"path,omitempty"`
	// Source is the convergence source reported to the hub (hub, override,
	// local, bundled_default).
	Source            string `json:"source"`
	InstalledChecksum string `json:"installed_checksum,omitempty"`
	InstalledVersion  int64  `json:"installed_version,omitempty"`
	DesiredChecksum   string `json:"desired_checksum,omitempty"`
	DesiredVersion    int64  `json:"desired_version,omitempty"`
	PolicyName        string `json:"policy_name,omitempty"`
	// Override is true when MAC_OPENSHELL_POLICY is set.
	Override bool `json:"override"`
	// Wrote is true only when the installed file was replaced.
	Wrote bool `json:"wrote"`
	// Failure classifies OutcomeFailedSafe (Fail* constants).
	Failure string `json:"failure,omitempty"`
	// Reason is one human sentence: what happened and why.
	Reason string `json:"reason"`
	// Reported is true when the hub accepted the convergence report.
	Reported    bool   `json:"reported"`
	ReportError string `json:"report_error,omitempty"`
	// RetryAfter is the delay the hub asked for (watch honours it).
	RetryAfter time.Duration `json:"-"`
}

// OK reports whether the result is a success (exit status 0 of `once`).
func (r *Result) OK() bool { return r.Outcome != OutcomeFailedSafe }

// Hub is the part of *hub.Client a Syncer uses.
type Hub interface {
	GetPolicy(ctx context.Context) (*hub.Policy, error)
	ReportConvergence(ctx context.Context, cv hub.Convergence) error
}

// Syncer converges one worker. The zero value is not usable; set Hub and
// Home (or Getenv with HOME).
type Syncer struct {
	Hub Hub
	// Home is the home directory holding .mac/openshell-policy.yaml; ""
	// means Getenv("HOME").
	Home string
	// Getenv reads the environment (MAC_OPENSHELL_POLICY,
	// MAC_OPENSHELL_POLICY_SYNC, HOME); nil means os.Getenv.
	Getenv func(string) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// AfterWrite, when set, is called after an install (tests).
	AfterWrite func(path string)
	// Ceiling, when set, checks the assignment against the host's
	// ceiling (pkg/ceiling) before anything is written: an assignment it
	// refuses fails safe with FailCeiling.
	Ceiling func(*policy.Policy) error
}

func (s *Syncer) getenv(k string) string {
	if s.Getenv == nil {
		return os.Getenv(k)
	}
	return s.Getenv(k)
}

func (s *Syncer) now() time.Time {
	if s.Now == nil {
		return time.Now().UTC()
	}
	return s.Now().UTC()
}

// InstallPath returns ~/.mac/openshell-policy.yaml for the Syncer's home,
// or "" when there is no home.
func (s *Syncer) InstallPath() string {
	home := s.Home
	if home == "" {
		home = s.getenv("HOME")
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, policy.HomePolicyPath)
}

// installed is what is on disk now.
type installed struct {
	path     string
	exists   bool
	checksum string // canonical checksum; "" when absent or invalid
	problem  string // why checksum is empty although the file exists
}

func readInstalled(path string) installed {
	in := installed{path: path}
	if path == "" {
		return in
	}
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return in
	}
	in.exists = true
	if err != nil {
		in.problem = err.Error()
		return in
	}
	p, err := policy.LoadFile(path)
	if err != nil {
		in.problem = err.Error()
		return in
	}
	in.checksum = p.Checksum()
	return in
}

// NormaliseChecksum strips the optional "sha256:" prefix of a hub checksum.
func NormaliseChecksum(s string) string { return strings.TrimPrefix(s, "sha256:") }

// VerifyAssignment checks an assignment's text against its claimed
// checksum and parses it. The claim must equal the canonical checksum of
// the text (pkg/policy) or, for hubs that hash the bytes they store, the
// hex sha256 of policy_text exactly as sent. It returns the parsed policy
// and its canonical checksum, or a failure class and error.
func VerifyAssignment(a *hub.Policy) (*policy.Policy, string, string, error) {
	if len(a.PolicyText) > policy.MaxPolicySize {
		return nil, "", FailInvalidPolicy, fmt.Errorf("policy_text is %d bytes, more than %d", len(a.PolicyText), policy.MaxPolicySize)
	}
	p, err := policy.Parse([]byte(a.PolicyText))
	if err != nil {
		return nil, "", FailInvalidPolicy, fmt.Errorf("assigned policy (version %d) is invalid: %w", a.Version, err)
	}
	sum := p.Checksum()
	claim := NormaliseChecksum(a.Checksum)
	raw := sha256.Sum256([]byte(a.PolicyText))
	if claim != sum && claim != hex.EncodeToString(raw[:]) {
		return nil, "", FailChecksum, fmt.Errorf("assigned policy (version %d): the hub claims checksum %s but the text's canonical checksum is %s", a.Version, claim, sum)
	}
	return p, sum, "", nil
}

// classify maps a GetPolicy error to a failure class.
func classify(err error) string {
	var se *hub.StatusError
	var re *hub.ResponseError
	switch {
	case errors.Is(err, hub.ErrNotAssigned):
		return FailNotAssigned
	case errors.Is(err, hub.ErrForbidden):
		return FailForbidden
	case errors.Is(err, hub.ErrUnauthorized):
		return FailUnauthorized
	case errors.As(err, &re):
		return FailMalformed
	case errors.As(err, &se):
		return FailHubError
	}
	return FailHubUnreachable
}

// reportable says whether a convergence report is worth sending after a
// GET failure of this class: the hub answered and is healthy enough to
// record what is installed.
func reportable(failure string) bool {
	switch failure {
	case FailNotAssigned, FailMalformed, FailChecksum, FailInvalidPolicy, FailInstall, FailCeiling:
		return true
	}
	return false
}

// Once pulls the assignment, installs it when needed and reports
// convergence. It never returns an error: the Result says what happened;
// on OutcomeFailedSafe the installed file has not been touched.
func (s *Syncer) Once(ctx context.Context) Result {
	res := Result{Time: s.now()}
	if !Enabled(s.getenv) {
		res.Outcome = OutcomeDisabled
		res.Source = hub.SourceLocal
		res.Reason = fmt.Sprintf("%s=%s: policy sync is disabled; nothing was fetched or written", EnvSync, s.getenv(EnvSync))
		return res
	}
	override := s.getenv(policy.EnvPolicy)
	var in installed
	if override != "" {
		res.Override = true
		in = readInstalled(override)
		res.Source = hub.SourceOverride
	} else {
		path := s.InstallPath()
		in = readInstalled(path)
		switch {
		case in.exists:
			res.Source = hub.SourceLocal
		default:
			res.Source = hub.SourceBundledDefault
		}
	}
	res.Path = in.path
	res.InstalledChecksum = in.checksum

	a, err := s.Hub.GetPolicy(ctx)
	if err != nil {
		s.failSafe(ctx, &res, classify(err), fmt.Errorf("fetching the assignment: %w", err), in)
		res.RetryAfter = hub.RetryAfter(err)
		return res
	}
	res.DesiredVersion = a.Version
	res.PolicyName = a.PolicyName
	res.DesiredChecksum = NormaliseChecksum(a.Checksum)
	assigned, sum, failure, err := VerifyAssignment(a)
	if err != nil {
		s.failSafe(ctx, &res, failure, err, in)
		return res
	}
	res.DesiredChecksum = sum
	if s.Ceiling != nil {
		if err := s.Ceiling(assigned); err != nil {
			s.failSafe(ctx, &res, FailCeiling, fmt.Errorf("assigned policy (version %d): %w", a.Version, err), in)
			return res
		}
	}

	if override != "" {
		res.Outcome = OutcomeOverride
		res.Converged = in.checksum == sum
		res.Reason = fmt.Sprintf("%s=%s is in force and is never overwritten; ", policy.EnvPolicy, override)
		switch {
		case res.Converged:
			res.Reason += "it already means the same as the assigned policy"
			res.InstalledVersion = a.Version
		case !in.exists:
			res.Reason += "the file it names does not exist, so sandboxes cannot start until the operator fixes it"
		case in.checksum == "":
			res.Reason += "the file it names is not a valid policy: " + in.problem
		default:
			res.Reason += "it differs from the assigned policy"
		}
		s.report(ctx, &res)
		return res
	}

	if in.path == "" {
		s.failSafe(ctx, &res, FailNoHome, errors.New("HOME is unset, so there is no ~/"+policy.HomePolicyPath+" to install"), in)
		return res
	}
	if in.checksum == sum {
		res.Outcome = OutcomeAlreadyConverged
		res.Converged = true
		res.Source = hub.SourceHub
		res.InstalledVersion = a.Version
		res.Reason = fmt.Sprintf("%s already holds the assigned policy (version %d); nothing written", in.path, a.Version)
		s.report(ctx, &res)
		return res
	}
	if err := Install(in.path, []byte(a.PolicyText)); err != nil {
		s.failSafe(ctx, &res, FailInstall, err, in)
		return res
	}
	if s.AfterWrite != nil {
		s.AfterWrite(in.path)
	}
	res.Wrote = true
	res.Outcome = OutcomeInstalled
	res.Converged = true
	res.Source = hub.SourceHub
	res.InstalledChecksum = sum
	res.InstalledVersion = a.Version
	was := "where nothing was installed before"
	switch {
	case in.checksum != "":
		was = "replacing checksum " + in.checksum
	case in.exists:
		was = "replacing an invalid file"
	}
	res.Reason = fmt.Sprintf("installed the assigned policy (version %d) at %s, %s; running sandboxes keep the policy they were created with", a.Version, in.path, was)
	s.report(ctx, &res)
	return res
}

// Install writes a policy at path as the hub install does: atomically
// (temporary file, fsync, rename, fsync of the directory) with mode 0600,
// creating the directory with mode 0700 when missing. apply-proposal
// installs the same way.
func Install(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("install: %s is not a directory", dir)
	}
	if err := fsutil.WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}

func (s *Syncer) failSafe(ctx context.Context, res *Result, failure string, err error, in installed) {
	res.Outcome = OutcomeFailedSafe
	res.Failure = failure
	res.Converged = false
	kept := "nothing is installed, so new sandboxes use the bundled fail-closed default"
	switch {
	case res.Override:
		kept = "the " + policy.EnvPolicy + " override stays in force"
	case in.checksum != "":
		kept = fmt.Sprintf("kept the installed policy %s (checksum %s) unchanged", in.path, in.checksum)
	case in.exists:
		kept = fmt.Sprintf("kept %s unchanged (it is not a valid policy: %s)", in.path, in.problem)
	}
	res.Reason = fmt.Sprintf("%s: %v; %s", failure, err, kept)
	if reportable(failure) {
		s.report(ctx, res)
	}
}

// report posts the convergence report; failures are recorded in res.
func (s *Syncer) report(ctx context.Context, res *Result) {
	reason := res.Reason
	if len(reason) > 1000 {
		reason = reason[:1000] + "…"
	}
	cv := hub.Convergence{
		Converged:         res.Converged,
		InstalledChecksum: res.InstalledChecksum,
		InstalledVersion:  res.InstalledVersion,
		DesiredChecksum:   res.DesiredChecksum,
		DesiredVersion:    res.DesiredVersion,
		PolicyName:        res.PolicyName,
		Source:            res.Source,
		Reason:            reason,
		ObservedAt:        res.Time,
	}
	if cv.DesiredChecksum != "" && !hub.ValidChecksum(cv.DesiredChecksum) {
		cv.DesiredChecksum = ""
	}
	if err := s.Hub.ReportConvergence(ctx, cv); err != nil {
		res.ReportError = err.Error()
		if d := hub.RetryAfter(err); d > res.RetryAfter {
			res.RetryAfter = d
		}
		return
	}
	res.Reported = true
}

// WatchOptions configure Watch.
type WatchOptions struct {
	// Interval between syncs; must be positive.
	Interval time.Duration
	// Jitter is the largest random delay added to each interval; negative
	// means none, zero means Interval/10.
	Jitter time.Duration
	// MaxRetryAfter bounds how long a hub's Retry-After can stretch one
	// wait; zero means the larger of 10*Interval and 5 minutes.
	MaxRetryAfter time.Duration
	// OnResult is called after every sync (logging, JSON output).
	OnResult func(Result)
}

// Watch syncs, then again after every interval (plus jitter, or the
// hub's Retry-After when longer), until ctx is done. Hub errors never stop
// it; it returns nil when ctx is cancelled (SIGINT/SIGTERM).
func (s *Syncer) Watch(ctx context.Context, opts WatchOptions) error {
	if opts.Interval <= 0 {
		return errors.New("policysync: watch interval must be positive")
	}
	jitter := opts.Jitter
	if jitter == 0 {
		jitter = opts.Interval / 10
	}
	maxRA := opts.MaxRetryAfter
	if maxRA <= 0 {
		maxRA = max(10*opts.Interval, 5*time.Minute)
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		res := s.Once(ctx)
		if ctx.Err() != nil {
			return nil // a sync cut short by shutdown is not reported
		}
		if opts.OnResult != nil {
			opts.OnResult(res)
		}
		wait := opts.Interval
		if jitter > 0 {
			wait += rand.N(jitter + 1)
		}
		if ra := min(res.RetryAfter, maxRA); ra > wait {
			wait = ra
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
