package credentials

import (
	"encoding/json"
	"fmt"
	"io"
)

// maxEnvSnapshot bounds an environment snapshot: every credential at its
// largest, with room for names and quoting.
const maxEnvSnapshot = MaxKeys * (2*MaxValueLen + 2*MaxKeyLen)

// EncodeEnv is the snapshot of the environment variables names (those
// lookup finds) that sandbox-supervisor hands its egress proxy on an
// inherited descriptor (--credentials-env-fd): the proxy's own
// environment and command line never hold a value.
func EncodeEnv(names []string, lookup func(string) (string, bool)) []byte {
	m := make(map[string]string, len(names))
	for _, n := range names {
		if v, ok := lookup(n); ok {
			m[n] = v
		}
	}
	b, _ := json.Marshal(m) // a map of strings always marshals
	return b
}

// DecodeEnv reads a snapshot EncodeEnv wrote; its Lookup resolves the
// credentials file's env sources.
func DecodeEnv(r io.Reader) (EnvSnapshot, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxEnvSnapshot+1))
	if err != nil {
		return nil, fmt.Errorf("credentials environment: %w", err)
	}
	defer clear(b)
	if len(b) > maxEnvSnapshot {
		return nil, fmt.Errorf("credentials environment: larger than %d bytes", maxEnvSnapshot)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("credentials environment: not a JSON object of strings")
	}
	return EnvSnapshot(m), nil
}

// EnvSnapshot is a set of environment variables' values.
type EnvSnapshot map[string]string

// Lookup is os.LookupEnv over the snapshot.
func (e EnvSnapshot) Lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}
