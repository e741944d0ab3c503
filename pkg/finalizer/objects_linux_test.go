//go:build linux

package finalizer

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// packPair returns a real pack and its index (git repack of the fixture).
func packPair(t *testing.T) (pack, idx []byte) {
	t.Helper()
	f := newFixture(t, fixtureOpts{})
	f.git(f.repo, "repack", "-q", "-a", "-d")
	idxs, _ := filepath.Glob(filepath.Join(f.repo, ".git", "objects", "pack", "*.idx"))
	if len(idxs) != 1 {
		t.Fatalf("want one pack, got %q", idxs)
	}
	var err error
	if idx, err = os.ReadFile(idxs[0]); err != nil {
		t.Fatal(err)
	}
	if pack, err = os.ReadFile(strings.TrimSuffix(idxs[0], ".idx") + ".pack"); err != nil {
		t.Fatal(err)
	}
	return pack, idx
}

// TestCheckPackPair: a real pair passes; a wrong signature, version or
// count, a count the pack cannot hold, a decreasing fan-out table, an
// index of the wrong size or naming another pack is refused, naming the
// file at fault.
func TestCheckPackPair(t *testing.T) {
	t.Parallel()
	pack, idx := packPair(t)
	n := binary.BigEndian.Uint32(pack[8:12])
	mod := func(b []byte, f func([]byte)) []byte {
		c := append([]byte{}, b...)
		f(c)
		return c
	}
	for _, c := range []struct {
		name       string
		pack, idx  []byte
		wantPack   string
		wantIdx    string
		packSizeOf int64 // a larger size than the bytes (a sparse tail)
	}{
		{name: "real", pack: pack, idx: idx},
		{name: "signature", pack: mod(pack, func(b []byte) { b[0] = 'J' }), idx: idx, wantPack: "no PACK signature"},
		{name: "version", pack: mod(pack, func(b []byte) { b[7] = 9 }), idx: idx, wantPack: "pack version 9"},
		{name: "absurd count", pack: mod(pack, func(b []byte) { binary.BigEndian.PutUint32(b[8:], 1<<31) }), idx: idx, wantPack: "claims 2147483648 objects"},
		{name: "count differs", pack: mod(pack, func(b []byte) { binary.BigEndian.PutUint32(b[8:], n-1) }), idx: idx, wantIdx: "lists"},
		{name: "fan-out decreases", pack: pack, idx: mod(idx, func(b []byte) { binary.BigEndian.PutUint32(b[8+4*10:], 0xffff) }), wantIdx: "fan-out entry"},
		{name: "index size", pack: pack, idx: append(append([]byte{}, idx[:len(idx)-40]...), append(make([]byte, 3), idx[len(idx)-40:]...)...), wantIdx: "not the size of an index"},
		{name: "other pack", pack: mod(pack, func(b []byte) { b[len(b)-1] ^= 1 }), idx: idx, wantIdx: "names another pack"},
		{name: "index v1", pack: pack, idx: mod(idx, func(b []byte) { b[0] = 0 }), wantIdx: "not a version 2 pack index"},
		{name: "short", pack: pack[:10], idx: idx, wantPack: "too short"},
	} {
		pw, iw := checkPackPair(bytes.NewReader(c.pack), int64(len(c.pack)), bytes.NewReader(c.idx), int64(len(c.idx)), 20)
		if (c.wantPack == "") != (pw == "") || !strings.Contains(pw, c.wantPack) || (c.wantIdx == "") != (iw == "") || !strings.Contains(iw, c.wantIdx) {
			t.Errorf("%s: pack %q, index %q; want %q, %q", c.name, pw, iw, c.wantPack, c.wantIdx)
		}
	}
	if !looseHeaderOK([]byte{0x78, 0x01}) || !looseHeaderOK([]byte{0x78, 0x9c}) || looseHeaderOK([]byte{0x00, 0x00}) || looseHeaderOK([]byte("ro")) {
		t.Error("looseHeaderOK")
	}
}

// TestSparseAndForgedObjectsRefused: sparse files in .git (a sparse tail
// on the real pack, a sparse loose object, a sparse index) and a pack
// whose header lies are refused by name before anything is copied; many
// small sparse objects that each pass are refused together by the
// budget.
func TestSparseAndForgedObjectsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		plant func(f *fixture) string // returns the path the refusal names
		want  string
	}{
		{"sparse pack", func(f *fixture) string {
			f.git(f.repo, "repack", "-q", "-a", "-d")
			p, _ := filepath.Glob(filepath.Join(f.repo, ".git", "objects", "pack", "*.pack"))
			os.Truncate(p[0], 3<<30)
			return p[0]
		}, "a sparse file (3221225472 bytes"},
		{"sparse index", func(f *fixture) string {
			p := filepath.Join(f.repo, ".git", "index")
			os.Truncate(p, 512<<20)
			return p
		}, "a sparse file"},
		{"lying pack header", func(f *fixture) string {
			f.git(f.repo, "repack", "-q", "-a", "-d")
			p, _ := filepath.Glob(filepath.Join(f.repo, ".git", "objects", "pack", "*.pack"))
			fh, _ := os.OpenFile(p[0], os.O_WRONLY, 0)
			fh.WriteAt([]byte{0x7f, 0xff, 0xff, 0xff}, 8)
			fh.Close()
			return p[0]
		}, "claims 2147483647 objects"},
		{"many small sparse objects", func(f *fixture) string {
			for i := 0; i < 64; i++ {
				p := filepath.Join(f.repo, ".git", "objects", "ee", fmt.Sprintf("%038x", i))
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte{0x78, 0x01}, 0o444)
				os.Truncate(p, 60<<10)
			}
			return filepath.Join(f.repo, ".git")
		}, "occupy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, fixtureOpts{})
			path := c.plant(f)
			tmp := t.TempDir()
			env := append(append([]string{}, f.env...), "TMPDIR="+tmp)
			plan, err := Inspect(context.Background(), f.ws, Options{Env: env})
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(plan.Refusals, "\n")
			if plan.Recoverable || !strings.Contains(got, quotePath(path)) || !strings.Contains(got, c.want) {
				t.Errorf("refusals %q; want %s naming %s", plan.Refusals, c.want, path)
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
				t.Errorf("inspect left %d entries in TMPDIR", len(ents))
			}
		})
	}
}

// TestHardLinkedCloneRecovers (item 5): a workspace cloned from a local
// repository, as git clone does by default (hard links in .git/objects),
// is inspected and recovered: the objects are only read into the private
// mirror, where git fsck checks them. A hard link anywhere else in .git
// is still refused (TestSpecialFilesRefused).
func TestHardLinkedCloneRecovers(t *testing.T) {
	t.Parallel()
	if !hardLinkedObjectOK() {
		t.Fatal("fs.protected_hardlinks is not 1 on this host; hard-linked objects are refused here by design")
	}
	f := newFixture(t, fixtureOpts{hardLinks: true})
	linked := 0
	filepath.Walk(filepath.Join(f.repo, ".git", "objects"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Sys().(*syscall.Stat_t).Nlink > 1 {
			linked++
		}
		return nil
	})
	if linked == 0 {
		t.Fatal("the clone has no hard-linked objects; the test proves nothing")
	}
	o := f.opts()
	o.Execute = true
	_, rec, err := Recover(context.Background(), f.ws, o, nil)
	if err != nil || rec.Status != RecordPushed || f.remoteMain() != rec.PushedCommit {
		t.Fatalf("Recover = %v, record %+v (%d hard-linked objects)", err, rec, linked)
	}
}
