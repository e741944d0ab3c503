package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/binaries"
	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/egress"
	"github.com/palisade-sandbox/palisade/pkg/fsutil"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/policydns"
	"github.com/palisade-sandbox/palisade/pkg/sandbox"
	"github.com/palisade-sandbox/palisade/pkg/sandboxnet"
	"github.com/palisade-sandbox/palisade/pkg/state"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
	"github.com/palisade-sandbox/palisade/pkg/upstreamproxy"
)

// proxyAttribution is the proxy's --attribution. The eBPF fast path
// relies on the sandbox's seccomp profile (it refuses io_uring and
// foreign ABIs, which would pass descriptors unseen), so a run that may
// go without seccomp (--allow-degraded) attributes through /proc unless
// the operator named a backend.
func proxyAttribution(f *runFlags) string {
	if f.allowDegraded && f.attribution == "auto" {
		return "proc"
	}
	return f.attribution
}

// probe is the preflight seam: tests replace it to simulate a missing
// kernel feature without breaking the kernel.
var probe sandbox.Prober

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

const runUsage = `usage: sandbox-supervisor run [flags] -- CMD [ARG...]

Creates a sandbox from the resolved policy (--policy, else
$MAC_OPENSHELL_POLICY, else ~/.mac/openshell-policy.yaml, else the bundled
fail-closed default) and runs CMD in it as the policy's unprivileged user.
CMD's output is relayed byte for byte, by design (as docker run does): it
can hold terminal escapes and lines that look like the supervisor's.
Callers that must tell the supervisor's own failure from the command's
output read --status-fd.

The environment is rebuilt: PATH is the caller's PATH entries that lie
under the policy's read_only paths, in order, then the standard ones
(sudo resets PATH: sudo env "PATH=$PATH" ... keeps yours); HOME is
` + sandbox.DefaultHome + `, a directory of the sandbox's own kept and
removed with its state (shared by every exec), or --home DIR.

Flags:
`

const specUsage = `usage: sandbox-supervisor spec [run flags] -- CMD [ARG...]

Prints the OCI config.json that run would use for the same flags and
command, without creating anything (no root needed). It takes run's flags.

Flags:
`

const runExamples = `
A policy not within the host's policy ceiling (--ceiling; docs/policy.md,
"Ceiling") is refused with exit status 125, naming its first excess.

Environment: MAC_OPENSHELL_POLICY, PALISADE_CEILING_FILE, MAC_OPENSHELL_SANDBOX_NAME,
MAC_OPENSHELL_KEEP, MAC_OPENSHELL_EVENTS_FILE, MAC_OPENSHELL_ENV_PASSTHROUGH,
MAC_OPENSHELL_REQUIRED (truthy: every missing feature aborts),
MAC_HUB_VERIFY_PROFILE (default | bounded-tmpfs).

Examples:
  sudo sandbox-supervisor run -- sh -c 'id; cat /etc/shadow; echo done'
  sudo sandbox-supervisor run --tty -- bash
  sudo sandbox-supervisor run --home /var/lib/agent-homes/claude --workdir /srv/task --tty -- claude
  sudo sandbox-supervisor run --workdir /srv/task --env CI=1 --memory 4g --cpus 2 -- make test
  sudo sandbox-supervisor run --profile bounded-tmpfs --kind verify -- ./scripts/run-tests.sh
  sudo sandbox-supervisor run --policy p.yaml --upstream-ca-bundle /etc/palisade/corp-ca.pem -- pip download x
  sudo sandbox-supervisor run --policy p.yaml --attribution proc -- npm ci
  sudo sandbox-supervisor run --policy p.yaml --upstream-proxy http://proxy.corp.example:3128 \
      --upstream-proxy-auth-file /etc/palisade/proxy-auth --upstream-proxy-allow-insecure \
      --upstream-proxy-no-proxy .corp.example,10.0.0.0/8 -- npm ci   # behind a corporate proxy
  sudo sandbox-supervisor run --policy agent.yaml --credentials /etc/palisade/credentials.yaml -- my-agent   # $OPENAI_API_KEY is a placeholder
  sudo sandbox-supervisor run --policy db.yaml --dns-ttl 15s -- psql -h db.internal   # db.internal resolves through policy DNS
  sudo sandbox-supervisor run --policy p.yaml --proxy-procs 2 -- pip download -r requirements.txt
  sudo sandbox-supervisor spec -- /bin/true | jq .linux.namespaces
`

