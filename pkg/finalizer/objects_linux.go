//go:build linux

package finalizer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// copySlack is the room the copy budget leaves beyond twice the disk
// space of what is copied: a few small files of the workspace may sit in
// their inodes (no block allocated), and the mirror's own config, HEAD
// and refs are written too.
const copySlack = 1 << 20

// copySlackPerFile covers a file stored inside its inode (ext4
// inline_data holds up to ~60 bytes, st_blocks 0).
const copySlackPerFile = 512

// repoCopy is what the mirror gets from the agent's .git: loose objects,
// complete pack/index pairs, the shallow file and the index, with their
// sizes and the disk space they occupy. It is planned, checked and
// budgeted before anything is copied.
type repoCopy struct {
	loose []string // "xx/yyyy..." below objects/
	packs []string // "pack/pack-X.pack" and its ".idx", below objects/
	other []string // "shallow", "index" (below .git), when present
	size  int64    // total bytes
	alloc int64    // total disk space they occupy in the workspace
	files int64
}

// planRepoCopy lists what the mirror gets, checks every pack against its
// index (checkPackPair) and the total against the budget: MaxObjectBytes
// of objects, twice the disk space the files occupy in the workspace
// plus copySlack (and copySlackPerFile per file), and the free space of
// the mirror's filesystem. So inspect writes at most about twice what
// the repository's objects and index really occupy, and refuses, naming
// the file or the budget, before writing anything larger.
func planRepoCopy(ctx context.Context, gitD *safeDir, hashLen int, tmp string) (*repoCopy, error) {
	c := &repoCopy{}
	add := func(d *safeDir, name string) (unix.Stat_t, error) {
		st, err := d.lstat(name)
		if err != nil {
			return st, fmt.Errorf("%s: %w", quotePath(d.join(name)), err)
		}
		c.size += st.Size
		c.alloc += st.Blocks * 512
		c.files++
		return st, nil
	}
	if od, err := gitD.openDir("objects"); err == nil {
		defer od.close()
		if err := c.planObjects(ctx, od, hashLen, add); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	objects := c.size
	if objects > MaxObjectBytes {
		return nil, &SpecialFileError{Path: gitD.join("objects"), What: fmt.Sprintf("%d bytes of objects, more than the %d allowed", objects, MaxObjectBytes)}
	}
	for _, name := range []string{"shallow", "index"} {
		if gitD.exists(name) {
			if _, err := add(gitD, name); err != nil {
				return nil, err
			}
			c.other = append(c.other, name)
		}
	}
	if c.size > 2*c.alloc+copySlack+copySlackPerFile*c.files {
		return nil, &SpecialFileError{Path: gitD.path, What: fmt.Sprintf("its objects and index hold %d bytes but occupy %d on disk (sparse files); copying them would write more than twice what the workspace holds", c.size, c.alloc)}
	}
	var fsst unix.Statfs_t
	if err := unix.Statfs(tmp, &fsst); err == nil {
		if free := int64(fsst.Bavail) * fsst.Bsize; c.size+copySlack > free {
			return nil, fmt.Errorf("the private mirror needs %d bytes in %s, which has %d free; point TMPDIR at a larger filesystem", c.size, quotePath(filepath.Dir(tmp)), free)
		}
	}
	return c, nil
}

func (c *repoCopy) planObjects(ctx context.Context, od *safeDir, hashLen int, add func(*safeDir, string) (unix.Stat_t, error)) error {
	names, err := od.names()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch {
		case len(name) == 2 && isHex(name):
			sd, err := od.openDir(name)
			if err != nil {
				return err
			}
			files, err := sd.names()
			for _, f := range files {
				if (len(f) == 38 || len(f) == 62) && isHex(f) {
					if _, err = add(sd, f); err != nil {
						break
					}
					c.loose = append(c.loose, name+"/"+f)
				}
			}
			sd.close()
			if err != nil {
				return err
			}
		case name == "pack":
			if err := c.planPacks(od, hashLen, add); err != nil {
				return err
			}
		}
	}
	return nil
}

