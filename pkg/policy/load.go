package policy

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/palisade-sandbox/palisade/policies"
)

// LoadFile reads and parses the policy at path. Validation problems come
// back as Errors (wrapped with the file name; see AsErrors).
func LoadFile(path string) (*Policy, error) {
	data, err := readPolicyFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		if te := templateError(path, data, err); te != nil {
			return nil, te
		}
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// readPolicyFile reads a regular file of at most MaxPolicySize bytes.
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("policy: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("policy: %s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	if len(data) > MaxPolicySize {
		return nil, fmt.Errorf("policy: %s is larger than %d bytes", path, MaxPolicySize)
	}
	return data, nil
}

var defaultPolicy = sync.OnceValue(func() *Policy {
	p, err := Parse(policies.DefaultPolicy)
	if err != nil {
		// The file is embedded at build time and tested; a broken one must
		// never silently turn into "no policy".
		panic("policy: bundled " + policies.DefaultPolicyFile + " is invalid: " + err.Error())
	}
	return p
})

// Default returns the bundled fail-closed default policy
// (policies/default-policy.yaml), parsed once. Each call returns a fresh
// copy the caller may modify.
func Default() *Policy { return defaultPolicy().Clone() }

// DefaultRaw returns the bundled default policy's YAML text.
func DefaultRaw() []byte { return append([]byte(nil), policies.DefaultPolicy...) }

// CheckWorkdir applies, for the working directory a sandbox is about to
// use, the rule Parse can only apply to explicit read_write paths: when
// include_workdir is true, no binary pattern may match a file at or under
// workdir, since the agent could replace it. It also rejects a workdir
// that is not absolute or is "/". The supervisor calls it before creating
// a sandbox; the result is an Errors.
func (p *Policy) CheckWorkdir(workdir string) error {
	if !p.Filesystem.IncludeWorkdir {
		return nil
	}
	const field = "filesystem_policy.include_workdir"
	if !filepath.IsAbs(workdir) {
		return Errors{{Path: field, Msg: fmt.Sprintf("working directory %q must be absolute", workdir)}}
	}
	wd := path.Clean(workdir)
	if wd == "/" {
		return Errors{{Path: field, Msg: `working directory "/" would make the whole filesystem writable`}}
	}
	var errs Errors
	for _, key := range sortedKeys(p.NetworkPolicies) {
		for i, b := range p.NetworkPolicies[key].Binaries {
			if binaryMayLieUnder(b.Path, wd) {
				errs = append(errs, &FieldError{
					Path: fmt.Sprintf("%s.binaries[%d].path", keyPath("network_policies", key), i),
					Msg:  fmt.Sprintf("%s can match files under the working directory %s, which include_workdir makes writable; the agent could replace the binary", b.Path, wd),
				})
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}
