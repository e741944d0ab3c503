package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/palisade-sandbox/palisade/pkg/credentials"
	"github.com/palisade-sandbox/palisade/pkg/policy"
)

// runCredentials is what run makes of --credentials: the file checked
// (root's, mode 0600 or 0400), every value resolved (env sources from
// this process's environment), the policy checked against it. The
// sandbox gets placeholders; the proxy gets the file's path and the env
// sources' values on a pipe.
type runCredentials struct {
	path  string
	file  *credentials.File
	store *credentials.Store
}

func loadRunCredentials(path string, pol *policy.Policy) (*runCredentials, error) {
	store, err := credentials.Load(path, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("--credentials: %w", err)
	}
	if err := credentials.CheckPolicy(pol, store.File()); err != nil {
		return nil, fmt.Errorf("--credentials %s and the policy disagree: %w", path, err)
	}
	return &runCredentials{path: path, file: store.File(), store: store}, nil
}

// placeholders are the sandbox's KEY=openshell:resolve:env:KEY variables.
func (rc *runCredentials) placeholders() []string {
	if rc == nil {
		return nil
	}
	var out []string
	for _, k := range rc.file.Keys() {
		out = append(out, k+"="+credentials.Placeholder(k))
	}
	return out
}

// secrets are the variables no --env or passthrough may set: the keys
// and the variables the values come from.
func (rc *runCredentials) secrets() []string {
	if rc == nil {
		return nil
	}
	return append(rc.file.Keys(), rc.file.EnvNames()...)
}

// checkEnv refuses a sandbox environment that holds a credential's value
// under any name (an operator's variable that happens to carry it).
func (rc *runCredentials) checkEnv(env []string) error {
	if rc == nil {
		return nil
	}
	for _, kv := range env {
		name, v, _ := strings.Cut(kv, "=")
		if k := rc.store.Find(v); k != "" {
			return fmt.Errorf("the sandbox's variable %s would hold the value of credential %s (--credentials %s); the sandbox gets placeholders only", name, k, rc.path)
		}
	}
	return nil
}

// proxyEnv is the snapshot of the env sources' values the proxy reads.
func (rc *runCredentials) proxyEnv() []byte {
	return credentials.EncodeEnv(rc.file.EnvNames(), os.LookupEnv)
}
