package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/palisade-sandbox/palisade/policies"
)

// EnvPolicy is the environment variable naming an explicit policy file
// (seed 000). When set it must exist.
const EnvPolicy = "MAC_OPENSHELL_POLICY"

// HomePolicyPath is the operator-filled fleet policy, relative to $HOME.
const HomePolicyPath = ".mac/openshell-policy.yaml"

// Source says where a resolved policy came from.
type Source string

// Policy sources, strongest first.
const (
	SourceFlag    Source = "flag"    // --policy
	SourceEnv     Source = "env"     // MAC_OPENSHELL_POLICY
	SourceHome    Source = "home"    // ~/.mac/openshell-policy.yaml
	SourceBundled Source = "bundled" // embedded policies/default-policy.yaml
)

// ResolveOptions are the inputs of the resolution order.
type ResolveOptions struct {
	// Flag is the value of an explicit --policy flag ("" when absent).
	Flag string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Home is the home directory; "" means Getenv("HOME"). When both are
	// empty the home source is skipped.
	Home string
}

// Resolved is the policy a sandbox would use and why.
type Resolved struct {
	Policy *Policy `json:"-"`
	Source Source  `json:"source"`
	// Path is the file read, or "bundled:default-policy.yaml".
	Path string `json:"path"`
	// Reason is a human sentence explaining why this source won.
	Reason string `json:"reason"`
	// Raw is the policy text as read.
	Raw []byte `json:"-"`
}

// Resolve picks the policy a sandbox uses, in seed 000's order: the
// explicit --policy flag, then MAC_OPENSHELL_POLICY (which must exist),
// then ~/.mac/openshell-policy.yaml when it exists, then the bundled
// fail-closed default. A chosen source that is missing (flag, env),
// unreadable or invalid is an error; resolution never falls through to a
// weaker source because a stronger one is broken.
func Resolve(opts ResolveOptions) (*Resolved, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	env := getenv(EnvPolicy)
	if opts.Flag != "" {
		reason := "the --policy flag names it explicitly"
		if env != "" {
			reason += fmt.Sprintf(" (it takes precedence over %s=%s)", EnvPolicy, env)
		}
		return resolveFile(SourceFlag, opts.Flag, reason, "--policy")
	}
	if env != "" {
		return resolveFile(SourceEnv, env, fmt.Sprintf("%s is set; an explicit policy wins over file fallback", EnvPolicy), EnvPolicy)
	}
	home := opts.Home
	if home == "" {
		home = getenv("HOME")
	}
	var skipped string
	if home != "" {
		hp := filepath.Join(home, HomePolicyPath)
		if _, err := os.Lstat(hp); err == nil {
			return resolveFile(SourceHome, hp, fmt.Sprintf("no --policy flag and %s is unset; the operator-filled fleet policy %s exists", EnvPolicy, hp), "")
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("policy: home policy %s: %w", hp, err)
		}
		skipped = hp + " does not exist"
	} else {
		skipped = "HOME is unset, so there is no ~/" + HomePolicyPath
	}
	p, err := Parse(policies.DefaultPolicy)
	if err != nil {
		return nil, fmt.Errorf("policy: bundled default: %w", err)
	}
	return &Resolved{
		Policy: p,
		Source: SourceBundled,
		Path:   "bundled:" + policies.DefaultPolicyFile,
		Reason: fmt.Sprintf("no --policy flag, %s is unset and %s; using the bundled fail-closed default (all egress denied)", EnvPolicy, skipped),
		Raw:    DefaultRaw(),
	}, nil
}

func resolveFile(src Source, path, reason, origin string) (*Resolved, error) {
	data, err := readPolicyFile(path)
	if err != nil {
		if origin != "" && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("policy: %s names %s, which does not exist (an explicit policy must exist; refusing to fall back)", origin, path)
		}
		if origin != "" {
			return nil, fmt.Errorf("policy: %s names %s: %w", origin, path, err)
		}
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		if te := templateError(path, data, err); te != nil {
			return nil, te
		}
		what := path
		if origin != "" {
			what = fmt.Sprintf("%s (from %s)", path, origin)
		}
		return nil, fmt.Errorf("policy %s: %w", what, err)
	}
	return &Resolved{Policy: p, Source: src, Path: path, Reason: reason, Raw: data}, nil
}
