// Command egress-proxy is the only way out of a Palisade sandbox: an
// explicit CONNECT and forward-HTTP proxy that decides every connection
// against the policy's network_policies before any DNS lookup, dials only
// addresses the SSRF guard accepts, answers denials with a 403 JSON body,
// catches direct-connection attempts on its fence listener, and records
// everything as OCSF events. See docs/egress-proxy.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/attribution"
	"github.com/palisade-sandbox/palisade/pkg/binaries"
	"github.com/palisade-sandbox/palisade/pkg/ceiling"
	"github.com/palisade-sandbox/palisade/pkg/cgroup"
	"github.com/palisade-sandbox/palisade/pkg/cli"
	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/feature"
	"github.com/palisade-sandbox/palisade/pkg/fence"
	"github.com/palisade-sandbox/palisade/pkg/ocsf"
	"github.com/palisade-sandbox/palisade/pkg/policy"
	"github.com/palisade-sandbox/palisade/pkg/proxy"
	"github.com/palisade-sandbox/palisade/pkg/runtimetune"
	"github.com/palisade-sandbox/palisade/pkg/ssrf"
	"github.com/palisade-sandbox/palisade/pkg/tlsca"
	"github.com/palisade-sandbox/palisade/pkg/upstreamproxy"
)

const usage = `Usage:
  egress-proxy --policy FILE [--listen ADDR] [--fence-listen ADDR]
               [--dns-listen ADDR --transparent-listen ADDR [--dns-ttl D]
                [--dns-epoch N]]
               [--control PATH] [--events FILE|-|/dev/fd/N] [--hosts-file FILE]
               [--sandbox NAME --cgroup NAME --init-pid PID] [--pins FILE]
               [--ready-fd N] [--ca-out FILE] [--upstream-ca-bundle FILE]
               [--ceiling FILE] [--credentials FILE [--credentials-env-fd N]]
               [--upstream-proxy URL [upstream proxy flags]]
               [limits] [--log-format text|json] [--log-level L]

Serves an explicit HTTP proxy (CONNECT host:port, absolute-form http://)
that allows exactly what the policy's network_policies allow, for exactly
the binaries they list. Denials are HTTP 403 with a one-line JSON body
{"error":"policy_denied"|"ssrf_denied","host","port","binary","pid",
"policy","reason"}, a Proxy-Status field (RFC 9209) with the same facts,
and the status line "403 Forbidden (ERROR: REASON)". The policy file's directory is watched; SIGHUP and
POST /reload on the control socket reload too. A policy that does not
load, validate and compile is rejected and the last good one stays, and
so is one that is not within the host's ceiling (--ceiling).

Tunnels to protocol: rest endpoints are inspected: TLS is terminated with
a CA generated at start (ECDSA P-256; its key never leaves the process's
memory), HTTP/1.1 and HTTP/2 requests are decided one by one against the
endpoint's access/rules/deny_rules, and the upstream's certificate is
verified against the system roots plus --upstream-ca-bundle. Clients must
trust the CA: --ca-out writes its (public) certificate.

Modes:
  sandbox     --cgroup and --init-pid name the sandbox (sandbox-supervisor
              passes them): callers are attributed among that cgroup's
              processes only, through the sandbox's network namespace.
  standalone  neither flag: callers are attributed by scanning every
              process of the host (slower per connection; for one host's
              own tools, not for sandboxes).

Flags:
  --policy FILE          policy file (required)
  --listen ADDR          explicit proxy address (default 127.0.0.1:3128)
  --fence-listen ADDR    fence listener for nftables-redirected connections
  --dns-listen ADDR      policy DNS (UDP and TCP): answers the names of the
                         policy's endpoints (exact hosts, and each name a
                         wildcard matches), with synthetic addresses from
                         198.18.0.0/15; every other name is NXDOMAIN and
                         never forwarded (with --transparent-listen)
  --transparent-listen ADDR
                         transparent listener for nftables-redirected
                         connections to synthetic addresses: mapped back to
                         the name and decided exactly like a CONNECT to it
                         (TLS inspection and L7 rules, SNI check), relayed
                         to the validated real address (with --dns-listen);
                         HOST:LOW-HIGH listens on every port of a range (at
                         most 64), e.g. 10.200.0.1:3132-3139, the range
                         the fence redirects to
  --dns-ttl D            lifetime of a synthetic mapping and TTL of its answer
                         (1s..30s, default 5s)
  --dns-epoch N          boot epoch of the synthetic addresses (0 or more; with
                         --dns-listen): they come from /21 number N mod 64
                         of 198.18.0.0/15, and a connection to another
                         epoch's is refused (other_epoch). sandbox-supervisor
                         advances a persisted one before every proxy start,
                         so an address cached across a restart is never
                         mapped to another name; default a random epoch
  --client-cc NAME       TCP congestion control of accepted (client-side)
                         connections (default cubic, else reno; "" keeps
                         the system default)
  --control PATH         root-only (0600) control socket: GET /status,
                         GET /metrics, POST /reload
  --events FILE|-|/dev/fd/N
                         OCSF events as JSON lines (- for stdout, /dev/fd/N a
                         pipe, socket or file the caller opened; default none)
  --hosts-file FILE      resolve names from this hosts file only (no DNS)
  --sandbox NAME         sandbox name in events (default "host")
  --cgroup NAME          sandbox cgroup (sandbox mode, with --init-pid)
  --init-pid PID         host pid of the sandbox init (sandbox mode)
  --attribution MODE     how connections are attributed to processes: bpf
                         (eBPF programs on the sandbox's v2 cgroup record
                         each socket's connector; sandbox mode only), proc
                         (search the sandbox's /proc fd tables per
                         connection) or auto (default: bpf when it loads,
                         else proc with a Device Config State Change event)
  --send-guard MODE      hold each decided connection to the process it was
                         decided on, in the kernel (only it and its
                         descendants may send on it afterwards): auto
                         (default: when the eBPF backend can), require
                         (exit 1 when it cannot: sandbox-supervisor passes
                         it under hard_requirement) or off (no socket is
                         put under it: uploads skip its per-send check; a
                         Send Guard event says so)
  --writable PATH        a path the sandbox may write (its workdir, each
                         read_write path; repeat it): a process that maps
                         executable code from under one, or from a writable
                         tmpfs, a memfd or a deleted file, loses its
                         binary's identity (reason foreign_code; sandbox
                         mode, sandbox-supervisor passes them)
  --pins FILE            binary sha256 pins (trust on first use); default
                         binary-pins.json next to --control, else memory
  --ready-fd N           write "ready\n" to fd N once listening, then close it
  --ca-out FILE          write the inspection CA's certificate (PEM, public,
                         mode 0644) to FILE before reporting ready
  --ceiling FILE         the policy ceiling (docs/policy.md, "Ceiling"):
                         the starting policy and every reload must lie
                         within it, or are refused naming the first excess.
                         Default $PALISADE_CEILING_FILE, else
                         /etc/palisade/ceiling.yaml when it exists; the file
                         must be root's and not group/world-writable. It is
                         read again at every reload
  --upstream-ca-bundle FILE
                         also trust these PEM roots for upstream servers of
                         inspected tunnels (an unreadable or certificate-free
                         file is an error)
  --credentials FILE     the credentials whose placeholders
                         (openshell:resolve:env:KEY) the proxy resolves in
                         requests it admitted, where each is bound
                         (docs/credentials.md). The file must be root's and
                         mode 0600 or 0400 (anything else is refused, naming
                         it); it is read again at every reload, and a reload
                         that fails revokes every credential until one
                         succeeds. A policy that binds credentials the file
                         does not hold, or lets a bound endpoint's tunnels
                         pass uninspected, does not load
  --credentials-env-fd N read the values of the file's env: sources from
                         descriptor N (a JSON object sandbox-supervisor
                         writes) instead of this process's environment

Upstream (corporate) proxy, for networks where nothing leaves but through
one. Only tunnels are chained — CONNECTs (passthrough and inspected) and
transparent connections, served as the CONNECT to their name would be —
once policy and the SSRF guard have passed them, with the checked address
as the CONNECT target; forwarded http:// requests always go direct. These
flags are the only way to set it: HTTPS_PROXY, HTTP_PROXY and NO_PROXY are
never read. A flag that is given but wrong stops the start:
  --upstream-proxy URL   http://host:port or https://host:port (scheme and
                         port required; no user:pass@, path or query). For
                         https://, TLS to the proxy, verified against the
                         system roots plus --upstream-proxy-ca-bundle
  --upstream-proxy-auth-file FILE
                         root-only (mode 0600) file holding user:pass, sent
                         as Proxy-Authorization: Basic; only its path is
                         ever on a command line
  --upstream-proxy-allow-insecure
                         required with --upstream-proxy-auth-file for an
                         http:// proxy: the credential then crosses the
                         network in cleartext
  --upstream-proxy-ca-bundle FILE
                         PEM CA certificates trusted for the https:// proxy
                         and for upstream servers of inspected tunnels (a
                         TLS-intercepting proxy re-signs them)
  --upstream-proxy-no-proxy LIST
                         comma-separated destinations dialled directly:
                         example.com (and subdomains), .example.com
                         (subdomains only), 198.51.100.7, 10.0.0.0/8, each
                         optionally :PORT (that port only); an address or
                         prefix also matches a name through the addresses
                         it resolved to, and only those addresses go
                         direct. Loopback is always direct
  --upstream-proxy-connect-by-hostname
                         send the host name as the CONNECT target, for
                         proxies whose ACLs refuse addresses: the proxy
                         then resolves it, and its ACLs become the
                         effective control of chained tunnels
  --max-conns N          concurrent client connections (default 4096; the
                         descriptor limit is raised to fit when root, else
                         the default shrinks to fit it)
  --max-head-bytes N     request head limit, 431 beyond (default 8192)
  --head-timeout D       request head read timeout, 408 beyond (default 10s)
  --connect-timeout D    upstream resolve+connect timeout, 504 beyond (default 10s)
  --idle-timeout D       close tunnels idle this long (default 15m)
  --procs N              CPUs that run proxy code at once (Go's GOMAXPROCS;
                         0: all). Default 1 in sandbox mode: one proxy per
                         sandbox, and one scheduler thread answers a new
                         connection sooner than two handing it to each
                         other (docs/egress-proxy.md has the figures); all
                         CPUs standalone. A GOMAXPROCS environment
                         variable replaces the default, not the flag.
  --deny-window D        report a repeated denial at most once per D, with a
                         count (default 10s; 0 reports every one)
  --log-format F         text or json logs on stderr (default text)
  --log-level L          debug, info, warn or error (default info); one line
                         per allowed connection at debug, per denied or
                         failed one at info (every connection is an OCSF
                         event anyway); warn and error are the proxy's own
                         trouble

Environment: at start the proxy re-executes itself (same process) with
GODEBUG=schedtrace=2147483647 added. This keeps Go's monitor thread out of
a deep sleep from which the next system call after every idle moment
would wake it with a futex (10-40 us less CPU per new connection;
docs/egress-proxy.md). Go then writes a one-line scheduler summary
("SCHED ...") to stderr at start when the host has been up more than
24.8 days, and every 24.8 days after. A GODEBUG that already sets
schedtrace is kept as it is: GODEBUG=schedtrace=0 restores Go's default.

Exit status: 0 after SIGTERM/SIGINT, 1 when the policy does not load or a
listener fails, 2 on bad flags.

Examples:
  # Started by sandbox-supervisor (next to it), on the host side of the veth:
  egress-proxy --policy /etc/palisade/policy.yaml \
      --listen 10.200.0.1:3128 --fence-listen 10.200.0.1:3129 \
      --sandbox task-42 --cgroup task-42 --init-pid 12345 \
      --control /run/palisade/sandboxes/task-42/proxy.sock \
      --events /var/log/palisade/events.jsonl --ready-fd 3

  # Standalone on a host: loopback listener, same policy and events.
  egress-proxy --policy ~/.mac/openshell-policy.yaml --events - \
      --control /run/egress-proxy.sock
  # The rendered fleet policy lets git and gh reach GitHub, nothing else:
  HTTPS_PROXY=http://127.0.0.1:3128 git ls-remote https://github.com/git/git HEAD   # allowed
  HTTPS_PROXY=http://127.0.0.1:3128 curl https://api.github.com/zen   # 403 policy_denied, binary_not_allowed

  # Inspected (protocol: rest) endpoints: clients trust the proxy's CA.
  egress-proxy --policy policy.yaml --ca-out /run/egress-proxy-ca.pem &
  curl -x http://127.0.0.1:3128 --cacert /run/egress-proxy-ca.pem https://pypi.org/simple/

  # Behind a corporate proxy: tunnels go through it, the intranet directly.
  egress-proxy --policy policy.yaml \
      --upstream-proxy https://proxy.corp.example:3128 \
      --upstream-proxy-auth-file /etc/palisade/proxy-auth \
      --upstream-proxy-ca-bundle /etc/palisade/corp-ca.pem \
      --upstream-proxy-no-proxy .corp.example,10.0.0.0/8

  # Inspect and reload a running proxy.
  curl --unix-socket /run/egress-proxy.sock http://proxy/status
  curl --unix-socket /run/egress-proxy.sock -X POST http://proxy/reload
`

