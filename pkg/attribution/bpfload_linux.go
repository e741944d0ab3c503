//go:build linux

package attribution

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"

	palisadebpf "github.com/palisade-sandbox/palisade/bpf"
)

// attrObjects is what the eBPF backend loaded from bpf/attr.c: every
// map, the programs it cannot work without (coreProgs, which load on
// every kernel it supports), and the optional ones, nil when this
// kernel refused them.
type attrObjects struct {
	palisadebpf.AttrMaps
	coreProgs
	// Seed adds processes that existed before the tracepoints, read
	// from their tasks (the bpf_task_from_pid kfunc, Linux 6.2). Without
	// it they are seeded from /proc with no start time, so no ancestor
	// chain passes through them.
	Seed *ebpf.Program
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

// loadAttrObjects loads the maps and the core programs of spec into o,
// then each optional program on its own (sharing the maps), recording
// why one was refused in skipped. On error nothing stays loaded.
func loadAttrObjects(spec *ebpf.CollectionSpec, o *attrObjects) (skipped map[string]error, err error) {
	core := struct {
		*palisadebpf.AttrMaps
		*coreProgs
	}{&o.AttrMaps, &o.coreProgs}
	if err := spec.LoadAndAssign(&core, nil); err != nil {
		return nil, fmt.Errorf("attribution: bpf: load programs: %w", err)
	}
	maps := loadedMaps(&o.AttrMaps)
	skipped = map[string]error{}
	for name, dst := range map[string]**ebpf.Program{"seed": &o.Seed} {
		var one struct {
			P *ebpf.Program `ebpf:"p"`
		}
		ps := spec.Copy()
		ps.Programs = map[string]*ebpf.ProgramSpec{"p": spec.Programs[name]}
		if ps.Programs["p"] == nil {
			skipped[name] = errors.New("not in the object")
			continue
		}
		if err := ps.LoadAndAssign(&one, &ebpf.CollectionOptions{MapReplacements: maps}); err != nil {
			skipped[name] = err
			continue
		}
		*dst = one.P
	}
	return skipped, nil
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
		o.PassSendmmsg, o.PassSendmsg, o.ProcExec, o.ProcExit, o.ProcFork, o.SockOps, o.Seed} {
		if p != nil {
			p.Close()
		}
	}
	o.AttrMaps.Close()
}
