//go:build !linux

package finalizer

import (
	"context"
	"errors"
	"os"
)

// errNoSafeFS: the no-follow, descriptor-relative reads recovery relies on
// are implemented for Linux only.
var errNoSafeFS = errors.New("finalizer: workspace inspection is supported on Linux only")

type safeDir struct{ path string }

type statT struct{}

func openWorkspaceDir(string) (*safeDir, error)                       { return nil, errNoSafeFS }
func (d *safeDir) close()                                             {}
func (d *safeDir) join(name string) string                            { return d.path + "/" + name }
func (d *safeDir) procPath() string                                   { return d.path }
func (d *safeDir) openDir(string) (*safeDir, error)                   { return nil, errNoSafeFS }
func (d *safeDir) readFile(string, int64) ([]byte, error)             { return nil, errNoSafeFS }
func (d *safeDir) openRegular(string, int64) (*os.File, int64, error) { return nil, 0, errNoSafeFS }
func (d *safeDir) exists(string) bool                                 { return false }
func (d *safeDir) copyFile(context.Context, string, string, int64) (int64, error) {
	return 0, errNoSafeFS
}
func (d *safeDir) snapshotPath(context.Context, string, string, int64) (int64, error) {
	return 0, errNoSafeFS
}
func (d *safeDir) names() ([]string, error)                            { return nil, errNoSafeFS }
func (d *safeDir) sameDir(string, *safeDir) bool                       { return false }
func (d *safeDir) ownedBy(int) bool                                    { return false }
func (d *safeDir) changeableByOthers() string                          { return errNoSafeFS.Error() }
func checkLocalRemote(context.Context, string, string) (string, error) { return "", errNoSafeFS }

type repoCopy struct{}

func planRepoCopy(context.Context, *safeDir, int, string) (*repoCopy, error) { return nil, errNoSafeFS }
func (c *repoCopy) copy(context.Context, *safeDir, *mirror) error            { return errNoSafeFS }
func scanGitDir(context.Context, *safeDir) ([]string, error)                 { return nil, errNoSafeFS }
func scanWorkTree(context.Context, *safeDir) ([]string, error)               { return nil, errNoSafeFS }
