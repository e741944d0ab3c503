package egress

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// Limits bound derivation over an untrusted working tree. Zero fields take
// the defaults of DefaultLimits.
type Limits struct {
	MaxDepth      int   // directory levels below the root that are searched
	MaxEntries    int   // directory entries examined in total
	MaxFiles      int   // recognised files parsed
	MaxFileSize   int64 // bytes per file; larger files are skipped
	MaxTotalBytes int64 // bytes read over all files
	MaxHosts      int   // distinct (host, file) candidates kept
}

// DefaultLimits are the bounds Derive applies when Limits fields are zero.
var DefaultLimits = Limits{
	MaxDepth:      8,
	MaxEntries:    100_000,
	MaxFiles:      256,
	MaxFileSize:   32 << 20,
	MaxTotalBytes: 256 << 20,
	MaxHosts:      4096,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxDepth > 0 {
		d.MaxDepth = l.MaxDepth
	}
	if l.MaxEntries > 0 {
		d.MaxEntries = l.MaxEntries
	}
	if l.MaxFiles > 0 {
		d.MaxFiles = l.MaxFiles
	}
	if l.MaxFileSize > 0 {
		d.MaxFileSize = l.MaxFileSize
	}
	if l.MaxTotalBytes > 0 {
		d.MaxTotalBytes = l.MaxTotalBytes
	}
	if l.MaxHosts > 0 {
		d.MaxHosts = l.MaxHosts
	}
	return d
}

// skipDirs are never descended into: version control metadata and
// installed dependency trees are not the repository's own declaration.
var skipDirs = map[string]bool{".git": true, ".hg": true, ".svn": true, "node_modules": true, ".venv": true}

// Candidate is one host a repository file proposes, or a reference that
// could not be turned into a grantable host (Reason set).
type Candidate struct {
	Host      string // lower-case host; for refusals, what may be reported of it
	File      string // slash-separated path relative to the repository root
	Line      int    // 1-based line of the first reference, 0 when unknown
	Kind      Kind
	Reason    Reason // non-empty: refused before classification
	Detail    string
	ecosystem string
}

// Source is "file:line" (or "file").
func (c Candidate) Source() string {
	if c.Line > 0 {
		return fmt.Sprintf("%s:%d", c.File, c.Line)
	}
	return c.File
}

// Skip is a file or directory derivation did not read, and why.
type Skip struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Derivation is what a repository proposes.
type Derivation struct {
	Candidates []Candidate
	Files      []string // recognised files parsed, in search order
	Skipped    []Skip
}

// Derive searches the working tree at repo (breadth-first, so files near
// the root are read first when a limit is hit) for the files of Kinds and
// extracts the registry hosts they name. The tree is untrusted: symbolic
// links are never followed (a link with a recognised name is reported as
// skipped), nothing outside repo can be opened, only regular files are
// read, and every limit is enforced. Files that cannot be read or parsed
// are reported in Skipped (a partial parse keeps what it found); only a
// repo that cannot be opened at all is an error. Skipping never grants
// anything: it can only leave a host ungranted.
func Derive(repo string, lim Limits) (*Derivation, error) {
	lim = lim.withDefaults()
	st, err := os.Stat(repo)
	if err != nil {
		return nil, fmt.Errorf("egress: repository: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("egress: repository %s is not a directory", repo)
	}
	root, err := os.OpenRoot(repo)
	if err != nil {
		return nil, fmt.Errorf("egress: repository: %w", err)
	}
	defer root.Close()

	d := &Derivation{}
	type key struct{ host, file string }
	seen := map[key]bool{}
	hostsFull := false
	var totalBytes int64
	entries := 0
	type dir struct {
		rel   string
		depth int
	}
	queue := []dir{{".", 0}}
	skip := func(p, why string) {
		if len(d.Skipped) < 256 {
			d.Skipped = append(d.Skipped, Skip{Path: p, Reason: why})
		}
	}
	var files []string
	stopped := false
	for len(queue) > 0 && !stopped {
		cur := queue[0]
		queue = queue[1:]
		f, err := root.Open(cur.rel)
		if err != nil {
			skip(cur.rel, "cannot open directory: "+errText(err))
			continue
		}
		for !stopped {
			batch, err := f.ReadDir(256)
			for _, e := range batch {
				entries++
				if entries > lim.MaxEntries {
					skip(cur.rel, fmt.Sprintf("stopped: more than %d directory entries", lim.MaxEntries))
					stopped = true
					break
				}
				rel := path.Join(cur.rel, e.Name())
				switch t := e.Type(); {
				case t.IsDir():
					if skipDirs[e.Name()] {
						continue
					}
					if cur.depth+1 > lim.MaxDepth {
						continue
					}
					queue = append(queue, dir{rel, cur.depth + 1})
				case KindOf(rel) == kindNone:
				case t&fs.ModeSymlink != 0:
					skip(rel, "symbolic link not followed")
				case !t.IsRegular():
					skip(rel, "not a regular file")
				default:
					files = append(files, rel)
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					skip(cur.rel, "cannot list directory: "+errText(err))
				}
				break
			}
		}
		f.Close()
	}

	// Directory order is arbitrary: read shallow files first, then by name.
	slices.SortFunc(files, func(a, b string) int {
		if da, db := strings.Count(a, "/"), strings.Count(b, "/"); da != db {
			return cmp.Compare(da, db)
		}
		return strings.Compare(a, b)
	})
	for _, rel := range files {
		if len(d.Files) >= lim.MaxFiles {
			skip(rel, fmt.Sprintf("stopped: more than %d recognised files", lim.MaxFiles))
			break
		}
		if totalBytes >= lim.MaxTotalBytes {
			skip(rel, fmt.Sprintf("stopped: read %d bytes in total", lim.MaxTotalBytes))
			break
		}
		data, err := readRegular(root, rel, min(lim.MaxFileSize, lim.MaxTotalBytes-totalBytes))
		if err != nil {
			skip(rel, errText(err))
			continue
		}
		totalBytes += int64(len(data))
		kind := KindOf(rel)
		d.Files = append(d.Files, rel)
		refs, perr := Parse(kind, data)
		if perr != nil {
			skip(rel, "parse stopped: "+perr.Error())
		}
		for _, r := range refs {
			c := Candidate{File: rel, Line: r.Line, Kind: kind, ecosystem: kind.ecosystem()}
			c.Host, c.Reason, c.Detail = HostOfURL(r.Value)
			k := key{c.Host + "\x00" + string(c.Reason), rel}
			if seen[k] {
				continue
			}
			if len(seen) >= lim.MaxHosts {
				if !hostsFull {
					skip(rel, fmt.Sprintf("stopped: more than %d distinct hosts", lim.MaxHosts))
					hostsFull = true
				}
				break
			}
			seen[k] = true
			d.Candidates = append(d.Candidates, c)
		}
		if hostsFull {
			break
		}
	}
	return d, nil
}

// readRegular reads rel under root without following a final symbolic
// link out of the tree and without blocking on a FIFO or device, refusing
// anything but a regular file of at most limit bytes.
func readRegular(root *os.Root, rel string, limit int64) ([]byte, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open: %s", errText(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot stat: %s", errText(err))
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("larger than %d bytes (%d)", limit, st.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %s", errText(err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes (grew while read)", limit)
	}
	return data, nil
}

// errText is an error's message without the path os adds (the path is
// already reported next to it).
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