// runtimeTuneErr is why main could not keep the runtime's monitor thread
// out of deep sleep (package runtimetune); run reports it.
var runtimeTuneErr error

func main() {
	// First: an exec must come before anything is opened or changed.
	runtimeTuneErr = runtimetune.Apply()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	cli.Exit("egress-proxy", err, os.Stderr)
}

type flags struct {
	policy, listen, fenceListen, control, events, hostsFile string
	sandbox, cgroup, pins, logFormat, logLevel, clientCC    string
	attribution, sendGuard                                  string
	writable                                                pathList
	caOut, upstreamCA, ceiling, credentials                 string
	credentialsEnvFD                                        int
	dnsListen, transparentListen                            string
	dnsTTL                                                  time.Duration
	dnsEpoch                                                uint64
	dnsEpochSet                                             bool
	initPID, readyFD, maxConns, maxHeadBytes, procs         int
	maxConnsSet                                             bool
	headTimeout, connectTimeout, idleTimeout, denyWindow    time.Duration
	upstream                                                upstreamproxy.Settings
}

func parseFlags(args []string, stdout io.Writer) (*flags, bool, error) {
	f := &flags{}
	fs := flag.NewFlagSet("egress-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.policy, "policy", "", "policy file")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:3128", "explicit proxy address")
	fs.StringVar(&f.fenceListen, "fence-listen", "", "fence listener address")
	fs.StringVar(&f.dnsListen, "dns-listen", "", "policy DNS address")
	fs.StringVar(&f.transparentListen, "transparent-listen", "", "transparent TCP listener address")
	fs.DurationVar(&f.dnsTTL, "dns-ttl", defaultDNSTTL, "synthetic mapping lifetime")
	fs.Uint64Var(&f.dnsEpoch, "dns-epoch", 0, "boot epoch of the synthetic addresses")
	fs.StringVar(&f.attribution, "attribution", "auto", "attribution backend: bpf, proc or auto")
	fs.StringVar(&f.clientCC, "client-cc", proxy.DefaultClientCongestion, "TCP congestion control of accepted connections (empty: system default)")
	fs.StringVar(&f.control, "control", "", "control socket path")
	fs.StringVar(&f.events, "events", "", "OCSF events destination: a file (appended), - for stdout, or /dev/fd/N for a descriptor the caller opened")
	fs.StringVar(&f.hostsFile, "hosts-file", "", "static hosts file")
	fs.StringVar(&f.sandbox, "sandbox", "host", "sandbox name")
	fs.StringVar(&f.cgroup, "cgroup", "", "sandbox cgroup name")
	fs.IntVar(&f.initPID, "init-pid", 0, "sandbox init pid")
	fs.Var(&f.writable, "writable", "a path the sandbox may write (repeatable)")
	fs.StringVar(&f.sendGuard, "send-guard", "auto", "hold decided connections to their process: auto, require or off")
	fs.StringVar(&f.pins, "pins", "", "binary pin file")
	fs.IntVar(&f.readyFD, "ready-fd", -1, "readiness fd")
	fs.IntVar(&f.maxConns, "max-conns", proxy.DefaultMaxConns, "concurrent connections")
	fs.IntVar(&f.procs, "procs", -1, "CPUs running proxy code at once")
	fs.IntVar(&f.maxHeadBytes, "max-head-bytes", proxy.DefaultMaxHeadBytes, "request head limit")
	fs.DurationVar(&f.headTimeout, "head-timeout", proxy.DefaultHeadTimeout, "head read timeout")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", proxy.DefaultConnectTimeout, "upstream connect timeout")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "tunnel idle timeout")
	fs.DurationVar(&f.denyWindow, "deny-window", proxy.DefaultDenyWindow, "denial rate-limit window")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.caOut, "ca-out", "", "write the inspection CA certificate here")
	fs.StringVar(&f.upstreamCA, "upstream-ca-bundle", "", "extra PEM roots for upstream servers")
	fs.StringVar(&f.ceiling, "ceiling", "", "policy ceiling file")
	f.upstream.Register(fs)
	fs.StringVar(&f.credentials, "credentials", "", "root-only credentials file")
	fs.IntVar(&f.credentialsEnvFD, "credentials-env-fd", -1, "descriptor holding the values of the credentials' env sources")
	if err := cli.ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil, true, nil
		}
		return nil, false, cli.Usagef("%v; see egress-proxy --help", err)
	}
	if fs.NArg() > 0 {
		return nil, false, cli.Usagef("unexpected argument %q; see egress-proxy --help", fs.Arg(0))
	}
	fs.Visit(func(fl *flag.Flag) {
		f.maxConnsSet = f.maxConnsSet || fl.Name == "max-conns"
		f.dnsEpochSet = f.dnsEpochSet || fl.Name == "dns-epoch"
	})
	switch {
	case f.policy == "":
		return nil, false, cli.Usagef("--policy is required; see egress-proxy --help")
	case f.listen == "":
		return nil, false, cli.Usagef("--listen must not be empty")
	case (f.cgroup == "") != (f.initPID == 0):
		return nil, false, cli.Usagef("--cgroup and --init-pid go together (sandbox mode) or not at all (standalone)")
	case f.initPID < 0:
		return nil, false, cli.Usagef("--init-pid %d: want a positive pid", f.initPID)
	case f.sendGuard != "auto" && f.sendGuard != "require" && f.sendGuard != "off":
		return nil, false, cli.Usagef("--send-guard %q: want auto, require or off", f.sendGuard)
	case f.sendGuard == "require" && f.cgroup == "":
		return nil, false, cli.Usagef("--send-guard require needs sandbox mode (--cgroup and --init-pid): the guard attaches to the sandbox's cgroup")
	case len(f.writable) > 0 && f.cgroup == "":
		return nil, false, cli.Usagef("--writable needs sandbox mode (--cgroup and --init-pid)")
	case f.readyFD != -1 && f.readyFD < 3:
		return nil, false, cli.Usagef("--ready-fd %d: want 3 or more (0-2 are stdio)", f.readyFD)
	case f.credentialsEnvFD != -1 && (f.credentialsEnvFD < 3 || f.credentialsEnvFD == f.readyFD):
		return nil, false, cli.Usagef("--credentials-env-fd %d: want 3 or more, not --ready-fd", f.credentialsEnvFD)
	case f.credentialsEnvFD != -1 && f.credentials == "":
		return nil, false, cli.Usagef("--credentials-env-fd goes with --credentials")
	case f.maxConns < 1:
		return nil, false, cli.Usagef("--max-conns %d: want at least 1", f.maxConns)
	case f.procs < -1:
		return nil, false, cli.Usagef("--procs %d: want 0 (all CPUs) or more", f.procs)
	case f.maxHeadBytes < 512 || f.maxHeadBytes > 1<<20:
		return nil, false, cli.Usagef("--max-head-bytes %d: want 512..1048576", f.maxHeadBytes)
	case f.headTimeout <= 0:
		return nil, false, cli.Usagef("--head-timeout %v: want a positive duration", f.headTimeout)
	case f.connectTimeout <= 0:
		return nil, false, cli.Usagef("--connect-timeout %v: want a positive duration", f.connectTimeout)
	case f.idleTimeout <= 0:
		return nil, false, cli.Usagef("--idle-timeout %v: want a positive duration", f.idleTimeout)
	case f.denyWindow < 0:
		return nil, false, cli.Usagef("--deny-window %v: must not be negative", f.denyWindow)
	case f.sandbox == "":
		return nil, false, cli.Usagef("--sandbox must not be empty")
	case f.attribution != "auto" && f.attribution != "bpf" && f.attribution != "proc":
		return nil, false, cli.Usagef("--attribution %q: want bpf, proc or auto", f.attribution)
	case f.attribution == "bpf" && f.cgroup == "":
		return nil, false, cli.Usagef("--attribution bpf needs sandbox mode (--cgroup and --init-pid): the programs attach to the sandbox's cgroup")
	}
	if err := checkSubstrateFlags(f); err != nil {
		return nil, false, err
	}
	if f.pins == "" && f.control != "" {
		f.pins = filepath.Join(filepath.Dir(f.control), "binary-pins.json")
	}
	return f, false, nil
}