type runFlags struct {
	policy, name, kind, agentID, workdir, home, passthrough, events string
	profile, memory, stateDir, logFormat, logLevel                  string
	proxyBin, hostsFile, taskMetadata, trustedRegistries            string
	upstreamCA, attribution, ceiling, credentials                   string
	cpus                                                            float64
	pids                                                            int64
	tty, noTTY, keep, allowDegraded, detach, json                   bool
	env                                                             multiFlag
	// dnsTTL and proxyProcs are the proxy's --dns-ttl and --procs,
	// passed only when given (the *Set fields): unset, the proxy's own
	// defaults apply.
	dnsTTL                   time.Duration
	proxyProcs               int
	dnsTTLSet, proxyProcsSet bool
	// statusFD is --status-fd: a descriptor the caller passed, where run
	// writes its outcome (-1: none).
	statusFD int
	// upstream are the egress proxy's --upstream-proxy flags.
	upstream upstreamproxy.Settings
}

func parseRunFlags(args []string, stderr io.Writer, specOnly bool) (*runFlags, []string, error) {
	f := &runFlags{}
	name := "run"
	if specOnly {
		name = "spec"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(cli.FlagOutput(stderr))
	fs.Usage = func() {
		if specOnly {
			fmt.Fprint(stderr, specUsage)
		} else {
			fmt.Fprint(stderr, runUsage)
		}
		cli.PrintFlags(stderr, fs)
		fmt.Fprint(stderr, runExamples)
	}
	fs.StringVar(&f.policy, "policy", "", "policy file (overrides MAC_OPENSHELL_POLICY)")
	fs.StringVar(&f.ceiling, "ceiling", "", "policy ceiling the policy (and its egress proxy's every reload) must lie within (default $"+ceiling.EnvPath+", else "+ceiling.DefaultPath+" when it exists; root's, not group/world-writable)")
	fs.StringVar(&f.name, "name", os.Getenv("MAC_OPENSHELL_SANDBOX_NAME"), "sandbox name (default: generated sbx-<hex>; env MAC_OPENSHELL_SANDBOX_NAME)")
	fs.StringVar(&f.kind, "kind", "adhoc", "lifecycle kind: task, verify, probe or adhoc")
	fs.StringVar(&f.agentID, "agent-id", "", "agent id recorded in labels and events")
	fs.StringVar(&f.workdir, "workdir", "", "working directory, bound read-write when the policy includes it (default: current directory)")
	fs.StringVar(&f.home, "home", "", "host directory bound as the command's HOME, created for the sandbox user when missing (default: a directory of the sandbox's own at "+sandbox.DefaultHome+", kept and removed with the sandbox)")
	fs.Var(&f.env, "env", "set K=V in the sandbox (repeatable)")
	fs.StringVar(&f.passthrough, "env-passthrough", envOr("MAC_OPENSHELL_ENV_PASSTHROUGH", strings.Join(sandbox.DefaultPassthrough, ",")), "comma list of variables copied from this environment")
	fs.StringVar(&f.events, "events", os.Getenv("MAC_OPENSHELL_EVENTS_FILE"), "OCSF JSONL destination: a file (appended), - for stdout, or /dev/fd/N for a descriptor the caller opened (e.g. 3>&1)")
	fs.StringVar(&f.profile, "profile", "", "resource profile: default or bounded-tmpfs (default: MAC_HUB_VERIFY_PROFILE)")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores (0: none)")
	fs.StringVar(&f.memory, "memory", "", "memory limit, e.g. 512m, 4g (default: none)")
	fs.Int64Var(&f.pids, "pids", sandbox.DefaultPidsLimit, "maximum number of processes")
	fs.BoolVar(&f.tty, "tty", false, "give the command a terminal from the sandbox's own devpts (stdin must be a terminal)")
	fs.BoolVar(&f.noTTY, "no-tty", false, "use pipes (the default); the command has no controlling terminal")
	fs.BoolVar(&f.keep, "keep", cli.Truthy(os.Getenv("MAC_OPENSHELL_KEEP")), "keep the state directory after exit (env MAC_OPENSHELL_KEEP)")
	fs.StringVar(&f.stateDir, "state-dir", state.DefaultRoot, "root of the per-sandbox state directories")
	fs.BoolVar(&f.allowDegraded, "allow-degraded", false, "run without seccomp if the kernel lacks it (recorded as a Detection Finding; refused under hard_requirement)")
	fs.StringVar(&f.proxyBin, "proxy-bin", "", "egress-proxy binary for policies with network entries (default: next to this binary)")
	fs.StringVar(&f.hostsFile, "hosts-file", "", "static name resolution for the egress proxy (/etc/hosts format; tests and air-gapped sites)")
	fs.StringVar(&f.attribution, "attribution", "auto", "how the egress proxy attributes connections to sandbox processes: bpf (eBPF on the sandbox's cgroup), proc (/proc fd tables) or auto (bpf when it loads, else proc, with an event)")
	fs.StringVar(&f.upstreamCA, "upstream-ca-bundle", "", "extra PEM roots the egress proxy trusts for upstream servers of inspected (TLS-terminated) tunnels")
	fs.StringVar(&f.credentials, "credentials", "", "credentials file (root's, mode 0600): the sandbox's environment gets a placeholder openshell:resolve:env:KEY for each credential, and its egress proxy writes the value into requests to the endpoints the credential is bound to (docs/credentials.md)")
	fs.DurationVar(&f.dnsTTL, "dns-ttl", 0, "the egress proxy's --dns-ttl: lifetime of a policy DNS mapping and TTL of its answer, 1s..30s (default: the proxy's, 5s). Ignored with a warning when the policy allows no egress (no proxy runs)")
	f.upstream.Register(fs)
	fs.IntVar(&f.proxyProcs, "proxy-procs", 0, "the egress proxy's --procs: CPUs that run proxy code at once, 0 for all (default: the proxy's, 1 per sandbox)")
	fs.StringVar(&f.taskMetadata, "task-metadata", "", "task document whose metadata.egress_contract.hosts are granted (with MAC_OPENSHELL_TASK_EGRESS=1, --kind task)")
	fs.StringVar(&f.trustedRegistries, "trusted-registries", "", "file replacing the built-in trusted registry list for per-task egress")
	fs.BoolVar(&f.detach, "detach", false, "create the sandbox, start CMD (or nothing: the sandbox stays up for exec) and return, printing its name and id; an owner process stays with it until the main process ends or delete")
	fs.BoolVar(&f.json, "json", false, "with --detach: print {\"name\",\"id\",\"owner_pid\"} as one JSON line")
	fs.StringVar(&f.logFormat, "log-format", "text", "stderr log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "stderr log level: debug, info, warn or error (debug shows start-up timing; the egress proxy gets the same level)")
	fs.IntVar(&f.statusFD, "status-fd", -1, "write run's outcome as one JSON line to this descriptor (which the caller opened, e.g. 3>pipe): {\"exit_code\":N,\"from_command\":bool,\"error\":\"...\"}; the command never gets the descriptor, so only the supervisor writes there (callers tell a sandbox that was not created from a command that exited 125)")
	if err := cli.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, cli.Quiet(cli.ExitOK)
		}
		return nil, nil, cli.Quiet(cli.ExitUsage)
	}
	fs.Visit(func(fl *flag.Flag) {
		f.dnsTTLSet = f.dnsTTLSet || fl.Name == "dns-ttl"
		f.proxyProcsSet = f.proxyProcsSet || fl.Name == "proxy-procs"
	})
	cmd := fs.Args()
	if len(cmd) == 0 && !(f.detach && !specOnly) {
		fs.Usage()
		return nil, nil, cli.Usagef("%s: no command given (put it after --)", fs.Name())
	}
	if f.detach && f.tty {
		return nil, nil, cli.Usagef("--detach and --tty are mutually exclusive (exec --tty into the sandbox instead)")
	}
	if f.json && !f.detach {
		return nil, nil, cli.Usagef("--json goes with --detach")
	}
	if f.statusFD >= 0 && (f.statusFD < 3 || f.detach || specOnly) {
		return nil, nil, cli.Usagef("--status-fd %d: want a descriptor above 2 that the caller opened, without --detach", f.statusFD)
	}
	if _, isFD := ocsf.FDDest(f.events); f.detach && (isFD || f.events == "-") {
		return nil, nil, cli.Usagef("--events %s: a detached sandbox outlives this process and its descriptors; give --events a file", f.events)
	}
	if f.tty && f.noTTY {
		return nil, nil, cli.Usagef("--tty and --no-tty are mutually exclusive")
	}
	if f.attribution != "auto" && f.attribution != "bpf" && f.attribution != "proc" {
		return nil, nil, cli.Usagef("--attribution %q: want bpf, proc or auto", f.attribution)
	}
	// The proxy's own bounds, checked here so that a bad value stops the
	// run before anything is created rather than failing the proxy's
	// start (125) once the sandbox exists.
	if err := policydns.CheckTTL(f.dnsTTL); f.dnsTTLSet && err != nil {
		return nil, nil, cli.Usagef("--dns-ttl %v: %v", f.dnsTTL, err)
	}
	if f.proxyProcs < 0 {
		return nil, nil, cli.Usagef("--proxy-procs %d: want 0 (all CPUs) or more", f.proxyProcs)
	}
	if err := f.upstream.Check(); err != nil {
		return nil, nil, cli.Usagef("%v", err)
	}
	if _, err := state.ParseKind(f.kind); err != nil {
		return nil, nil, cli.Usagef("--kind: %v", err)
	}
	if f.home != "" && !filepath.IsAbs(f.home) {
		return nil, nil, cli.Usagef("--home %q: must be an absolute path", f.home)
	}
	if f.name != "" {
		if err := state.ValidateName(f.name); err != nil {
			return nil, nil, cli.Usagef("--name: %v", err)
		}
	}
	if f.profile == "" {
		f.profile = os.Getenv("MAC_HUB_VERIFY_PROFILE")
	}
	switch f.profile {
	case "", sandbox.ProfileDefault:
		f.profile = sandbox.ProfileDefault
	case sandbox.ProfileBoundedTmpfs:
		if f.cpus != 0 || f.memory != "" {
			return nil, nil, cli.Usagef("--cpus/--memory cannot be combined with the bounded-tmpfs profile (it sets 12 CPUs and 32 GiB)")
		}
	default:
		return nil, nil, cli.Usagef("--profile %q: unknown profile (want default or bounded-tmpfs)", f.profile)
	}
	if f.cpus < 0 {
		return nil, nil, cli.Usagef("--cpus %v: must not be negative", f.cpus)
	}
	if f.pids < 1 {
		return nil, nil, cli.Usagef("--pids %d: must be at least 1", f.pids)
	}
	if _, err := parseSize(f.memory); err != nil {
		return nil, nil, cli.Usagef("--memory: %v", err)
	}
	return f, cmd, nil
}

