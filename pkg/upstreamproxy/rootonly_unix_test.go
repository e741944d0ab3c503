//go:build unix

package upstreamproxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-sandbox/palisade/pkg/testutil"
)

// TestCredentialFileOwner: a credential file another user owns, or one
// reached through a link another user owns (and could re-point), is
// refused even at mode 0600: that user could read or replace it.
func TestCredentialFileOwner(t *testing.T) {
	testutil.RequireRoot(t)
	p := writeSecret(t, "alice:"+secret+"\n", 0o600)
	if err := os.Chown(p, 10001, 10001); err != nil {
		t.Fatal(err)
	}
	_, err := ReadCredentialFile(p)
	if err == nil || !strings.Contains(err.Error(), "is owned by uid 10001: want a root-only file") {
		t.Errorf("a file of uid 10001: %v", err)
	}
	mine := writeSecret(t, "alice:"+secret+"\n", 0o600)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 10001, 10001); err != nil {
		t.Fatal(err)
	}
	_, err = ReadCredentialFile(link)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 10001") || strings.Contains(err.Error(), secret) {
		t.Errorf("a link of uid 10001: %v", err)
	}
}
