//go:build !unix

package fsutil

import (
	"errors"
	"path/filepath"
)

var errNoOwners = errors.New("fsutil: file ownership checks are implemented for Unix only")

// ResolveTrusted is filepath.EvalSymlinks where owners cannot be checked;
// it refuses.
func ResolveTrusted(path string) (string, error) { return "", errNoOwners }

// OthersCanReplace cannot tell where owners are unknown; it refuses.
func OthersCanReplace(dir string) (string, error) { return "", errNoOwners }

// CheckDirsTrusted cannot tell where owners are unknown; it refuses.
func CheckDirsTrusted(dir string) error {
	_ = filepath.Clean(dir)
	return errNoOwners
}