func envOr(k, d string) string {
	if v, ok := os.LookupEnv(k); ok {
		return v
	}
	return d
}

// parseSize parses 1234, 512k, 512m, 4g, 4G, 4GiB into bytes.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, t[:len(t)-1]
	case strings.HasSuffix(t, "t"):
		mult, t = 1<<40, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive size such as 512m or 4g", s)
	}
	if n*mult < 4<<20 {
		return 0, fmt.Errorf("%q is below the 4 MiB minimum", s)
	}
	return n * mult, nil
}

// initExe is the init's binary run starts ("" = palisade-init beside
// this executable, sandbox.DefaultInitExe). Only this package's tests
// set it: they run the command line in-process, with the test binary as
// the init.
var initExe string

func runCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, specOnly bool) (err error) {
	var own *owner
	if !specOnly {
		// A detached sandbox's owner reports every failure to the run
		// --detach that started it.
		if own = takeOwner(); own != nil {
			defer func() {
				if err != nil {
					own.report(ownerReport{Error: err.Error(), Code: cli.Code(err)})
				}
			}()
		}
	}
	f, cmdArgs, err := parseRunFlags(args, stderr, specOnly)
	if err != nil {
		return err
	}
	var st *runStatus
	if f.statusFD >= 0 {
		// Taken before anything is started, so that no child (the init,
		// the proxy, the command) inherits it.
		if st, err = openRunStatus(f.statusFD); err != nil {
			return cli.Usagef("--status-fd: %v", err)
		}
		defer func() { st.write(err) }()
	}
	if f.detach && !specOnly && own == nil {
		return detach(args, f.json, stdout)
	}
	// The sandbox's stdio: the caller's, or for a detached sandbox's
	// owner the pipes its attach multiplexer holds.
	var sbIn io.Reader = stdin
	var sbOut, sbErr io.Writer = stdout, stderr
	var main *mainSession
	if own != nil {
		if main, err = newMainSession(); err != nil {
			return cli.WithCode(sandbox.ExitSandboxFailed, fmt.Errorf("sandbox not created: %w", err))
		}
		defer main.close()
		sbIn, sbOut, sbErr = main.inR, main.outW, main.outW
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return cli.Usagef("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	logger, err := cli.NewLogger(f.logFormat, stderr, level)
	if err != nil {
		return err
	}
	if !specOnly {
		if err := requireRoot("run"); err != nil {
			return cli.WithCode(sandbox.ExitSandboxFailed, err)
		}
	}
	if f.tty && !specOnly && !sandbox.IsTerminal(stdin) {
		// As docker run -it: a terminal fed from a pipe or file echoes
		// the input, cuts lines at 4095 bytes and never sees the end.
		return cli.Usagef("--tty: stdin is not a terminal; drop --tty to pass stdin to the command as it is (a pipe or file), or run from a terminal")
	}
	claimed, err := claimEvents(f.events)
	if err != nil {
		return cli.Usagef("--events: %v", err)
	}
	if claimed != nil && specOnly {
		claimed.Close()
		claimed = nil
	}
	sandboxFailed := func(err error) error {
		return cli.WithCode(sandbox.ExitSandboxFailed, fmt.Errorf("sandbox not created: %w", err))
	}
	var pre *sandbox.Prestarted
	var sigs *sandbox.Signals
	var chain *upstreamproxy.Chain
	if !specOnly {
		// The upstream proxy's files (credential, CA bundle), read
		// before anything is created: a setting that is given but broken
		// stops the run, whether or not the policy then starts a proxy.
		if chain, err = f.upstream.Load(); err != nil {
			return sandboxFailed(err)
		}
		// Signals to forward are caught before anything is created, so
		// one that arrives while the sandbox is being made is forwarded
		// rather than killing the supervisor half-way.
		sigs = sandbox.CatchSignals()
		defer sigs.Stop()
		// The sandbox's cgroup and init depend only on the command line:
		// the init boots while the policy is loaded and checked below.
		// Run takes it, or it is killed on the way out.
		mem, _ := parseSize(f.memory)
		pre = sandbox.Prestart(sandbox.PrestartOptions{
			Name: f.name, StateRoot: f.stateDir, Profile: f.profile, PidsLimit: f.pids, Memory: mem, CPUs: f.cpus, InitExe: initExe,
			TTY: f.tty, Stdin: sbIn, Stdout: sbOut, Stderr: sbErr,
		})
		defer pre.Abort()
	}
	resolved, err := policy.Resolve(policy.ResolveOptions{Flag: f.policy})
	if err != nil {
		return sandboxFailed(err) // names the policy already
	}
	workdir := f.workdir
	if workdir == "" {
		if workdir, err = os.Getwd(); err != nil {
			return sandboxFailed(err)
		}
	}
	// The working directory is resolved once: symbolic links of root's
	// are followed, one of another user's (an agent that replaced a
	// directory with a link after an earlier run) is refused, naming it.
	// The sandbox then holds the directory by descriptor (OpenWorkdir).
	if workdir, err = fsutil.ResolveTrusted(workdir); err != nil {
		return sandboxFailed(fmt.Errorf("--workdir: %w", err))
	}
	if err := resolved.Policy.CheckWorkdir(workdir); err != nil {
		return sandboxFailed(fmt.Errorf("policy %s: %w", resolved.Path, err))
	}
	ceilingPath, explicit := ceiling.Locate(f.ceiling, os.Getenv)
	ceil, err := ceiling.Load(ceilingPath, explicit)
	if err != nil {
		return sandboxFailed(err)
	}
	if egress.Enabled(os.Getenv) && f.kind == string(state.KindTask) {
		var cleanup func()
		resolved, cleanup, err = expandTaskEgress(resolved, workdir, f, ceil, stderr)
		if err != nil {
			return sandboxFailed(err)
		}
		defer cleanup()
	}
	if err := ceil.Check(resolved.Policy); err != nil {
		return sandboxFailed(fmt.Errorf("policy %s: %w", resolved.Path, err))
	}
	mem, _ := parseSize(f.memory)
	pinfo := policyInfo(resolved)
	if err := outOfReach(resolved, f, pinfo, workdir); err != nil {
		return sandboxFailed(err)
	}
	if err := sandbox.CheckPolicyPaths(pinfo, workdir, privateRW); err != nil {
		return sandboxFailed(fmt.Errorf("policy %s: %w", resolved.Path, err))
	}
	var creds *runCredentials
	if f.credentials != "" && pinfo.NetworkPolicies > 0 {
		if creds, err = loadRunCredentials(f.credentials, resolved.Policy); err != nil {
			return sandboxFailed(err)
		}
	}
	env, err := sandbox.BuildEnv(sandbox.EnvInput{
		Host: os.Environ(), Set: f.env, Passthrough: strings.Split(f.passthrough, ","),
		Workdir: workdir, Home: f.home, ReadOnly: pinfo.ReadOnly, Name: f.name, TTY: f.tty, Profile: f.profile,
		Reserved: creds.placeholders(), Secrets: creds.secrets(),
	})
	if err != nil {
		return cli.Usagef("%v", err)
	}
	if err := creds.checkEnv(env); err != nil {
		return sandboxFailed(err)
	}
	if !specOnly {
		warnBinaries(logger, resolved, env)
	}
	if specOnly {
		uid, gid, err := sandbox.ResolveIdentity(pinfo.RunAsUser, pinfo.RunAsGroup)
		if err != nil {
			return sandboxFailed(err)
		}
		name := f.name
		if name == "" {
			name = "sbx-000000000000"
		}
		homeSrc := filepath.Join(f.stateDir, name, sandbox.HomeDirName)
		if f.home != "" {
			homeSrc = filepath.Clean(f.home)
		}
		s, err := sandbox.BuildSpec(sandbox.SpecInput{
			Name: name, Kind: f.kind, Args: cmdArgs, Env: env, Workdir: workdir, UID: uid, GID: gid,
			Home: sandbox.SandboxHome(f.home), HomeSource: homeSrc,
			TTY: f.tty, Hostname: name, PolicySHA: pinfo.SHA256, Compat: compat(pinfo), Profile: f.profile,
			PidsLimit: f.pids, MemoryBytes: mem, CPUs: f.cpus, HidePaths: []string{f.stateDir},
		})
		if err != nil {
			return sandboxFailed(err)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	emitter, closeEvents, err := openEvents(f.events, stdout, claimed)
	if err != nil {
		return cli.Usagef("--events: %v", err)
	}
	defer closeEvents()
	events := newEventSink(emitter, f.agentID, cmdArgs)
	var network sandbox.NetworkAttacher
	if pinfo.NetworkPolicies > 0 {
		if resolved.Source == policy.SourceBundled {
			return sandboxFailed(errors.New("policy: a bundled policy with network entries has no file for the proxy to load"))
		}
		cfg := proxyConfig(f)
		cfg.UpstreamProxyCA = chain.CAPEM()
		cfg.PolicyPath = resolved.Path
		if pinfo.HardRequirement || cli.Truthy(os.Getenv("MAC_OPENSHELL_REQUIRED")) {
			// Fail closed: no sandbox whose decided connections could be
			// borrowed by another process (docs/egress-proxy.md). Seccomp
			// is never dropped here, so --allow-degraded keeps eBPF.
			cfg.SendGuard = "require"
			cfg.Attribution = f.attribution
		}
		if creds != nil {
			cfg.Credentials, cfg.CredentialEnv = creds.path, creds.proxyEnv()
		}
		if ceil != nil {
			cfg.Ceiling = ceil.Path
		}
		cfg.Stdout, cfg.Stderr, cfg.Logger, cfg.Incidents = stdout, stderr, logger, events
		a, err := sandboxnet.New(cfg)
		if err != nil {
			return sandboxFailed(err)
		}
		network = a
	} else if given := proxyFlagsGiven(f); len(given) > 0 {
		logger.Warn(strings.Join(given, ", ")+" ignored: the policy allows no egress, so no proxy runs", "policy", resolved.Path)
	}
	logger.Debug("startup", "phase", "cli", "since_main_us", time.Since(mainStart).Microseconds())
	opts := sandbox.Options{
		Name: f.name, Kind: state.Kind(f.kind), AgentID: f.agentID, Args: cmdArgs, Env: env,
		Workdir: workdir, Home: f.home, TTY: f.tty, Keep: f.keep, StateRoot: f.stateDir, Policy: pinfo,
		Profile: f.profile, PidsLimit: f.pids, Memory: mem, CPUs: f.cpus, InitExe: initExe,
		AllowDegraded: f.allowDegraded, Required: cli.Truthy(os.Getenv("MAC_OPENSHELL_REQUIRED")),
		Probe: probe, Events: events, Logger: logger, Network: network, Prestarted: pre, Signals: sigs,
		Stdin: sbIn, Stdout: sbOut, Stderr: sbErr,
	}
	if _, isFD := ocsf.FDDest(f.events); f.events != "" && f.events != "-" && !isFD {
		opts.EventsFile, _ = filepath.Abs(f.events)
	}
	var res sandbox.Result
	if own != nil {
		// A detached sandbox keeps its final state until delete.
		opts.KeepAlive = len(cmdArgs) == 0
		res, err = runOwned(ctx, opts, own, main)
	} else {
		res, err = sandbox.Run(ctx, opts)
	}
	if events.Lost > 0 {
		logger.Warn("events lost", "sandbox", res.Name, "count", events.Lost, "events", f.events)
	}
	if err != nil {
		return sandboxFailed(err)
	}
	st.fromCommand()
	if res.ExitCode != 0 {
		return cli.Quiet(res.ExitCode)
	}
	return nil
}

// warnBinaries says what the policy's listed binaries really are on this
// host (binaries.Notes): a script whose interpreter is what connects, a
// symlink the kernel resolves, a general interpreter (each a warning),
// a missing path (info: often meant, in a policy for several hosts).
// The sandbox's own PATH finds an "#!/usr/bin/env NAME" script's NAME.
func warnBinaries(logger *slog.Logger, r *policy.Resolved, env []string) {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, n := range binaries.Notes(r.Policy, binaries.Options{Path: path}) {
		if n.Actionable() {
			logger.Warn(n.String(), "policy", r.Path)
		} else {
			logger.Info(n.String(), "policy", r.Path)
		}
	}
}

// proxyConfig is the egress proxy's configuration from run's flags (the
// caller adds the policy and where its output goes).
func proxyConfig(f *runFlags) sandboxnet.Config {
	c := sandboxnet.Config{
		ProxyBin: f.proxyBin, HostsFile: f.hostsFile, UpstreamCABundle: f.upstreamCA, UpstreamProxy: f.upstream,
		Attribution: proxyAttribution(f),
		Events:      f.events, StateRoot: f.stateDir, LogFormat: f.logFormat, LogLevel: f.logLevel,
	}
	if f.dnsTTLSet {
		c.DNSTTL = f.dnsTTL
	}
	if f.proxyProcsSet {
		n := f.proxyProcs
		c.Procs = &n
	}
	return c
}

// proxyFlagsGiven names the given flags that only the egress proxy uses.
func proxyFlagsGiven(f *runFlags) []string {
	var given []string
	for _, g := range []struct {
		name string
		set  bool
	}{
		{"--hosts-file", f.hostsFile != ""}, {"--upstream-ca-bundle", f.upstreamCA != ""},
		{"--dns-ttl", f.dnsTTLSet}, {"--proxy-procs", f.proxyProcsSet}, {"--credentials", f.credentials != ""},
	} {
		if g.set {
			given = append(given, g.name)
		}
	}
	return append(given, f.upstream.GivenFlags()...)
}

func compat(p sandbox.PolicyInfo) string {
	if p.HardRequirement {
		return "hard_requirement"
	}
	return "best_effort"
}

func policyInfo(r *policy.Resolved) sandbox.PolicyInfo {
	p := r.Policy
	return sandbox.PolicyInfo{
		SHA256: p.Checksum(), Source: string(r.Source), Path: r.Path, Reason: r.Reason,
		ReadOnly: p.Filesystem.ReadOnly, ReadWrite: p.Filesystem.ReadWrite,
		IncludeWorkdir:  p.Filesystem.IncludeWorkdir,
		HardRequirement: p.Landlock.Compatibility != policy.CompatibilityBestEffort,
		RunAsUser:       p.Process.RunAsUser, RunAsGroup: p.Process.RunAsGroup,
		NetworkPolicies: len(p.NetworkPolicies),
	}
}

// expandTaskEgress applies seed 000's per-repo egress (ADR 0009 §2a) to a
// task sandbox's policy when MAC_OPENSHELL_TASK_EGRESS is on: hosts the
// repository's lockfiles name are granted read-only only when they match
// the trusted registry list, hosts the task metadata declares are granted,
// everything else is refused and reported. The base is appended to, never
// rewritten; the bundled default is never expanded; any error leaves the
// base in force. The sandbox_egress_decision record goes to stderr. The
// expanded policy is written to a root-only file under the state root for
// the proxy to load; the returned cleanup removes it.
func expandTaskEgress(base *policy.Resolved, workdir string, f *runFlags, ceil *ceiling.Ceiling, stderr io.Writer) (*policy.Resolved, func(), error) {
	nop := func() {}
	opts := egress.Options{Base: base.Raw, BasePath: base.Path, Repo: workdir}
	if ceil != nil {
		opts.Ceiling = ceil.Check
	}
	if f.taskMetadata != "" {
		b, err := os.ReadFile(f.taskMetadata)
		if err != nil {
			return nil, nop, fmt.Errorf("--task-metadata: %w", err)
		}
		opts.TaskMetadata = b
	}
	if f.trustedRegistries != "" {
		b, err := os.ReadFile(f.trustedRegistries)
		if err != nil {
			return nil, nop, fmt.Errorf("--trusted-registries: %w", err)
		}
		if opts.Trusted, err = egress.ParseTrustedRegistries(b); err != nil {
			return nil, nop, fmt.Errorf("--trusted-registries %s: %w", f.trustedRegistries, err)
		}
		opts.TrustedSource = f.trustedRegistries
	}
	out, dec := egress.Expand(opts)
	stderr.Write(append(dec.JSON(), '\n'))
	if bytes.Equal(out, base.Raw) {
		return base, nop, nil
	}
	p, err := egress.Verify(base.Policy, out)
	if err != nil {
		// Expansion must never weaken the base; keep the base.
		return base, nop, nil
	}
	store, err := state.Open(f.stateDir)
	if err != nil {
		return nil, nop, err
	}
	tmp, err := os.CreateTemp(store.Root(), ".task-policy-*.yaml")
	if err != nil {
		return nil, nop, fmt.Errorf("write expanded policy: %w", err)
	}
	path := tmp.Name()
	cleanup := func() { os.Remove(path) }
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		cleanup()
		return nil, nop, fmt.Errorf("write expanded policy: %w", err)
	}
	tmp.Close()
	return &policy.Resolved{Policy: p, Source: base.Source, Path: path,
		Reason: base.Reason + "; expanded with per-task egress (MAC_OPENSHELL_TASK_EGRESS=1)", Raw: out}, cleanup, nil
}

// privateRW are read-write paths that are fresh filesystems inside the
// sandbox: the host's files there are out of its reach.
var privateRW = sandbox.PrivateReadWrite

// outOfReach refuses a policy file, hosts file or events file that the
// sandbox could change: through the policy file or hosts file (both
// reloaded or read by the proxy while the sandbox runs) an agent could
// widen its own egress; through the events file it could forge its trail.
func outOfReach(r *policy.Resolved, f *runFlags, p sandbox.PolicyInfo, workdir string) error {
	uid, gid, err := sandbox.ResolveIdentity(p.RunAsUser, p.RunAsGroup)
	if err != nil {
		return err
	}
	rw := p.ReadWrite
	check := func(label, path string) error {
		return sandbox.OutOfReach(label, path, uid, gid, workdir, rw, privateRW)
	}
	if r.Source != policy.SourceBundled {
		if err := check("policy", r.Path); err != nil {
			return err
		}
	}
	if f.hostsFile != "" {
		if err := check("--hosts-file", f.hostsFile); err != nil {
			return err
		}
	}
	if f.credentials != "" {
		if err := check("--credentials", f.credentials); err != nil {
			return err
		}
	}
	if f.upstreamCA != "" {
		if err := check("--upstream-ca-bundle", f.upstreamCA); err != nil {
			return err
		}
		if _, err := tlsca.LoadPool(f.upstreamCA); err != nil {
			return fmt.Errorf("--upstream-ca-bundle: %w", err)
		}
	}
	// The upstream proxy's credential and CA bundle: an agent that could
	// replace either could read the credential or make the sandbox trust
	// its own CA.
	for _, o := range []struct {
		flag string
		v    upstreamproxy.Optional
	}{{upstreamproxy.FlagAuthFile, f.upstream.AuthFile}, {upstreamproxy.FlagCABundle, f.upstream.CABundle}} {
		if o.v.Given {
			if err := check(o.flag, o.v.Value); err != nil {
				return err
			}
		}
	}
	if _, isFD := ocsf.FDDest(f.events); f.events != "" && f.events != "-" && !isFD {
		if err := check("--events", f.events); err != nil {
			return err
		}
	}
	// The state root holds every sandbox's labels and its exec and attach
	// sockets. Under the workdir, the tmpfs that hides it would lie under
	// the workdir's bind mount, so the sandbox would see it, and the agent
	// could rename it away (delete and gc would no longer find the
	// sandbox) or put another directory in its place.
	if _, err := sandbox.OutsideWritable("--state-dir", f.stateDir, workdir, rw, privateRW); err != nil {
		return err
	}
	return nil
}