// schedulerProcs is the GOMAXPROCS the proxy runs with (0: the runtime's
// default, every CPU within the cgroup's limit), or -1 to keep what the
// runtime chose: --procs when given, else 1 in sandbox
// mode unless the GOMAXPROCS environment variable chose. One proxy
// serves one sandbox; with one P the goroutine that a new connection
// wakes runs on the thread the poller woke, instead of another thread
// being woken to run it while a third spins, which doubled the time to
// answer a CONNECT on the 2-CPU machine of docs/egress-proxy.md.
func schedulerProcs(flag int, sandbox, env bool) int {
	switch {
	case flag >= 0:
		return flag
	case sandbox && !env:
		return 1
	}
	return -1
}

func productVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if cli.IsVersion(args) {
		return cli.PrintVersion(stdout, "egress-proxy")
	}
	f, help, err := parseFlags(args, stdout)
	if help || err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return cli.Usagef("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	log, err := cli.NewLogger(f.logFormat, stderr, level)
	if err != nil {
		return err
	}
	if runtimeTuneErr != nil {
		log.Warn("runtime tuning", "err", runtimeTuneErr)
	}
	if n := schedulerProcs(f.procs, f.cgroup != "", os.Getenv("GOMAXPROCS") != ""); n >= 0 {
		prev := runtime.GOMAXPROCS(0)
		defer runtime.GOMAXPROCS(prev) // run is called in-process by tests
		if n == 0 {
			runtime.SetDefaultGOMAXPROCS() // CPUs, within the cgroup's CPU limit
		} else {
			runtime.GOMAXPROCS(n)
		}
	}
	if n, note, err := proxy.FitFDLimit(f.maxConns, f.maxConnsSet); err != nil {
		log.Warn("file descriptor limit", "err", err)
	} else if note != "" {
		f.maxConns = n
		log.Debug("file descriptor limit", "note", note, "max_conns", n)
	}

	var events ocsf.Emitter = ocsf.Discard
	if f.events != "" {
		w, err := ocsf.OpenDest(f.events, stdout)
		if err != nil {
			return cli.Usagef("--events: %v", err)
		}
		defer w.Close()
		events = w
	}
	src := ocsf.NewSource(f.sandbox, proxy.Component, productVersion())

	var resolver ssrf.Resolver = ssrf.SystemResolver{}
	if f.hostsFile != "" {
		hr, err := ssrf.NewHostsResolver(f.hostsFile)
		if err != nil {
			return cli.Failf("--hosts-file: %v", err)
		}
		resolver = hr
	}

	// The inspection CA: generated here, its key only ever in memory, so
	// that memory never reaches a core file first.
	if err := proxy.NoCoreDumps(); err != nil && !errors.Is(err, feature.ErrNotSupported) {
		return cli.Failf("%v", err)
	}
	ca, err := tlsca.New(tlsca.Options{Name: f.sandbox})
	if err != nil {
		return cli.Failf("%v", err)
	}
	var upstreamFiles []string
	if f.upstreamCA != "" {
		upstreamFiles = append(upstreamFiles, f.upstreamCA)
	}
	roots, err := tlsca.LoadPool(upstreamFiles...)
	if err != nil {
		return cli.Failf("--upstream-ca-bundle: %v", err)
	}
	chain, err := f.upstream.Load()
	if errors.Is(err, upstreamproxy.ErrUsage) {
		return cli.Usagef("%v", err)
	} else if err != nil {
		return cli.Failf("%v", err)
	}
	if chain != nil {
		// A TLS-intercepting corporate proxy re-signs the upstream
		// servers' certificates of the tunnels the proxy inspects.
		roots.AppendCertsFromPEM(chain.CAPEM())
		logUpstreamProxy(log, chain)
	}
	if f.caOut != "" {
		if err := ca.WriteCert(f.caOut); err != nil {
			return cli.Failf("--ca-out: %v", err)
		}
	}

	loadCreds, err := credentialLoader(f)
	if err != nil {
		return err
	}

	attr, closeAttr, err := attributor(f, events, src, log)
	if err != nil {
		return cli.Failf("%v", err)
	}
	defer closeAttr()
	guard, err := sendGuard(f, attr, events, src, log)
	if err != nil {
		return cli.Failf("%v", err)
	}
	pinner, err := attribution.NewPinner(f.pins, 0)
	if err != nil {
		return cli.Failf("--pins: %v", err)
	}

	// Bind everything before the policy loads, so a port conflict is
	// reported before anything else; nothing is served until New.
	ln, err := proxy.Listen(ctx, f.listen, f.clientCC)
	if err != nil {
		return cli.Failf("--listen: %v", err)
	}
	defer ln.Close()
	self := []netip.Addr{}
	addSelf := func(a net.Addr) {
		if ap := a.(*net.TCPAddr).AddrPort(); !ap.Addr().IsUnspecified() {
			self = append(self, ap.Addr().Unmap())
		}
	}
	addSelf(ln.Addr())
	var fenceLn net.Listener
	if f.fenceListen != "" {
		if fenceLn, err = proxy.Listen(ctx, f.fenceListen, f.clientCC); err != nil {
			return cli.Failf("--fence-listen: %v", err)
		}
		defer fenceLn.Close()
		addSelf(fenceLn.Addr())
	}
	tcpSub, err := listenTCPSubstrate(ctx, f)
	if err != nil {
		return err
	}
	if tcpSub != nil {
		defer tcpSub.close()
		for _, ln := range tcpSub.tLns {
			addSelf(ln.Addr())
		}
	}
	var ctlLn net.Listener
	if f.control != "" {
		if ctlLn, err = proxy.ListenControl(f.control); err != nil {
			return cli.Failf("--control: %v", err)
		}
		defer ctlLn.Close()
	}

	dialer := &ssrf.Dialer{
		Resolver: resolver,
		Guard:    &ssrf.Guard{Self: self},
		Timeout:  f.connectTimeout,
		// The proxy turns keep-alive on for upstream connections that
		// last (Proxy.trackUpstream), not at every dial.
		KeepAlive: -1,
	}
	p, err := proxy.New(proxy.Config{
		PolicyPath:      f.policy,
		Admit:           ceiling.Checker(ceiling.Locate(f.ceiling, os.Getenv)),
		Compile:         proxy.CompileDecision,
		Canonicalize:    proxy.CanonicalHost,
		Dialer:          proxy.SSRFDialer{Dialer: dialer, Chain: chain},
		Attributor:      proxy.AttributionBackend{Backend: attr},
		Guard:           guard,
		Pinner:          proxy.AttributionPinner{Pinner: pinner},
		OriginalDst:     fence.OriginalDst,
		Source:          src,
		Events:          events,
		CA:              ca,
		UpstreamRoots:   roots,
		Logger:          log,
		BinaryNotes:     binaryNotes,
		Credentials:     loadCreds,
		CredentialsPath: f.credentials,
		// Run for a sandbox, the supervisor said the first load's notes.
		QuietFirstNotes: f.cgroup != "",
		Limits: proxy.Limits{
			MaxHeadBytes:   f.maxHeadBytes,
			HeadTimeout:    f.headTimeout,
			ConnectTimeout: f.connectTimeout,
			IdleTimeout:    f.idleTimeout,
			MaxConns:       f.maxConns,
			DenyWindow:     f.denyWindow,
		},
	})
	if err != nil {
		return cli.Failf("%v", err)
	}
	defer p.Close()

	// The sock_diag socket must exist in the sandbox's namespace before
	// CAP_SYS_ADMIN goes: setns(2) needs it, and without the socket every
	// lookup reads the namespace's whole /proc/<pid>/net/tcp table.
	if pb, ok := attr.(interface{ Prepare() error }); ok {
		if err := pb.Prepare(); err != nil {
			log.Warn("attribution: exact socket lookup unavailable; reading /proc socket tables per connection", "err", err)
		}
	}
	if os.Geteuid() == 0 {
		if err := proxy.DropCapabilities(proxy.KeepCapabilities); err != nil {
			log.Warn("capabilities not dropped; the proxy keeps root's full set", "err", err)
		} else {
			log.Info("dropped every capability but CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH")
		}
	}

	errc := make(chan error, 6+fence.MaxTransparentPorts)
	if tcpSub != nil {
		if err := tcpSub.serve(ctx, p, dialer, src, events, errc); err != nil {
			return cli.Failf("policy DNS: %v", err)
		}
	}
	go func() { errc <- p.Serve(ln) }()
	if fenceLn != nil {
		go func() { errc <- p.ServeFence(fenceLn) }()
	}
	if ctlLn != nil {
		go func() { errc <- p.ServeControl(ctlLn) }()
	}
	wctx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	go func() {
		if err := p.Watch(wctx); err != nil {
			log.Error("policy watch stopped; reload with SIGHUP or POST /reload", "err", err)
		}
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	attrs := []any{"listen", ln.Addr().String(), "sandbox", f.sandbox, "mode", mode(f)}
	if fenceLn != nil {
		attrs = append(attrs, "fence", fenceLn.Addr().String())
	}
	if tcpSub != nil {
		attrs = append(attrs, "dns", f.dnsListen, "transparent", tcpSub.transparentAddrList())
	}
	if f.control != "" {
		attrs = append(attrs, "control", f.control)
	}
	log.Info("egress-proxy listening", attrs...)
	if f.readyFD >= 0 {
		if err := signalReady(f.readyFD); err != nil {
			return cli.Failf("--ready-fd: %v", err)
		}
	}

	for {
		select {
		case <-ctx.Done():
			log.Info("egress-proxy stopping")
			return nil
		case <-hup:
			p.Reload("sighup")
		case err := <-errc:
			if err != nil {
				return cli.Failf("%v", err)
			}
		}
	}
}

// logUpstreamProxy says how tunnels leave: the proxy's URL, whether a
// credential goes with them (never the credential), the NO_PROXY list.
func logUpstreamProxy(log *slog.Logger, c *upstreamproxy.Chain) {
	target := "checked address"
	if c.ConnectByHostname {
		target = "host name"
	}
	log.Info("CONNECT tunnels chained through an upstream proxy", "proxy", c.String(), "credential", c.HasCredential(),
		"connect_target", target, "no_proxy", strings.Join(c.NoProxy.Entries(), ","), "ca_bundle", c.CABundle)
}

// credentialLoader returns what loads --credentials (nil without it): the
// file, its env sources resolved through the snapshot on
// --credentials-env-fd (read once, here) or this process's environment.
func credentialLoader(f *flags) (func() (*credentials.Store, error), error) {
	if f.credentials == "" {
		return nil, nil
	}
	lookup := os.LookupEnv
	if f.credentialsEnvFD >= 0 {
		r := os.NewFile(uintptr(f.credentialsEnvFD), "credentials-env")
		if r == nil {
			return nil, cli.Usagef("--credentials-env-fd %d is not open", f.credentialsEnvFD)
		}
		snap, err := credentials.DecodeEnv(r)
		r.Close()
		if err != nil {
			return nil, cli.Failf("--credentials-env-fd %d: %v", f.credentialsEnvFD, err)
		}
		lookup = snap.Lookup
	}
	path := f.credentials
	return func() (*credentials.Store, error) { return credentials.Load(path, lookup) }, nil
}

func mode(f *flags) string {
	if f.cgroup != "" {
		return "sandbox"
	}
	return "standalone"
}

// signalReady writes "ready\n" to fd and closes it.
func signalReady(fd int) error {
	w := os.NewFile(uintptr(fd), "ready")
	if w == nil {
		return fmt.Errorf("fd %d is not open", fd)
	}
	defer w.Close()
	_, err := io.WriteString(w, "ready\n")
	return err
}

// attributor returns the attribution backend --attribution asks for:
// scoped to the sandbox's cgroup and network namespace in sandbox mode
// (eBPF programs on its v2 cgroup, or its /proc fd tables), every process
// of the host in standalone mode (/proc only). It reports the choice as a
// Device Config State Change event; "auto" falling back from eBPF to
// /proc says why.
func attributor(f *flags, events ocsf.Emitter, src *ocsf.Source, log *slog.Logger) (attribution.Backend, func(), error) {
	if f.cgroup == "" {
		b, err := attribution.NewProcBackend(attribution.ProcConfig{
			NetnsPID: os.Getpid,
			Procs:    allProcs,
		})
		if err == nil {
			emitBackend(events, src, log, attribution.BackendProc, "")
		}
		return b, func() {}, err
	}
	g, err := cgroup.Open(f.cgroup)
	if err != nil {
		return nil, nil, fmt.Errorf("--cgroup %s: %w", f.cgroup, err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/ns/net", f.initPID)); err != nil {
		g.Close()
		return nil, nil, fmt.Errorf("--init-pid %d: %w", f.initPID, err)
	}
	initPID := f.initPID
	pcfg := attribution.ProcConfig{
		NetnsPID: func() int { return initPID },
		Procs:    g.Procs,
		InitPID:  initPID,
		Writable: f.writable,
	}
	var fallback string
	if f.attribution != "proc" {
		dir := g.Path(cgroup.Unified)
		var b *attribution.BPFBackend
		err := errors.New("the sandbox's cgroup has no directory in a cgroup v2 hierarchy")
		if dir != "" {
			// The process tree holds every live process: twice what the
			// sandbox's pids limit allows (room for exits not yet seen).
			// --send-guard off: nothing is put under the guard either.
			b, err = attribution.NewBPFBackend(attribution.BPFConfig{CgroupPath: dir, Proc: pcfg,
				MaxProcs: int(min(max(2*g.Limits().Pids, 1024), 1<<20)), NoSendGuard: f.sendGuard == "off"})
		}
		if err == nil {
			emitBackend(events, src, log, attribution.BackendBPF, "")
			log.Debug("attribution through eBPF", "cgroup", dir, "init_pid", initPID)
			return b, func() { b.Close(); g.Close() }, nil
		}
		if f.attribution == "bpf" {
			g.Close()
			return nil, nil, fmt.Errorf("--attribution bpf: %w", err)
		}
		fallback = err.Error()
	}
	b, err := attribution.NewProcBackend(pcfg)
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	emitBackend(events, src, log, attribution.BackendProc, fallback)
	log.Debug("attribution scoped to the sandbox", "cgroup", f.cgroup, "init_pid", initPID)
	return b, func() { b.Close(); g.Close() }, nil
}

// sendGuard returns the send guard --send-guard asks for: the eBPF
// backend's when it is attached (nil with auto when it is not, or with
// off); with require, an error naming why it cannot hold connections.
// The state is reported as a Device Config State Change ("Send Guard").
func sendGuard(f *flags, attr attribution.Backend, events ocsf.Emitter, src *ocsf.Source, log *slog.Logger) (proxy.SendGuard, error) {
	if f.sendGuard == "off" {
		// The operator's opt-in to less protection is said, like a
		// guard that could not be had (sandbox mode: standalone has no
		// guard to turn off).
		if f.cgroup != "" {
			emitGuard(events, src, log, guardTurnedOff)
		}
		return nil, nil
	}
	var why error
	if b, ok := attr.(*attribution.BPFBackend); ok {
		if on, err := b.GuardActive(); on {
			emitGuard(events, src, log, "")
			return proxy.AttributionGuard{Backend: b}, nil
		} else {
			why = err
		}
	} else {
		why = errors.New("the /proc attribution backend cannot hold connections after the decision (it needs the eBPF backend's sk_msg program)")
	}
	if f.sendGuard == "require" {
		return nil, fmt.Errorf("--send-guard require: %v", why)
	}
	if f.cgroup != "" {
		emitGuard(events, src, log, why.Error())
	}
	return nil, nil
}

// guardTurnedOff is the Send Guard event's reason under --send-guard off.
const guardTurnedOff = "turned off by the operator (--send-guard off)"

// emitGuard reports whether decided connections are held to their
// process; degraded is why not ("" when they are).
func emitGuard(events ocsf.Emitter, src *ocsf.Source, log *slog.Logger, degraded string) {
	if degraded != "" {
		log.Warn("send guard unavailable: after the decision, a descriptor handed to another process could carry the decided process's rights (degraded)", "err", degraded)
	}
	if err := events.Emit(src.SendGuard(degraded)); err != nil {
		log.Warn("send guard event not written", "err", err)
	}
}

// emitBackend reports the attribution backend in force; fallback is why
// eBPF was not used when it was wanted ("" otherwise).
func emitBackend(events ocsf.Emitter, src *ocsf.Source, log *slog.Logger, backend, fallback string) {
	if fallback != "" {
		log.Warn("eBPF attribution unavailable; attributing through /proc", "err", fallback)
	}
	if err := events.Emit(src.AttributionBackend(backend, fallback != "", fallback)); err != nil {
		log.Warn("attribution backend event not written", "err", err)
	}
}

// allProcs lists every pid in /proc (standalone mode).
func allProcs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		n := 0
		for _, c := range e.Name() {
			if c < '0' || c > '9' {
				n = -1
				break
			}
			n = n*10 + int(c-'0')
		}
		if n > 0 {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// pathList is a repeatable flag of absolute paths.
type pathList []string

func (l *pathList) String() string { return strings.Join(*l, ",") }

func (l *pathList) Set(v string) error {
	if !filepath.IsAbs(v) {
		return fmt.Errorf("%q is not an absolute path", v)
	}
	*l = append(*l, filepath.Clean(v))
	return nil
}

// binaryNotes are the notes on a loaded policy's binaries (the
// standard PATH finds an "#!/usr/bin/env NAME" script's NAME).
func binaryNotes(p *policy.Policy) []binaries.Note { return binaries.Notes(p, binaries.Options{}) }
