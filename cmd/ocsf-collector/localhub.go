package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/hub"
	"github.com/palisade-sandbox/palisade/pkg/hub/hubtest"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

const localHubUsage = `Usage: ocsf-collector local-hub --agent-id ID --token-file FILE [flags]

Runs a hub on this host for trying the fleet flow end to end: the
reference implementation of docs/hub-api.md (pkg/hub/hubtest) that the
tests run against, serving the policy route (policy-sync once/watch), the
convergence route and the action-event ledger (ocsf-collector --hub). It
is for trying and testing, not for a fleet: it keeps everything in memory
and knows one agent.

It registers the agent with a fresh bearer token, written to --token-file
(mode 0600) once it listens, so a script can wait for that file. With
--assign it hands out that policy file (validated here) as the agent's
assignment. It prints {"url": ...} on stdout, then one JSON line per
request it serves: the policy version it handed out, the convergence
report it recorded, the events it stored ("stored", mac.action_event.v1
records). SIGINT/SIGTERM stop it.

Example (docs/hub-api.md, "Try the fleet flow locally"):
  ocsf-collector local-hub --agent-id worker-1 --token-file /tmp/palisade-hub/worker-1.token \
      --assign policies/examples/npm.yaml > /tmp/palisade-hub/hub.jsonl &

Exit status: 0 when stopped by a signal, 1 when it could not start, 2 on
bad flags.

Flags:
`

// runLocalHub is ocsf-collector local-hub.
func runLocalHub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(prog+" local-hub", flag.ContinueOnError)
	fs.SetOutput(cli.FlagOutput(stderr))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), localHubUsage)
		cli.PrintFlags(fs.Output(), fs)
	}
	listen := fs.String("listen", "127.0.0.1:8088", "address to listen on (loopback unless you mean otherwise: plain HTTP)")
	agent := fs.String("agent-id", "", "the agent to register (required)")
	tokenFile := fs.String("token-file", "", "write the agent's fresh bearer token here, mode 0600 (required)")
	assign := fs.String("assign", "", "policy file to assign to the agent (default: none; the policy route answers 404 not_assigned)")
	version := fs.Int64("policy-version", 1, "version of the --assign assignment")
	if err := cli.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return cli.Usagef("local-hub: %v", err)
	}
	switch {
	case fs.NArg() > 0:
		return cli.Usagef("local-hub: unexpected argument %q", fs.Arg(0))
	case *agent == "" || *tokenFile == "":
		return cli.Usagef("local-hub: --agent-id and --token-file are required")
	case !hub.ValidAgentID(*agent):
		return cli.Usagef("local-hub: --agent-id %q: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", *agent)
	case *version < 1:
		return cli.Usagef("local-hub: --policy-version %d: want 1 or more", *version)
	}
	var assigned *hub.Policy
	if *assign != "" {
		p, err := policy.LoadFile(*assign)
		if err != nil {
			return cli.Failf("local-hub: --assign: %v", err)
		}
		text, err := os.ReadFile(*assign)
		if err != nil {
			return cli.Failf("local-hub: --assign: %v", err)
		}
		name := strings.TrimSuffix(filepath.Base(*assign), filepath.Ext(*assign))
		assigned = &hub.Policy{PolicyText: string(text), Version: *version, Checksum: "sha256:" + p.Checksum(), PolicyName: name}
	}
	s, err := hubtest.New(hubtest.Options{Addr: *listen, Journal: stdout})
	if err != nil {
		return cli.Failf("local-hub: %v", err)
	}
	defer s.Close()
	if assigned != nil {
		s.Assign(*agent, *assigned)
	}
	if err := json.NewEncoder(stdout).Encode(map[string]string{"url": s.URL}); err != nil {
		return err
	}
	// The token file appears once the hub listens.
	tf, err := s.TokenFile(filepath.Dir(*tokenFile), *agent)
	if err == nil {
		err = os.Rename(tf, *tokenFile)
	}
	if err != nil {
		return cli.Failf("local-hub: --token-file: %v", err)
	}
	<-ctx.Done()
	return nil
}
