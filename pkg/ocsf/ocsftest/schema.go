package ocsftest

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Version is the OCSF version the definitions must be.
const Version = "1.8.0"

// DirEnv names the environment variable that points at the definitions
// (the v1.8.0 directory, or the ocsf directory that holds it).
const DirEnv = "PALISADE_OCSF_DIR"

// Attr is one attribute definition as the OCSF schema server exports it.
type Attr struct {
	Type        string          `json:"type"`
	ObjectType  string          `json:"object_type"`
	IsArray     bool            `json:"is_array"`
	Requirement string          `json:"requirement"`
	Enum        map[string]Enum `json:"enum"`
	Sibling     string          `json:"sibling"`
	Profiles    []string        `json:"profiles"`
	Deprecated  *Deprecation    `json:"@deprecated"`
}

// Deprecation is the "@deprecated" note of an attribute or enum value.
type Deprecation struct {
	Message string `json:"message"`
	Since   string `json:"since"`
}

// Enum is one enum value of an attribute.
type Enum struct {
	Caption    string       `json:"caption"`
	Deprecated *Deprecation `json:"@deprecated"`
}

// Def is a class or object definition.
type Def struct {
	Name        string              `json:"name"`
	Caption     string              `json:"caption"`
	UID         int                 `json:"uid"`
	CategoryUID int                 `json:"category_uid"`
	Category    string              `json:"category_name"`
	Attributes  map[string]Attr     `json:"attributes"`
	Constraints map[string][]string `json:"constraints"`
	Profiles    []string            `json:"profiles"`
	// Supplement is set on objects compiled into this package because the
	// shared export lacks them.
	Supplement string `json:"supplement"`
}

// Schema is the loaded OCSF 1.8.0 definitions.
type Schema struct {
	Dir      string
	Classes  map[int]*Def    // by class_uid
	Objects  map[string]*Def // by object name
	Profiles map[string]bool // every profile name a class or the profiles/ directory declares
	// Supplemented lists the objects taken from this package's supplement
	// because the shared directory lacks them.
	Supplemented []string
	// Broken lists shared files that are not definitions (the export of a
	// name the server did not know), skipped.
	Broken []string
}

//go:embed supplement/objects/*.json
var supplement embed.FS

// FindDir locates the OCSF 1.8.0 definitions: $PALISADE_OCSF_DIR (the
// v1.8.0 directory or its parent), else testdata/ocsf/v1.8.0 at the module
// root, found by walking up from the working directory to the directory
// that holds go.mod. The repository carries the data, so a fresh clone
// needs nothing beside it.
func FindDir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		for _, c := range []string{d, filepath.Join(d, "v"+Version)} {
			if isDefDir(c) {
				return c, nil
			}
		}
		return "", fmt.Errorf("%s=%s holds no classes/ directory (nor v%s/classes)", DirEnv, d, Version)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			c := filepath.Join(d, "testdata", "ocsf", "v"+Version)
			if isDefDir(c) {
				return c, nil
			}
			return "", fmt.Errorf("module root %s has no testdata/ocsf/v%s/classes; set %s", d, Version, DirEnv)
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("no go.mod above %s, so no testdata/ocsf/v%s; set %s", wd, Version, DirEnv)
}

func isDefDir(d string) bool {
	fi, err := os.Stat(filepath.Join(d, "classes"))
	return err == nil && fi.IsDir()
}

var (
	defaultOnce   sync.Once
	defaultSchema *Schema
	defaultErr    error
)

// Default loads the definitions FindDir locates, once per process.
func Default() (*Schema, error) {
	defaultOnce.Do(func() {
		dir, err := FindDir()
		if err != nil {
			defaultErr = err
			return
		}
		defaultSchema, defaultErr = Load(dir)
	})
	return defaultSchema, defaultErr
}

// Load reads the class, object and profile definitions in dir (an OCSF
// schema server API export: classes/*.json, objects/*.json,
// profiles/*.json, VERSION) and adds the embedded supplement objects that
// dir lacks.
func Load(dir string) (*Schema, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "VERSION")); err == nil {
		if v := strings.TrimSpace(string(b)); v != Version {
			return nil, fmt.Errorf("ocsftest: %s/VERSION is %q, want %q", dir, v, Version)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("ocsftest: %w", err)
	}
	s := &Schema{Dir: dir, Classes: map[int]*Def{}, Objects: map[string]*Def{}, Profiles: map[string]bool{}}
	classes, err := readDefs(os.DirFS(dir), "classes")
	if err != nil {
		return nil, err
	}
	if len(classes) == 0 {
		return nil, fmt.Errorf("ocsftest: no class definitions in %s/classes", dir)
	}
	for _, c := range classes {
		if c.Name == "" || c.Attributes == nil {
			s.Broken = append(s.Broken, "classes/"+c.file)
			continue
		}
		s.Classes[c.UID] = c.Def
		for _, p := range c.Profiles {
			s.Profiles[p] = true
		}
	}
	objects, err := readDefs(os.DirFS(dir), "objects")
	if err != nil {
		return nil, err
	}
	for _, o := range objects {
		if o.Name == "" || o.Attributes == nil {
			s.Broken = append(s.Broken, "objects/"+o.file)
			continue
		}
		s.Objects[o.Name] = o.Def
	}
	if _, err := os.Stat(filepath.Join(dir, "profiles")); err == nil {
		profiles, err := readDefs(os.DirFS(dir), "profiles")
		if err != nil {
			return nil, err
		}
		for _, p := range profiles {
			if p.Name != "" {
				s.Profiles[p.Name] = true
			}
		}
	}
	sup, err := readDefs(supplement, "supplement/objects")
	if err != nil {
		return nil, err
	}
	for _, o := range sup {
		if _, ok := s.Objects[o.Name]; !ok {
			s.Objects[o.Name] = o.Def
			s.Supplemented = append(s.Supplemented, o.Name)
		}
	}
	sort.Strings(s.Supplemented)
	return s, nil
}

type fileDef struct {
	*Def
	file string
}

func readDefs(fsys fs.FS, dir string) ([]fileDef, error) {
	names, err := fs.Glob(fsys, dir+"/*.json")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []fileDef
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("ocsftest: %w", err)
		}
		d := &Def{}
		if err := json.Unmarshal(b, d); err != nil {
			return nil, fmt.Errorf("ocsftest: parse %s: %w", n, err)
		}
		out = append(out, fileDef{d, filepath.Base(n)})
	}
	return out, nil
}

// allowed reports whether attribute a may appear given the declared
// profiles: attributes a profile adds exist only when it is declared.
func allowed(a Attr, profiles map[string]bool) bool {
	if len(a.Profiles) == 0 {
		return true
	}
	for _, p := range a.Profiles {
		if profiles[p] {
			return true
		}
	}
	return false
}
