//go:build linux

package attribution

import (
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
)

// attrObjects is what the eBPF backend loaded from bpf/attr.c: every
// map, the programs it cannot work without (coreProgs, which load on
// every kernel it supports), and the optional sets, each loaded whole
// or not at all (opt, by program name).
type attrObjects struct {
	palisadebpf.AttrMaps
	coreProgs
	// Seed adds processes that existed before the tracepoints, read
	// from their tasks (the bpf_task_from_pid kfunc, Linux 6.2). Without
	// it they are seeded from /proc with no start time, so no ancestor
	// chain passes through them.
	Seed *ebpf.Program
	opt  map[string]*ebpf.Program
}

// coreProgs are the programs every supported kernel loads.
type coreProgs struct {
	Connect4       *ebpf.Program `ebpf:"connect4"`
	Connect6       *ebpf.Program `ebpf:"connect6"`
	ConnectFd      *ebpf.Program `ebpf:"connect_fd"`
	Lookup         *ebpf.Program `ebpf:"lookup"`
	PassPidfdGetfd *ebpf.Program `ebpf:"pass_pidfd_getfd"`
	PassSendmmsg   *ebpf.Program `ebpf:"pass_sendmmsg"`
	PassSendmsg    *ebpf.Program `ebpf:"pass_sendmsg"`
	ProcExec       *ebpf.Program `ebpf:"proc_exec"`
	ProcExit       *ebpf.Program `ebpf:"proc_exit"`
	ProcFork       *ebpf.Program `ebpf:"proc_fork"`
	SockOps        *ebpf.Program `ebpf:"sock_ops"`
}

// optionalSets are the optional programs, by set: a set loads whole or
// not at all (a kernel without kfuncs or bpf_find_vma, 5.17, refuses
// some of them).
var optionalSets = map[string][]string{
	"seed":  {"seed"},
	"guard": {"send_guard"},
	"code":  {"code_mmap", "code_shmat", "code_mprotect_enter", "code_mprotect_exit", "code_pkey_mprotect_enter", "code_pkey_mprotect_exit"},
}

// loadAttrObjects loads the maps and the core programs of spec into o,
// then each optional set on its own (sharing the maps), recording why a
// set was refused in skipped. On error nothing stays loaded.
func loadAttrObjects(spec *ebpf.CollectionSpec, o *attrObjects) (skipped map[string]error, err error) {
	core := struct {
		*palisadebpf.AttrMaps
		*coreProgs
	}{&o.AttrMaps, &o.coreProgs}
	// The kernel's BTF is decoded once for all the loads below.
	cache := btf.NewCache()
	if err := spec.LoadAndAssign(&core, &ebpf.CollectionOptions{Cache: cache}); err != nil {
		return nil, fmt.Errorf("attribution: bpf: load programs: %w", err)
	}
	maps := loadedMaps(&o.AttrMaps)
	skipped = map[string]error{}
	o.opt = map[string]*ebpf.Program{}
	for set, names := range optionalSets {
		progs, err := loadPrograms(spec, names, maps, cache)
		if err != nil {
			skipped[set] = err
			continue
		}
		for name, p := range progs {
			o.opt[name] = p
		}
	}
	o.Seed = o.opt["seed"]
	return skipped, nil
}

// loadPrograms loads the named programs of spec with maps in place of
// the spec's, all or none.
func loadPrograms(spec *ebpf.CollectionSpec, names []string, maps map[string]*ebpf.Map, cache *btf.Cache) (map[string]*ebpf.Program, error) {
	ps := spec.Copy()
	ps.Programs = map[string]*ebpf.ProgramSpec{}
	for _, n := range names {
		if spec.Programs[n] == nil {
			return nil, fmt.Errorf("no program %q in the object", n)
		}
		ps.Programs[n] = spec.Programs[n]
	}
	coll, err := ebpf.NewCollectionWithOptions(ps, ebpf.CollectionOptions{MapReplacements: maps, Cache: cache})
	if err != nil {
		return nil, err
	}
	out := map[string]*ebpf.Program{}
	for _, n := range names {
		out[n] = coll.DetachProgram(n)
	}
	coll.Close() // the maps are the replacements, which stay open
	return out, nil
}

// loadedMaps returns m's maps by their names in the object (the
// struct's ebpf tags).
func loadedMaps(m *palisadebpf.AttrMaps) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if name := v.Type().Field(i).Tag.Get("ebpf"); name != "" {
			if mp, ok := v.Field(i).Interface().(*ebpf.Map); ok && mp != nil {
				out[name] = mp
			}
		}
	}
	return out
}

// close releases everything loaded.
func (o *attrObjects) close() {
	for _, p := range []*ebpf.Program{o.Connect4, o.Connect6, o.ConnectFd, o.Lookup, o.PassPidfdGetfd,
		o.PassSendmmsg, o.PassSendmsg, o.ProcExec, o.ProcExit, o.ProcFork, o.SockOps} {
		if p != nil {
			p.Close()
		}
	}
	for _, p := range o.opt {
		p.Close()
	}
	o.AttrMaps.Close()
}