// planPacks keeps the complete pack/index pairs (git ignores the others)
// and checks each pair before it is counted.
func (c *repoCopy) planPacks(od *safeDir, hashLen int, add func(*safeDir, string) (unix.Stat_t, error)) error {
	pd, err := od.openDir("pack")
	if err != nil {
		return err
	}
	defer pd.close()
	files, err := pd.names()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f] = true
	}
	for _, f := range files {
		base, ok := strings.CutSuffix(f, ".pack")
		if !ok || !strings.HasPrefix(f, "pack-") || !have[base+".idx"] {
			continue
		}
		if err := checkPackFiles(pd, f, base+".idx", hashLen); err != nil {
			return err
		}
		for _, n := range []string{f, base + ".idx"} {
			if _, err := add(pd, n); err != nil {
				return err
			}
			c.packs = append(c.packs, "pack/"+n)
		}
	}
	return nil
}

// checkPackFiles opens a pack and its index (no symlink, regular, not
// sparse, bounded) and checks them with checkPackPair, naming the file at
// fault.
func checkPackFiles(pd *safeDir, pack, idx string, hashLen int) error {
	pf, psize, err := pd.openObject(pack, MaxObjectBytes)
	if err != nil {
		return err
	}
	defer pf.Close()
	xf, xsize, err := pd.openObject(idx, MaxObjectBytes)
	if err != nil {
		return err
	}
	defer xf.Close()
	packWhy, idxWhy := checkPackPair(pf, psize, xf, xsize, hashLen)
	switch {
	case packWhy != "":
		return &SpecialFileError{Path: pd.join(pack), What: packWhy}
	case idxWhy != "":
		return &SpecialFileError{Path: pd.join(idx), What: idxWhy}
	}
	return nil
}

// copy copies the planned files into the mirror m: objects below its
// objects/, the shallow file beside them, the index to m.index. Each file
// is opened again (descriptor-relative, checked) and may not grow beyond
// the size planned: the budget holds whatever changes meanwhile.
func (c *repoCopy) copy(ctx context.Context, gitD *safeDir, m *mirror) error {
	budget := c.size
	objects := filepath.Join(m.gitDir, "objects")
	od, err := gitD.openDir("objects")
	if err != nil && len(c.loose)+len(c.packs) > 0 {
		return err
	}
	defer od.close()
	for _, rel := range append(append([]string{}, c.loose...), c.packs...) {
		sub, name := filepath.Split(rel)
		if err := os.MkdirAll(filepath.Join(objects, sub), 0o700); err != nil {
			return err
		}
		n, err := copyObject(ctx, od, sub, name, filepath.Join(objects, rel), budget, strings.HasPrefix(rel, "pack/"))
		if err != nil {
			return err
		}
		budget -= n
	}
	for _, name := range c.other {
		dst := filepath.Join(m.gitDir, name)
		max := int64(maxShallowBytes)
		if name == "index" {
			dst, max = m.index, maxIndexBytes
		}
		n, err := gitD.copyFile(ctx, name, dst, min(max, budget))
		if err != nil {
			return err
		}
		budget -= n
	}
	return nil
}

// copyObject copies one loose object or pack file (hard links allowed:
// openObject) within max bytes; a loose object must start a zlib stream.
func copyObject(ctx context.Context, od *safeDir, sub, name, dst string, max int64, pack bool) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	sd, err := od.openDir(strings.TrimSuffix(sub, "/"))
	if err != nil {
		return 0, err
	}
	defer sd.close()
	f, _, err := sd.openObject(name, max)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if !pack {
		hdr := make([]byte, 2)
		if _, err := f.ReadAt(hdr, 0); err != nil || !looseHeaderOK(hdr) {
			return 0, &SpecialFileError{Path: sd.join(name), What: "not a loose object (no zlib header)"}
		}
	}
	return copyOpened(f, dst, 0o600, max)
}
