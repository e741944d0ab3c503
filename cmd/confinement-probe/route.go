package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/routeproof"
)

// TimeoutEnv is seed 000's preflight timeout knob, in seconds.
const TimeoutEnv = "MAC_CODING_AGENT_PREFLIGHT_TIMEOUT"

const routeUsage = `usage: confinement-probe route --cli NAME --sentinel S [--timeout DUR] -- CMD [ARG...]
       confinement-probe route --cli NAME --token-unavailable

Runs a coding CLI's route-proof command (normally a throwaway sandbox
running the CLI with a short-lived inference token, asked to echo S) and
prints one mac.coding_agent.verification.v1 record on stdout. The
failure_class comes from the exit status and structured JSON error objects
only, never from free text:

  timeout                      exit 124 or 137 (also: ran past --timeout)
  agent_binary_missing         exit 126 or 127
  sandbox_policy_denied        {"error":"policy_denied",...}  (binary_status present)
  authentication_failed        code invalid_api_key/unauthorized, status 401/403 (binary_status present)
  rate_limited                 code rate_limit_exceeded/rate_limit_error, status 429
  provider_server_error        status 5xx
  sentinel_missing             exit 0 without S on stdout
  probe_failed                 anything else (read the probe output: --transcript)
  inference_token_unavailable  --token-unavailable: no token could be minted

The record holds no output text, token or URL.

Flags:
`

const routeExamples = `
Environment: MAC_CODING_AGENT_PREFLIGHT_TIMEOUT (seconds, default 180).

Examples:
  confinement-probe route --cli opencode --sentinel PALISADE-7f3a -- \
      sandbox-supervisor run --kind probe --env MAC_INFERENCE_TOKEN="$tok" -- \
      opencode run --model machub/gpt-5.6-sol "Reply with exactly PALISADE-7f3a"
  confinement-probe route --cli claude --token-unavailable

Exit status: 0 verified, 1 a failure class was recorded, 2 usage error.
`

func routeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("route", flag.ContinueOnError)
	fs.SetOutput(cli.FlagOutput(stderr))
	fs.Usage = func() {
		fmt.Fprint(stderr, routeUsage)
		cli.PrintFlags(stderr, fs)
		fmt.Fprint(stderr, routeExamples)
	}
	defTimeout := 180 * time.Second
	if v := os.Getenv(TimeoutEnv); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n <= 0 {
			return cli.Usagef("%s=%q: want a positive number of seconds", TimeoutEnv, v)
		}
		defTimeout = time.Duration(n * float64(time.Second))
	}
	name := fs.String("cli", "", "the coding CLI's name (opencode, claude)")
	sentinel := fs.String("sentinel", "", "the string the CLI must echo on stdout")
	timeout := fs.Duration("timeout", defTimeout, "bound on the probe command (env "+TimeoutEnv+", seconds)")
	noToken := fs.Bool("token-unavailable", false, "the probe's inference token could not be minted: record inference_token_unavailable without running anything")
	transcript := fs.String("transcript", "", "write the command's captured stdout and stderr to this file (0600)")
	if err := cli.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cli.Quiet(cli.ExitOK)
		}
		return cli.Quiet(cli.ExitUsage)
	}
	if *name == "" {
		return cli.Usagef("route: --cli is required")
	}
	var rec routeproof.Record
	if *noToken {
		if fs.NArg() > 0 {
			return cli.Usagef("route: --token-unavailable runs nothing; drop the command")
		}
		rec = routeproof.TokenUnavailable()
		rec.CLI = *name
		rec.CheckedAt = time.Now().UTC().Format(time.RFC3339)
	} else {
		if *sentinel == "" {
			return cli.Usagef("route: --sentinel is required")
		}
		if *timeout <= 0 {
			return cli.Usagef("route: --timeout %s: must be positive", *timeout)
		}
		if fs.NArg() == 0 {
			return cli.Usagef("route: no probe command (put it after --)")
		}
		o := routeproof.Options{CLI: *name, Sentinel: *sentinel, Timeout: *timeout, Args: fs.Args()}
		if *transcript != "" {
			f, err := os.OpenFile(*transcript, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
			if err != nil {
				return cli.Usagef("--transcript: %v", err)
			}
			defer f.Close()
			o.Transcript = f
		}
		rec = routeproof.Exec(ctx, o)
	}
	if err := cli.WriteJSON(stdout, rec); err != nil {
		return err
	}
	if !rec.Verified {
		return cli.Quiet(cli.ExitFailed)
	}
	return nil
}
