package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// DefaultPath is the standard PATH: the end of every sandboxed command's
// PATH (see SandboxPath).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultHome is HOME inside a sandbox without --home: a directory of the
// sandbox's own, kept in its state directory (HomeDir) and bound here.
// The sandbox's /run is a fresh filesystem, so the path is the same in
// every sandbox and names nothing of the host.
const DefaultHome = "/run/palisade/home"

// SandboxPath is the PATH a sandboxed command starts with: the caller's
// PATH entries that lie at or under one of the policy's read_only paths,
// in the caller's order (so /usr/local/go/bin survives when /usr is
// read-only), then the entries of DefaultPath not already there. A
// relative entry, or one the sandbox could write or cannot read, is
// dropped.
func SandboxPath(callerPath string, readOnly []string) string {
	var out []string
	seen := map[string]bool{}
	add := func(dir string) {
		if !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
	}
	for _, dir := range strings.Split(callerPath, ":") {
		if !filepath.IsAbs(dir) {
			continue
		}
		dir = filepath.Clean(dir)
		for _, ro := range readOnly {
			if filepath.IsAbs(ro) && under(dir, ro) {
				add(dir)
				break
			}
		}
	}
	for _, dir := range strings.Split(DefaultPath, ":") {
		add(dir)
	}
	return strings.Join(out, ":")
}

// DefaultPassthrough is the MAC_OPENSHELL_ENV_PASSTHROUGH default (seed
// 000: "hub+gateway vars").
var DefaultPassthrough = []string{"MAC_HUB_URL", "MAC_GATEWAY_URL", "MAC_AGENT_ID", "MAC_TASK_ID"}

// ReservedEnv are variables the supervisor owns. Neither --env nor the
// passthrough list can set them, in any case (isReserved): a later layer
// points the proxy variables at the sandbox's egress proxy, and the agent
// must not redirect them.
var ReservedEnv = map[string]bool{
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "ALL_PROXY": true, "NO_PROXY": true,
	"http_proxy": true, "https_proxy": true, "all_proxy": true, "no_proxy": true,
	"PALISADE_SANDBOX": true,
	// The trust bundle variables (see CAEnvVars).
	"SSL_CERT_FILE": true, "REQUESTS_CA_BUNDLE": true, "CURL_CA_BUNDLE": true,
	"NODE_EXTRA_CA_CERTS": true, "GIT_SSL_CAINFO": true, "PIP_CERT": true,
}

// EnvInput is what the sandbox environment is rebuilt from.
type EnvInput struct {
	Host        []string // the supervisor's own environment (os.Environ())
	Set         []string // --env K=V, in order; later wins
	Passthrough []string // names copied from Host when set there
	Workdir     string
	// Home is HOME in the sandbox: --home, or "" for DefaultHome.
	Home string
	// ReadOnly are the policy's read_only paths: the caller's PATH
	// entries under them are kept (SandboxPath).
	ReadOnly []string
	Name     string
	TTY      bool
	Profile  string
	Reserved []string // K=V pairs the supervisor sets (proxy variables)
	// Secrets name variables that neither the passthrough list nor --env
	// may set: the credentials' keys (Reserved gives them their
	// placeholders) and the variables of Host their values come from.
	Secrets []string
}

// BuildEnv clears the environment and rebuilds it: a safe base, then the
// passthrough names, then --env, then the reserved supervisor variables.
// Nothing else from the supervisor's environment reaches the sandbox.
func BuildEnv(in EnvInput) ([]string, error) {
	host := map[string]string{}
	for _, kv := range in.Host {
		if k, v, ok := strings.Cut(kv, "="); ok {
			host[k] = v
		}
	}
	env := map[string]string{
		"PATH":             SandboxPath(host["PATH"], in.ReadOnly),
		"HOME":             SandboxHome(in.Home),
		"USER":             "sandbox",
		"LOGNAME":          "sandbox",
		"SHELL":            "/bin/sh",
		"LANG":             "C.UTF-8",
		"TMPDIR":           "/tmp",
		"PALISADE_SANDBOX": in.Name,
	}
	if in.TTY {
		env["TERM"] = "xterm"
		if t := host["TERM"]; t != "" && validEnvValue(t) {
			env["TERM"] = t
		}
	}
	if in.Profile == ProfileBoundedTmpfs {
		env["MAC_TEST_PG_DATADIR"] = BoundedStoragePath + "/mac-test-pgdata"
		env["MAC_TEST_JOBS"] = BoundedJobs
		env["TMPDIR"] = strings.TrimSuffix(in.Workdir, "/") + "/test-scratch"
	}
	for _, k := range in.Passthrough {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if !validEnvName(k) {
			return nil, fmt.Errorf("--env-passthrough: %q is not a valid variable name", k)
		}
		if isReserved(k) {
			return nil, fmt.Errorf("--env-passthrough: %s is reserved by the supervisor", k)
		}
		if slices.Contains(in.Secrets, k) {
			return nil, fmt.Errorf("--env-passthrough: %s holds or names a credential (--credentials); the sandbox gets its placeholder, never a value", k)
		}
		if v, ok := host[k]; ok {
			env[k] = v
		}
	}
	for _, kv := range in.Set {
		k, v, err := parseSetVar(kv)
		if err != nil {
			return nil, err
		}
		if slices.Contains(in.Secrets, k) {
			return nil, fmt.Errorf("--env %s: holds or names a credential (--credentials); the sandbox gets its placeholder", k)
		}
		env[k] = v
	}
	for _, kv := range in.Reserved {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// parseSetVar checks one --env K=V: a valid name, not reserved by the
// supervisor, no NUL in the value.
func parseSetVar(kv string) (string, string, error) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || !validEnvName(k) {
		return "", "", fmt.Errorf("--env %q: want NAME=VALUE with a valid NAME", kv)
	}
	if isReserved(k) {
		return "", "", fmt.Errorf("--env %s: reserved by the supervisor and cannot be overridden", k)
	}
	if strings.ContainsRune(v, 0) {
		return "", "", fmt.Errorf("--env %s: value contains a NUL byte", k)
	}
	return k, v, nil
}

// ExecEnv is an exec's environment: the sandbox's own (which carries the
// reserved variables), with set (--env K=V, later wins) on top. A
// reserved name is refused, so an exec cannot redirect the proxy
// variables or the trust bundle.
func ExecEnv(base, set []string) ([]string, error) {
	if len(set) == 0 {
		return base, nil
	}
	extra := make([]string, 0, len(set))
	for _, kv := range set {
		k, v, err := parseSetVar(kv)
		if err != nil {
			return nil, err
		}
		extra = append(extra, k+"="+v)
	}
	return mergeEnv(slices.Clone(base), extra), nil
}

// isReserved reports whether k names a reserved variable in any case:
// clients differ in which case of a proxy variable they read (Python's
// urllib lowercases every *_proxy name), so Http_Proxy is refused like
// HTTP_PROXY.
func isReserved(k string) bool { return ReservedEnv[strings.ToUpper(k)] }

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func validEnvValue(v string) bool { return !strings.ContainsAny(v, "\x00\n") }

// mergeEnv sets extra's K=V pairs in env, replacing a variable of the
// same name.
func mergeEnv(env, extra []string) []string {
	if len(extra) == 0 {
		return env
	}
	idx := map[string]int{}
	for i, kv := range env {
		k, _, _ := cutEnv(kv)
		idx[k] = i
	}
	for _, kv := range extra {
		k, _, _ := cutEnv(kv)
		if i, ok := idx[k]; ok {
			env[i] = kv
		} else {
			idx[k] = len(env)
			env = append(env, kv)
		}
	}
	return env
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}
