package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/policysync"
)

// hubFlags are the flags once and watch share.
type hubFlags struct {
	url, agentID, tokenFile string
	ceiling                 *string
	timeout                 time.Duration
	asJSON                  bool
}

func (h *hubFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&h.url, "hub", "", "hub base URL (http or https) (required)")
	fs.StringVar(&h.agentID, "agent-id", "", "this worker's agent id; the token must belong to it (required)")
	fs.StringVar(&h.tokenFile, "token-file", "", "file holding the bearer token (required; never logged)")
	fs.DurationVar(&h.timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.BoolVar(&h.asJSON, "json", false, "print each result as one JSON object on stdout")
	h.ceiling = ceilingFlag(fs)
}

// syncer checks the flags and builds the Syncer; nil, nil means sync is
// disabled (already reported).
func (h *hubFlags) syncer(a *app, name string, args []string) (*policysync.Syncer, error) {
	if len(args) != 0 {
		return nil, cli.Usagef("%s: unexpected arguments %q", name, args)
	}
	for _, f := range [][2]string{{"--hub", h.url}, {"--agent-id", h.agentID}, {"--token-file", h.tokenFile}} {
		if f[1] == "" {
			return nil, cli.Usagef("%s: %s is required", name, f[0])
		}
	}
	if !hub.ValidAgentID(h.agentID) {
		return nil, cli.Usagef("%s: --agent-id %q: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", name, h.agentID)
	}
	if h.timeout <= 0 {
		return nil, cli.Usagef("%s: --timeout must be positive", name)
	}
	s := &policysync.Syncer{Getenv: a.getenv, Ceiling: a.ceilingChecker(*h.ceiling)}
	if !policysync.Enabled(a.getenv) {
		res := s.Once(context.Background()) // reports OutcomeDisabled without any I/O
		a.log.Info("policy sync disabled", "outcome", res.Outcome, "reason", res.Reason)
		if h.asJSON {
			return nil, cli.WriteJSON(a.stdout, res)
		}
		return nil, nil
	}
	c, err := hub.New(hub.Config{URL: h.url, AgentID: h.agentID, TokenFile: h.tokenFile, Timeout: h.timeout, UserAgent: "palisade-policy-sync/1"})
	if err != nil {
		return nil, cli.Failf("%s: %v", name, err)
	}
	s.Hub = c
	return s, nil
}

// report logs one result on stderr and, with --json, prints it on stdout.
func (h *hubFlags) report(a *app, res policysync.Result) error {
	attrs := []any{"outcome", res.Outcome, "converged", res.Converged, "path", res.Path,
		"installed_checksum", res.InstalledChecksum, "desired_version", res.DesiredVersion, "reported", res.Reported}
	if res.Failure != "" {
		attrs = append(attrs, "failure", res.Failure)
	}
	attrs = append(attrs, "reason", res.Reason)
	switch {
	case !res.OK():
		a.log.Error("policy sync failed safe", attrs...)
	case res.Outcome == policysync.OutcomeOverride:
		a.log.Warn("policy override in force", attrs...)
	default:
		a.log.Info("policy sync", attrs...)
	}
	if res.ReportError != "" {
		a.log.Warn("convergence report not delivered", "error", res.ReportError)
	}
	if h.asJSON {
		return cli.WriteJSON(a.stdout, res)
	}
	return nil
}

const syncUsageCommon = `
The hub assignment (GET /agents/{id}/openshell/policy) is checked before
anything is written: its policy_text must be a valid policy whose
canonical checksum (or sha256 of the text) is the checksum the hub claims.
When it means something different from ~/.mac/openshell-policy.yaml, it
is installed there by write-then-rename at mode 0600 (file and directory
fsynced; ~/.mac created 0700); then convergence is reported. Already
converged: nothing is written, convergence is still reported.
$MAC_OPENSHELL_POLICY set: that file is never overwritten and the report
says an override is in force. Any failure (hub unreachable, 401, 403, 404,
5xx, 429, malformed answer, checksum mismatch, invalid policy, a policy
beyond the host's policy ceiling: --ceiling, failure exceeds_ceiling)
keeps the installed file byte-identical. MAC_OPENSHELL_POLICY_SYNC=0 disables sync
(exit 0). Running sandboxes are never touched: they read their policy at
creation.`

var onceCmd = &command{
	name:    "once",
	summary: "pull the hub-assigned policy once, install it if it changed, report convergence",
	usage: `once --hub URL --agent-id ID --token-file F [--json] [--timeout D]
` + syncUsageCommon + `

Exit status: 0 installed, already converged, override in force or
disabled; 1 failed safe (the reason is on stderr and in --json output);
2 usage error.`,
	examples: `  policy-sync once --hub https://hub.example.internal:8080 --agent-id worker-1 \
      --token-file /etc/mac/agent.token
  policy-sync once --hub http://127.0.0.1:8080 --agent-id worker-1 --token-file ~/.mac/token --json | jq .outcome
  MAC_OPENSHELL_POLICY_SYNC=0 policy-sync once --hub URL --agent-id worker-1 --token-file F   # disabled: exit 0
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		var h hubFlags
		h.declare(fs)
		return func(ctx context.Context, a *app, args []string) error {
			s, err := h.syncer(a, "once", args)
			if s == nil {
				return err
			}
			res := s.Once(ctx)
			if err := h.report(a, res); err != nil {
				return err
			}
			if !res.OK() {
				return cli.Quiet(cli.ExitFailed)
			}
			return nil
		}
	},
}

var watchCmd = &command{
	name:    "watch",
	summary: "like once, repeated every --interval; never exits on hub errors",
	usage: `watch --hub URL --agent-id ID --token-file F [--interval D] [--json] [--timeout D]
` + syncUsageCommon + `

Syncs at start, then every --interval plus up to 10% random jitter (or
the hub's Retry-After when longer, at most max(10*interval, 5m)). Hub
errors are logged and retried at the next interval; watch never exits
because of them. SIGINT or SIGTERM stops it with exit status 0. With
--json, one JSON object per sync on stdout.`,
	examples: `  policy-sync watch --hub https://hub.example.internal:8080 --agent-id worker-1 \
      --token-file /etc/mac/agent.token --interval 5m
  policy-sync --log-format json watch --hub http://127.0.0.1:8080 --agent-id worker-1 \
      --token-file ~/.mac/token --interval 30s --json >> /var/log/policy-sync.jsonl
`,
	flags: func(fs *flag.FlagSet) func(context.Context, *app, []string) error {
		var h hubFlags
		h.declare(fs)
		interval := fs.Duration("interval", time.Minute, "time between syncs (at least 100ms)")
		return func(ctx context.Context, a *app, args []string) error {
			if *interval < 100*time.Millisecond {
				return cli.Usagef("watch: --interval %s is too short (at least 100ms)", *interval)
			}
			s, err := h.syncer(a, "watch", args)
			if s == nil {
				return err
			}
			a.log.Info("watching the hub assignment", "hub", h.url, "agent_id", h.agentID, "interval", interval.String(), "path", s.InstallPath())
			var werr error
			err = s.Watch(ctx, policysync.WatchOptions{Interval: *interval, OnResult: func(res policysync.Result) {
				if err := h.report(a, res); err != nil && werr == nil {
					werr = err
				}
			}})
			if err != nil {
				return cli.Failf("watch: %v", err)
			}
			a.log.Info("watch stopped", slog.String("why", fmt.Sprint(context.Cause(ctx))))
			return werr
		}
	},
}
