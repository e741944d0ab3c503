package attribution

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/palisade-sandbox/palisade/pkg/fsutil"
)

// DefaultMaxPins bounds a Pinner when NewPinner is given 0.
const DefaultMaxPins = 10000

// pinFileVersion is the version of the pin file format.
const pinFileVersion = 1

// ErrMismatch is matched (errors.Is) by every *MismatchError.
var ErrMismatch = errors.New("attribution: binary hash differs from its pinned hash")

// ErrTooManyPins: the Pinner is full; new binaries are refused.
var ErrTooManyPins = errors.New("attribution: too many pinned binaries")

// MismatchError says an executable path now has a different sha256 than
// the one pinned when it was first seen.
type MismatchError struct {
	Path   string
	Pinned string // hex sha256 pinned first
	Seen   string // hex sha256 seen now
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("attribution: binary %s changed: sha256 %s was pinned on first use, now %s", e.Path, e.Pinned, e.Seen)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// Pinner pins, per sandbox, the first sha256 seen for each executable
// path (trust on first use). With a file it survives a proxy restart.
// Safe for concurrent use.
type Pinner struct {
	path string // "" keeps pins in memory only
	max  int

	mu   sync.Mutex
	pins map[string]string
}

type pinFile struct {
	Version int               `json:"version"`
	Pins    map[string]string `json:"pins"`
}

// NewPinner returns a Pinner holding at most maxPins paths (0:
// DefaultMaxPins). With a non-empty file (in the sandbox's state
// directory) it loads the pins saved there, if the file exists, and saves
// every new pin to it atomically (mode 0600) before Pin returns. A file
// that cannot be parsed is an error, never an empty pin set.
func NewPinner(file string, maxPins int) (*Pinner, error) {
	if maxPins < 0 {
		return nil, fmt.Errorf("attribution: pinner maxPins %d: must not be negative", maxPins)
	}
	if maxPins == 0 {
		maxPins = DefaultMaxPins
	}
	p := &Pinner{path: file, max: maxPins, pins: map[string]string{}}
	if file == "" {
		return p, nil
	}
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("attribution: read pin file: %w", err)
	}
	var pf pinFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pf); err != nil {
		return nil, fmt.Errorf("attribution: pin file %s: %w", file, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("attribution: pin file %s: trailing data after the JSON object", file)
	}
	if pf.Version != pinFileVersion {
		return nil, fmt.Errorf("attribution: pin file %s: version %d, want %d", file, pf.Version, pinFileVersion)
	}
	if len(pf.Pins) > maxPins {
		return nil, fmt.Errorf("attribution: pin file %s: %d pins, more than the limit %d", file, len(pf.Pins), maxPins)
	}
	for path, sum := range pf.Pins {
		if err := checkPin(path, sum); err != nil {
			return nil, fmt.Errorf("attribution: pin file %s: pins[%q]: %w", file, path, err)
		}
		p.pins[path] = sum
	}
	return p, nil
}

func checkPin(exePath, sum string) error {
	if exePath == "" || exePath[0] != '/' || strings.IndexByte(exePath, 0) >= 0 {
		return fmt.Errorf("exe path %q: want an absolute path", exePath)
	}
	if len(sum) != sha256HexLen {
		return fmt.Errorf("sha256 %q: want %d lowercase hex digits", sum, sha256HexLen)
	}
	for _, c := range sum {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("sha256 %q: want %d lowercase hex digits", sum, sha256HexLen)
		}
	}
	return nil
}

const sha256HexLen = 64

// Pin records sum for exePath if the path has no pin yet and returns nil
// when the pin (new or old) equals sum. A different pinned sum returns a
// *MismatchError. When the Pinner is full, a new path returns
// ErrTooManyPins; when the new pin cannot be saved, it is not kept and the
// error is returned, so the caller denies and a later Pin tries again.
func (p *Pinner) Pin(exePath, sum string) error {
	if err := checkPin(exePath, sum); err != nil {
		return fmt.Errorf("attribution: pin: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pinned, ok := p.pins[exePath]; ok {
		if pinned != sum {
			return &MismatchError{Path: exePath, Pinned: pinned, Seen: sum}
		}
		return nil
	}
	if len(p.pins) >= p.max {
		return fmt.Errorf("%w: %d pinned, refusing %s", ErrTooManyPins, len(p.pins), exePath)
	}
	p.pins[exePath] = sum
	if err := p.saveLocked(); err != nil {
		delete(p.pins, exePath)
		return err
	}
	return nil
}

// Pinned returns the pinned sum of exePath.
func (p *Pinner) Pinned(exePath string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.pins[exePath]
	return s, ok
}

// Pins returns a copy of every pin, path to hex sha256.
func (p *Pinner) Pins() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.pins))
	for k, v := range p.pins {
		out[k] = v
	}
	return out
}

func (p *Pinner) saveLocked() error {
	if p.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(pinFile{Version: pinFileVersion, Pins: p.pins}, "", "  ")
	if err != nil {
		return fmt.Errorf("attribution: save pins: %w", err)
	}
	if err := fsutil.WriteFileAtomic(p.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("attribution: save pins: %w", err)
	}
	return nil
}
