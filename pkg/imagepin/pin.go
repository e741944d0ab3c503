package imagepin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// Environment knobs of seed 000.
const (
	EnvPinFile     = "MAC_OPENSHELL_RUNTIME_IMAGE_REF_FILE"
	EnvCreateArgs  = "MAC_OPENSHELL_CREATE_ARGS"
	EnvVerifyImage = "MAC_HUB_VERIFY_IMAGE"
)

// DefaultRelPath is the pin's location below the home directory.
const DefaultRelPath = ".mac/openshell/runtime-image-ref"

// SidecarSuffix names the metadata file written beside the pin.
const SidecarSuffix = ".json"

// SidecarSchema identifies the sidecar's format.
const SidecarSchema = "palisade.image_pin.v1"

// Env looks up an environment variable (os.LookupEnv in the binaries).
type Env func(key string) (string, bool)

// MapEnv adapts a map to Env, for tests and callers that build their own
// environment.
func MapEnv(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func get(env Env, k string) string {
	v, _ := env(k)
	return v
}

// ErrNoPin reports that the pin file does not exist.
var ErrNoPin = errors.New("no sandbox-image pin")

// PinPath returns the pin file location: $MAC_OPENSHELL_RUNTIME_IMAGE_REF_FILE
// (a leading ~/ means $HOME) or ~/.mac/openshell/runtime-image-ref. An empty
// variable counts as unset. The result is always absolute.
func PinPath(env Env) (string, error) {
	home := get(env, "HOME")
	p := get(env, EnvPinFile)
	if p == "" {
		if home == "" {
			return "", fmt.Errorf("cannot locate the pin: %s and HOME are both unset", EnvPinFile)
		}
		return filepath.Join(home, DefaultRelPath), nil
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home == "" {
			return "", fmt.Errorf("%s=%q starts with ~ but HOME is unset", EnvPinFile, p)
		}
		p = filepath.Join(home, strings.TrimPrefix(p, "~"))
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s=%q must be an absolute path", EnvPinFile, p)
	}
	return filepath.Clean(p), nil
}

// Pin is the content of a pin file and its sidecar.
type Pin struct {
	Path        string `json:"path"`
	Ref         string `json:"ref"`
	Digest      string `json:"digest"`
	InputSHA256 string `json:"input_sha256,omitempty"`
	SetAt       string `json:"set_at,omitempty"`
	// SidecarProblem explains why the sidecar was ignored, if it was.
	SidecarProblem string `json:"sidecar_problem,omitempty"`
}

type sidecar struct {
	Schema      string `json:"schema"`
	Ref         string `json:"ref"`
	InputSHA256 string `json:"input_sha256,omitempty"`
	SetAt       string `json:"set_at"`
}

// Read loads the pin at path. A missing file is ErrNoPin (wrapped). The file
// must be a regular file not writable by group or others, holding exactly
// one reference with an @sha256 digest (surrounding whitespace and one
// trailing newline are tolerated). A sidecar whose ref differs from the pin
// is reported in SidecarProblem and its input sha is not used.
func Read(path string) (*Pin, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoPin, path)
	}
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("pin %s: not a regular file (%s)", path, st.Mode().Type())
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("pin %s: writable by group or others (mode %04o); fix with chmod go-w %s", path, st.Mode().Perm(), path)
	}
	if st.Size() > 4096 {
		return nil, fmt.Errorf("pin %s: %d bytes is too large for one image reference", path, st.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	text := strings.TrimSpace(string(data))
	if text == "" {
		return nil, fmt.Errorf("pin %s: empty; write one with image-pin set REF", path)
	}
	if strings.ContainsAny(text, "\n\r") {
		return nil, fmt.Errorf("pin %s: holds more than one line; it must hold exactly one image reference", path)
	}
	ref, err := ParsePinnedRef(text)
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	p := &Pin{Path: path, Ref: text, Digest: ref.Digest}
	sc, err := os.ReadFile(path + SidecarSuffix)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		p.SidecarProblem = fmt.Sprintf("sidecar %s unreadable: %v", path+SidecarSuffix, err)
	default:
		var s sidecar
		if err := json.Unmarshal(sc, &s); err != nil || s.Schema != SidecarSchema {
			p.SidecarProblem = fmt.Sprintf("sidecar %s is not a %s document; ignored", path+SidecarSuffix, SidecarSchema)
		} else if s.Ref != text {
			p.SidecarProblem = fmt.Sprintf("sidecar %s describes %s, not the pinned reference; ignored (re-run image-pin set)", path+SidecarSuffix, s.Ref)
		} else if s.InputSHA256 != "" && !ValidInputSHA256(s.InputSHA256) {
			p.SidecarProblem = fmt.Sprintf("sidecar %s: input_sha256 is not 64 lowercase hex digits; ignored", path+SidecarSuffix)
		} else {
			p.InputSHA256 = s.InputSHA256
			p.SetAt = s.SetAt
		}
	}
	return p, nil
}

// Write pins ref at path: the sidecar (path + ".json", recording the input
// sha256 if given) first, then the pin itself, each atomically, so the pin
// file changes last and a crash in between leaves a sidecar that Read
// recognises as stale. The parent directory is created with mode 0700 when
// missing. ref must carry an @sha256 digest; inputSHA256, when not empty,
// must be 64 lowercase hex digits.
func Write(path, ref, inputSHA256 string, now time.Time) (*Pin, error) {
	r, err := ParsePinnedRef(ref)
	if err != nil {
		return nil, err
	}
	if inputSHA256 != "" && !ValidInputSHA256(inputSHA256) {
		return nil, fmt.Errorf("--input-sha256 %q: want 64 lowercase hex digits", inputSHA256)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("pin %s: create directory: %w", path, err)
	}
	sc := sidecar{Schema: SidecarSchema, Ref: ref, InputSHA256: inputSHA256, SetAt: now.UTC().Format(time.RFC3339)}
	data, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(path+SidecarSuffix, append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("pin sidecar: %w", err)
	}
	if err := fsutil.WriteFileAtomic(path, []byte(ref+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("pin: %w", err)
	}
	return &Pin{Path: path, Ref: ref, Digest: r.Digest, InputSHA256: inputSHA256, SetAt: sc.SetAt}, nil
}
