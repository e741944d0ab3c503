//go:build ignore

// Connect-time attribution for one sandbox (see gen.go and
// pkg/attribution): the process that connects a TCP socket is recorded by
// socket cookie; a process tree of the sandbox's tasks is kept from the
// fork/exec/exit tracepoints; descriptor passing (SCM_RIGHTS,
// pidfd_getfd) by sandbox tasks is counted so that userspace knows when
// a recorded connector may no longer be the only holder.
//
// Program types: cgroup/connect4, cgroup/connect6 and sockops attached to
// the sandbox's cgroup in the v2 hierarchy; raw tracepoints
// sched_process_fork/exec/exit and tracepoints syscalls/sys_enter_sendmsg,
// sys_enter_sendmmsg, sys_enter_pidfd_getfd and sys_enter_connect,
// filtered to tasks under that cgroup.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Kernel structures, only the fields read; CO-RE relocates the offsets
// against the running kernel's BTF.
struct super_block {
	unsigned int s_dev;
	unsigned long s_magic;
	unsigned long s_flags;
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
	unsigned int i_nlink;
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct qstr {
	const unsigned char *name;
} __attribute__((preserve_access_index));

struct dentry {
	struct dentry *d_parent;
	struct qstr d_name;
	struct inode *d_inode;
} __attribute__((preserve_access_index));

struct vfsmount {
	struct dentry *mnt_root;
	int mnt_flags;
} __attribute__((preserve_access_index));

struct mount {
	struct mount *mnt_parent;
	struct dentry *mnt_mountpoint;
	struct vfsmount mnt;
} __attribute__((preserve_access_index));

struct path {
	struct vfsmount *mnt;
	struct dentry *dentry;
} __attribute__((preserve_access_index));

struct file {
	struct path f_path;
	struct inode *f_inode;
	void *private_data;
} __attribute__((preserve_access_index));

struct vm_area_struct {
	unsigned long vm_end;
	unsigned long vm_flags;
	struct file *vm_file;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

typedef struct {
	long long counter;
} atomic64_t;

struct sock_common {
	atomic64_t skc_cookie;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
} __attribute__((preserve_access_index));

struct socket {
	struct sock *sk;
} __attribute__((preserve_access_index));

struct mm_struct {
	struct file *exe_file;
} __attribute__((preserve_access_index));

typedef struct {
	int counter;
} atomic_t;

struct signal_struct {
	atomic_t live;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	unsigned int personality;
	unsigned long long start_time;
	struct task_struct *real_parent;
	struct task_struct *group_leader;
	struct mm_struct *mm;
	struct signal_struct *signal;
	struct files_struct *files;
	char comm[16];
} __attribute__((preserve_access_index));

// proc_info describes one process (thread group).
struct proc_info {
	__u32 tgid;
	__u32 ppid;       // the parent's tgid, as it was at fork
	__u64 start_time; // group leader's start time, ns since boot
	// pstart is the parent's start_time at fork: the parent link counts
	// only while procs[ppid] has this start time. A parent that exited
	// leaves no entry (or its pid reused by a process with another start
	// time), so pid reuse cannot forge an ancestor and an orphan inherits
	// nothing from its dead parent. 0: unknown, no link.
	__u64 pstart;
	__u64 exe_ino;
	__u32 exe_dev; // kernel dev_t: major << 20 | minor
	// exec_seq numbers the process's image: 0 from fork (or seeding),
	// a fresh value from the execs counter at every exec
	// (EXEC_SEQ_UNKNOWN: not cacheable). In the procs
	// map only (a connection's snapshot leaves it 0): userspace keys
	// what it learnt about an image (its path, its hash) by tgid, start
	// time and exec_seq, and an exec, even of the same file under
	// another name, starts a new key.
	__u32 exec_seq;
	// code is nonzero when the process's current image has mapped
	// executable code from a file the sandbox could have written (CODE_*
	// bits: why), or was written to by another process (ptrace, its
	// /proc/<pid>/mem): the process has lost its binary's identity.
	// code_dev and code_ino name the first such file; code_mm is the
	// address space the mark belongs to (an exec replaces it, and a mark
	// of another address space is stale). Inherited at fork.
	__u32 code;
	__u32 code_dev;
	__u64 code_ino;
	__u64 code_mm;
	char comm[16];
};

// conn_info is what the connector was when it connected.
struct conn_info {
	struct proc_info proc;
	__u32 pid;      // the connecting thread
	__u32 family;   // AF_INET or AF_INET6
	__u32 fd_plus1; // the connecting descriptor + 1; 0 when unknown
	__u32 pad;
	__u64 cgroup_id;
	__u64 passes;   // value of the pass counter at connect time
	__u64 sock_ino; // the socket's inode; 0 when not read
};

// tuple is a sandbox socket's TCP 4-tuple as the proxy sees the accepted
// end: addresses as IPv6 (IPv4 mapped, ::ffff:a.b.c.d) in network byte
// order, ports in host byte order.
struct tuple {
	__u32 local[4];
	__u32 remote[4];
	__u16 local_port;
	__u16 remote_port;
	__u32 pad;
};

// Sizes are documented in docs/egress-proxy.md; both maps are LRU so a
// flood evicts the oldest entries instead of failing, and userspace
// treats a missing entry as "not recorded" (the exhaustive check).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); // socket cookie
	__type(value, struct conn_info);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 32768);
	__type(key, __u32); // tgid
	__type(value, struct proc_info);
} procs SEC(".maps");

// The cookie of each connecting sandbox socket by its 4-tuple (sockops,
// at TCP_CONNECT_CB; removed at TCP_CLOSE): the proxy finds the record of
// an accepted connection with one map read instead of a sock_diag query.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tuple);
	__type(value, __u64); // socket cookie
} tuples SEC(".maps");

// The descriptor each sandbox thread is connecting (from
// syscalls:sys_enter_connect), read and removed by the connect hooks: it
// lets userspace check that the connector still holds the socket with
// one readlink instead of reading its whole fd table.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); // tgid << 32 | pid
	__type(value, __u32);
} connect_fds SEC(".maps");

// The sandbox's cgroup (v2), for the tracepoints' filter.
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sandbox_cgroup SEC(".maps");

// passes[0] counts system calls by sandbox tasks that may pass a
// descriptor: sendmsg/sendmmsg with control data, pidfd_getfd.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} passes SEC(".maps");

// execs[0] numbers the execs of sandbox tasks (exec_seq).
// EXEC_SEQ_UNKNOWN marks an image userspace must not cache (the counter
// could not be read, or it wrapped after 2^32 execs).
#define EXEC_SEQ_UNKNOWN 0xffffffff
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} execs SEC(".maps");

// fill_proc describes task's process; its parent is task's real parent
// now (at fork: the process that forked it).
static __always_inline void fill_proc(struct task_struct *task, struct proc_info *p)
{
	struct task_struct *leader = BPF_CORE_READ(task, group_leader);
	struct file *exe = BPF_CORE_READ(task, mm, exe_file);

	p->tgid = BPF_CORE_READ(task, tgid);
	p->ppid = BPF_CORE_READ(task, real_parent, tgid);
	p->pstart = BPF_CORE_READ(task, real_parent, group_leader, start_time);
	p->start_time = BPF_CORE_READ(leader, start_time);
	if (exe) {
		p->exe_ino = BPF_CORE_READ(exe, f_inode, i_ino);
		p->exe_dev = BPF_CORE_READ(exe, f_inode, i_sb, s_dev);
	}
	BPF_CORE_READ_STR_INTO(&p->comm, leader, comm);
}

static __always_inline __u64 pass_count(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&passes, &zero);
	return n ? *n : 0;
}

// socket_inode returns the inode of the socket at descriptor fd of task
// when that descriptor still is the socket with this cookie (another
// thread may have replaced the descriptor since connect(2) read it),
// else 0.
static __always_inline __u64 socket_inode(struct task_struct *task, __u32 fd, __u64 cookie)
{
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *f = NULL;
	struct socket *sock;
	struct sock *sk;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	// Only a socket's private_data is a struct socket: anything else
	// swapped in at that descriptor number is refused before it is read.
	if ((BPF_CORE_READ(f, f_inode, i_mode) & 0170000) != 0140000 /* S_IFSOCK */)
		return 0;
	sock = BPF_CORE_READ(f, private_data);
	if (!sock)
		return 0;
	sk = BPF_CORE_READ(sock, sk);
	if (!sk || (__u64)BPF_CORE_READ(sk, __sk_common.skc_cookie.counter) != cookie)
		return 0;
	return BPF_CORE_READ(f, f_inode, i_ino);
}

static __always_inline int record_connect(struct bpf_sock_addr *ctx)
{
	struct task_struct *task;
	struct conn_info c = {};
	__u64 cookie, thread;
	__u32 *fd;

	if (ctx->type != 1 /* SOCK_STREAM */)
		return 1;
	// Passes are read before anything else: one that races with this
	// connect is then seen as newer than the record.
	c.passes = pass_count();
	task = (struct task_struct *)bpf_get_current_task();
	fill_proc(task, &c.proc);
	c.pid = BPF_CORE_READ(task, pid);
	c.family = ctx->user_family;
	thread = (__u64)c.proc.tgid << 32 | c.pid;
	fd = bpf_map_lookup_elem(&connect_fds, &thread);
	if (fd) {
		c.fd_plus1 = *fd + 1;
		bpf_map_delete_elem(&connect_fds, &thread);
	}
	c.cgroup_id = bpf_get_current_cgroup_id();
	cookie = bpf_get_socket_cookie(ctx); // also sets the socket's skc_cookie
	if (c.fd_plus1)
		c.sock_ino = socket_inode(task, c.fd_plus1 - 1, cookie);
	bpf_map_update_elem(&conns, &cookie, &c, BPF_ANY);
	return 1; // never changes the connect's outcome
}

SEC("cgroup/connect4")
int connect4(struct bpf_sock_addr *ctx)
{
	return record_connect(ctx);
}

SEC("cgroup/connect6")
int connect6(struct bpf_sock_addr *ctx)
{
	return record_connect(ctx);
}

// sock_ops removes a socket's record when it closes: TCP_CONNECT_CB asks
// for state callbacks, and the move to TCP_CLOSE deletes the entry.
// tuple_of fills t with the socket's 4-tuple; false for a family other
// than IPv4 and IPv6.
static __always_inline int tuple_of(struct bpf_sock_ops *ctx, struct tuple *t)
{
	__u32 v;

	// Every context field is read at its own constant offset and pinned
	// in a register (barrier_var): the verifier refuses a load through a
	// context pointer the compiler computed to share one load between
	// the two families.
	if (ctx->family == 2 /* AF_INET */) {
		t->local[2] = t->remote[2] = bpf_htonl(0xffff);
		v = ctx->local_ip4;
		barrier_var(v);
		t->local[3] = v;
		v = ctx->remote_ip4;
		barrier_var(v);
		t->remote[3] = v;
	} else if (ctx->family == 10 /* AF_INET6 */) {
#define COPY(dst, field)             \
	do {                         \
		v = ctx->field;      \
		barrier_var(v);      \
		dst = v;             \
	} while (0)
		COPY(t->local[0], local_ip6[0]);
		COPY(t->local[1], local_ip6[1]);
		COPY(t->local[2], local_ip6[2]);
		COPY(t->local[3], local_ip6[3]);
		COPY(t->remote[0], remote_ip6[0]);
		COPY(t->remote[1], remote_ip6[1]);
		COPY(t->remote[2], remote_ip6[2]);
		COPY(t->remote[3], remote_ip6[3]);
#undef COPY
	} else {
		return 0;
	}
	v = ctx->local_port; // host byte order
	barrier_var(v);
	t->local_port = v;
	v = ctx->remote_port; // network byte order, in the upper half
	barrier_var(v);
	t->remote_port = bpf_ntohl(v) & 0xffff;
	return 1;
}

// The send guard: bytes on a connection the proxy decided may be sent
// only by the process it was decided on or its descendants. Every
// sandbox TCP socket to a peer outside the sandbox (all of which reach
// the proxy, directly or captured by the fence) joins the guarded
// sockhash when it is established, so the send_guard sk_msg program
// runs on each of its sends (write, send*, sendfile and splice all end
// in the protocol's sendmsg); the proxy binds the socket to its decided
// process (decided) once it attributed the connection.
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, __u64); // socket cookie
	__type(value, __u64);
} guarded SEC(".maps");

// Each guarded socket's cookie, in the socket (an sk_msg program cannot
// compute it).
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} guard_cookie SEC(".maps");

// decided_info is the process a connection was decided on, written by
// the proxy; the program marks a connection it refused a send on.
struct decided_info {
	__u32 tgid;
	__u32 flags; // DECIDED_VIOLATED
	__u64 start_time;
};

#define DECIDED_VIOLATED 1
// DECIDED_CLEAN: the decided process had mapped no foreign code when it
// was decided on; a sender that has since (itself or a descendant) lost
// its binary's identity is refused too.
#define DECIDED_CLEAN 2

// decided holds an entry for every socket under the guard: sock_ops
// puts a placeholder (unbound: tgid 0) when the socket joins the
// guarded sockhash, and the proxy's binding replaces it, so a binding
// succeeds only for a socket under the guard.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); // socket cookie
	__type(value, struct decided_info);
} decided SEC(".maps");

// violation is one refused send, for the proxy (the violations ring).
struct violation {
	__u64 cookie;
	__u32 tgid; // the sender
	__u32 pid;
	__u32 why; // VIOLATION_*
	__u32 code; // the sender's CODE_* bits (VIOLATION_CODE)
	__u64 start_time;
	__u64 exe_ino;
	__u32 exe_dev;
	__u32 pad;
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} violations SEC(".maps");

#define VIOLATION_SENDER 1 // neither the decided process nor a descendant
#define VIOLATION_CODE 2   // the decided process (or a descendant) mapped foreign code since

// Keeps struct violation in the object's BTF for bpf2go (the ring
// buffer map has no value type).
const struct violation *unused_violation __attribute__((unused));

// guard_on[0] is set by the proxy once send_guard is attached to the
// guarded sockhash: until then sockets are not added (a member of a
// sockhash with no program is a cost for nothing).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} guard_on SEC(".maps");

// loopback reports whether t's peer is a loopback address (the
// sandbox's own services, which the proxy never decides on).
static __always_inline int loopback(struct tuple *t)
{
	if (t->remote[0] == 0 && t->remote[1] == 0 && t->remote[2] == bpf_htonl(0xffff))
		return (bpf_ntohl(t->remote[3]) >> 24) == 127;
	return t->remote[0] == 0 && t->remote[1] == 0 && t->remote[2] == 0 && t->remote[3] == bpf_htonl(1);
}

// sock_ops indexes a connecting socket's cookie by its 4-tuple
// (TCP_CONNECT_CB: the local port is bound by then) and asks for state
// callbacks; puts an established socket to a peer outside the sandbox
// under the send guard; and at the move to TCP_CLOSE removes the tuple,
// the connection record and the decision.
SEC("sockops")
int sock_ops(struct bpf_sock_ops *ctx)
{
	struct decided_info unbound = {};
	struct tuple t = {};
	struct bpf_sock *sk;
	__u64 cookie, *stored;
	__u32 zero = 0, *on;

	switch (ctx->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		bpf_sock_ops_cb_flags_set(ctx, ctx->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
		cookie = bpf_get_socket_cookie(ctx);
		if (tuple_of(ctx, &t))
			bpf_map_update_elem(&tuples, &t, &cookie, BPF_ANY);
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		on = bpf_map_lookup_elem(&guard_on, &zero);
		if (!on || !*on || !tuple_of(ctx, &t) || loopback(&t))
			break;
		sk = ctx->sk;
		if (!sk)
			break;
		cookie = bpf_get_socket_cookie(ctx);
		// A socket that was under the guard before (established,
		// disconnected with AF_UNSPEC, connected again: the same
		// socket, the same cookie; a disconnect leaves it in the
		// sockhash) is taken out of the guard and gets no placeholder,
		// so the proxy refuses its new connection: bindings are named
		// by cookie, and the earlier connection's release would delete
		// the new one's.
		if (bpf_sk_storage_get(&guard_cookie, sk, 0, 0)) {
			bpf_map_delete_elem(&guarded, &cookie);
			break;
		}
		stored = bpf_sk_storage_get(&guard_cookie, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
		if (!stored)
			break;
		*stored = cookie;
		if (bpf_sock_hash_update(ctx, &guarded, &cookie, BPF_NOEXIST))
			break;
		// The placeholder (tgid 0: not bound yet) the proxy's binding
		// replaces (BPF_EXIST): a socket without one is not under the
		// guard. The state callbacks delete it at TCP_CLOSE, also for a
		// socket whose connect the callbacks were not asked for.
		bpf_sock_ops_cb_flags_set(ctx, ctx->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
		bpf_map_update_elem(&decided, &cookie, &unbound, BPF_ANY);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (ctx->args[1] == BPF_TCP_CLOSE) {
			cookie = bpf_get_socket_cookie(ctx);
			bpf_map_delete_elem(&conns, &cookie);
			bpf_map_delete_elem(&decided, &cookie);
			if (tuple_of(ctx, &t))
				bpf_map_delete_elem(&tuples, &t);
		}
		break;
	}
	return 1;
}

// GUARD_ANCESTORS bounds the walk from a sender up to the decided
// process: a sender further down is refused.
#define GUARD_ANCESTORS 32

// decided_or_descendant reports whether task is the decided process
// (tgid and start time) or one of its descendants, by the kernel's live
// parent links (a process whose parent exited was handed to the sandbox
// init: it is no one's descendant any more).
static __always_inline int decided_or_descendant(struct task_struct *task, struct decided_info *d)
{
	for (int i = 0; i < GUARD_ANCESTORS; i++) {
		struct task_struct *parent;

		if (BPF_CORE_READ(task, tgid) == d->tgid &&
		    BPF_CORE_READ(task, group_leader, start_time) == d->start_time)
			return 1;
		parent = BPF_CORE_READ(task, real_parent);
		if (!parent || parent == task || BPF_CORE_READ(task, pid) <= 1)
			return 0;
		task = parent;
	}
	return 0;
}

// send_guard runs on every send on a guarded socket: before the proxy
// decided it, anything passes (the decision names the holder then);
// after, only the decided process and its descendants, and, when the
// decided process was clean then, only while the sender has not mapped
// foreign code since (the code marks of the process tree); any other
// sender is refused (EACCES), the connection is marked so that every later send
// on it is refused too, and the proxy is told (it closes the connection
// and reports the sender).
SEC("sk_msg")
int send_guard(struct sk_msg_md *msg)
{
	struct task_struct *task;
	struct decided_info *d;
	struct violation *v;
	struct proc_info *p;
	struct bpf_sock *sk = msg->sk;
	__u32 why, code = 0, tgid;
	__u64 *c, cookie;

	if (!sk)
		return SK_PASS;
	c = bpf_sk_storage_get(&guard_cookie, sk, 0, 0);
	if (!c)
		return SK_PASS;
	cookie = *c;
	d = bpf_map_lookup_elem(&decided, &cookie);
	if (!d || !d->tgid) // not decided yet
		return SK_PASS;
	if (d->flags & DECIDED_VIOLATED)
		return SK_DROP;
	task = (struct task_struct *)bpf_get_current_task();
	why = VIOLATION_SENDER;
	if (decided_or_descendant(task, d)) {
		if (!(d->flags & DECIDED_CLEAN))
			return SK_PASS;
		tgid = BPF_CORE_READ(task, tgid);
		p = bpf_map_lookup_elem(&procs, &tgid);
		if (!p || !p->code || p->code_mm != (__u64)BPF_CORE_READ(task, mm))
			return SK_PASS;
		why = VIOLATION_CODE;
		code = p->code;
	}
	d->flags |= DECIDED_VIOLATED;
	v = bpf_ringbuf_reserve(&violations, sizeof(*v), 0);
	if (v) {
		struct file *exe = BPF_CORE_READ(task, mm, exe_file);
		v->cookie = cookie;
		v->why = why;
		v->code = code;
		v->tgid = BPF_CORE_READ(task, tgid);
		v->pid = BPF_CORE_READ(task, pid);
		v->start_time = BPF_CORE_READ(task, group_leader, start_time);
		v->exe_ino = exe ? BPF_CORE_READ(exe, f_inode, i_ino) : 0;
		v->exe_dev = exe ? BPF_CORE_READ(exe, f_inode, i_sb, s_dev) : 0;
		v->pad = 0;
		BPF_CORE_READ_STR_INTO(&v->comm, task, group_leader, comm);
		bpf_ringbuf_submit(v, 0);
	}
	return SK_DROP;
}

static __always_inline int in_sandbox(void)
{
	return bpf_current_task_under_cgroup(&sandbox_cgroup, 0) == 1;
}

// Code identity: a process keeps its binary's identity only while every
// executable mapping of its image comes from a file the sandbox cannot
// write. The hooks below see each mapping made executable (mmap with
// PROT_EXEC, mprotect adding it) by a sandbox task, before the code can
// run, and mark the process (proc_info.code) when the file is:
#define CODE_WRITABLE 1       // under a path the sandbox may write (writable map)
#define CODE_TMPFS 2          // on a writable tmpfs/ramfs (the sandbox's own /tmp, /dev/shm...)
#define CODE_INTERNAL 4       // on a kernel-internal mount: memfd, anonymous shmem
#define CODE_DELETED 8        // unlinked: what it was cannot be checked
#define CODE_WORLD_WRITABLE 16 // writable by anyone
#define CODE_TOO_DEEP 32      // its path is deeper than the walk goes
#define CODE_PTRACE 64        // another sandbox process was granted write access to its memory
#define CODE_UNKNOWN 128      // mapped before the hooks existed, and could not be checked

// The roots of what the sandbox may write, as the proxy resolved them:
// its workdir and read_write paths (super_block dev and inode).
struct root_key {
	__u32 dev;
	__u32 pad;
	__u64 ino;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct root_key);
	__type(value, __u8);
} writable SEC(".maps");

#define MNT_NOEXEC 0x04
#define MNT_READONLY 0x40
#define MNT_INTERNAL 0x4000
#define SB_RDONLY 1
#define TMPFS_MAGIC 0x01021994
#define RAMFS_MAGIC 0x858458f6
#define PROT_READ 1
#define PROT_EXEC 4
#define READ_IMPLIES_EXEC 0x0400000
#define PTRACE_MODE_ATTACH 2
// WALK_MAX bounds the path walk (directories and mount crossings).
#define WALK_MAX 64

// code_of classifies a file being mapped executable (CODE_* bits, 0 for
// a file the sandbox cannot write). A file on a noexec mount is 0: the
// kernel refuses the mapping itself. A global function, so the verifier
// checks its walk once rather than at every place it is called from (a
// second each, in all, when it was inlined); the file comes as a number
// because a global function's pointer arguments must be program memory.
__noinline __u32 code_of_file(__u64 filep)
{
	struct file *file = (struct file *)filep;
	struct vfsmount *vm = BPF_CORE_READ(file, f_path.mnt);
	struct dentry *d = BPF_CORE_READ(file, f_path.dentry);
	struct inode *ino = BPF_CORE_READ(file, f_inode);
	struct super_block *sb = BPF_CORE_READ(ino, i_sb);
	int mflags = BPF_CORE_READ(vm, mnt_flags);
	unsigned long magic;
	struct mount *m;

	// One reason, the first that applies (as the /proc check names it).
	if (mflags & MNT_NOEXEC)
		return 0;
	if (mflags & MNT_INTERNAL)
		return CODE_INTERNAL;
	if (BPF_CORE_READ(ino, i_nlink) == 0)
		return CODE_DELETED;
	if (BPF_CORE_READ(ino, i_mode) & 0002)
		return CODE_WORLD_WRITABLE;
	magic = BPF_CORE_READ(sb, s_magic);
	if ((magic == TMPFS_MAGIC || magic == RAMFS_MAGIC) && !(mflags & MNT_READONLY) &&
	    !(BPF_CORE_READ(sb, s_flags) & SB_RDONLY))
		return CODE_TMPFS;
	// Up the path the file was opened by, across mounts, to the
	// namespace's root: a writable root on the way (the way Landlock's
	// rules apply) makes it writable.
	m = (struct mount *)((void *)vm - bpf_core_field_offset(struct mount, mnt));
	for (int i = 0; i < WALK_MAX; i++) {
		struct inode *di = BPF_CORE_READ(d, d_inode);
		struct root_key k = {};
		struct dentry *up;

		if (di) {
			k.dev = BPF_CORE_READ(di, i_sb, s_dev);
			k.ino = BPF_CORE_READ(di, i_ino);
			if (bpf_map_lookup_elem(&writable, &k))
				return CODE_WRITABLE;
		}
		if (d == BPF_CORE_READ(m, mnt.mnt_root)) {
			struct mount *parent = BPF_CORE_READ(m, mnt_parent);
			if (!parent || parent == m)
				return 0; // the namespace's root
			d = BPF_CORE_READ(m, mnt_mountpoint);
			m = parent;
			continue;
		}
		up = BPF_CORE_READ(d, d_parent);
		if (!up || up == d)
			return 0;
		d = up;
	}
	return CODE_TOO_DEEP;
}

// mark_code records code (CODE_* bits) against the process of task (the
// current one, or a ptrace target), for its current address space, with
// file (may be NULL) as the file to name. A process without an entry
// gets one.
static __always_inline void mark_code(struct task_struct *task, __u32 code, struct file *file)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	__u64 mm = (__u64)BPF_CORE_READ(task, mm);
	struct proc_info *p = bpf_map_lookup_elem(&procs, &tgid);

	if (!p) {
		struct proc_info n = {};
		fill_proc(task, &n);
		n.exec_seq = EXEC_SEQ_UNKNOWN;
		bpf_map_update_elem(&procs, &tgid, &n, BPF_NOEXIST);
		p = bpf_map_lookup_elem(&procs, &tgid);
		if (!p)
			return;
	}
	if (p->code_mm != mm) {
		p->code = 0; // a mark of an address space the process no longer has
		p->code_mm = mm;
	}
	if (!p->code && file) {
		p->code_dev = BPF_CORE_READ(file, f_inode, i_sb, s_dev);
		p->code_ino = BPF_CORE_READ(file, f_inode, i_ino);
	}
	p->code |= code; // any writer leaves it nonzero: no atomic needed
}


// The hooks are syscall tracepoints, which every kernel with BPF
// attaches (BPF-LSM and fentry programs need BPF trampolines and
// kprobes need kprobe events; some hosts refuse or lack each): after
// mmap, mprotect, pkey_mprotect and shmat return, the mapping made is
// read back from the address space (bpf_find_vma) and classified if
// executable — the mapping as it is, not the descriptor or range asked
// for, which another thread could have swapped meanwhile. The ELF
// loader maps an executable and its interpreter without a system call:
// the exec tracepoint classifies the executable, and a clean executable
// names its interpreter (PT_INTERP) at a path the sandbox cannot write.
// Observing is all they do: nothing is refused here.

// The layout of a syscalls:sys_enter_* tracepoint record.
struct sys_enter {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

// The layout of a syscalls:sys_exit_* tracepoint record.
struct sys_exit {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

#define VM_EXEC 0x4
// MPROTECT_VMAS bounds the mappings one mprotect range is checked for;
// a range spanning more marks the process CODE_TOO_DEEP.
#define MPROTECT_VMAS 8

// vma_probe is what check_vma tells its caller about one mapping.
struct vma_probe {
	__u64 end;
	__u32 code;
	__u32 pad;
	struct file *file;
};

static long check_vma(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_probe *p = data;
	struct file *f;

	p->end = BPF_CORE_READ(vma, vm_end);
	if (!(BPF_CORE_READ(vma, vm_flags) & VM_EXEC))
		return 0;
	f = BPF_CORE_READ(vma, vm_file);
	if (f) {
		p->code = code_of_file((__u64)f);
		p->file = f;
	}
	return 0;
}

// check_mapping classifies the mapping at addr of the current process
// and marks it; it returns the mapping's end (0 when there is none).
static __always_inline __u64 check_mapping(__u64 addr)
{
	struct vma_probe p = {};

	if (bpf_find_vma(bpf_get_current_task_btf(), addr, check_vma, &p, 0))
		return 0;
	if (p.code)
		mark_code((struct task_struct *)bpf_get_current_task(), p.code, p.file);
	return p.end;
}

static __always_inline int mapped(struct sys_exit *ctx)
{
	if (ctx->ret < 0 && ctx->ret > -4096)
		return 0; // failed
	if (in_sandbox())
		check_mapping(ctx->ret);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int code_mmap(struct sys_exit *ctx)
{
	return mapped(ctx);
}

// shmat(SHM_EXEC) maps a System V segment (on the kernel-internal shm
// mount: CODE_INTERNAL) executable.
SEC("tracepoint/syscalls/sys_exit_shmat")
int code_shmat(struct sys_exit *ctx)
{
	return mapped(ctx);
}

// The range of each mprotect in progress that may add PROT_EXEC, by
// thread: the exit tracepoint checks the mappings it then covers.
struct mprotect_range {
	__u64 start;
	__u64 len;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); // tgid << 32 | pid
	__type(value, struct mprotect_range);
} mprotects SEC(".maps");

static __always_inline int mprotect_enter(struct sys_enter *ctx)
{
	struct task_struct *task;
	struct mprotect_range r;
	unsigned long prot = ctx->args[2];
	__u64 thread;

	if (!in_sandbox())
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	if ((prot & PROT_READ) && (BPF_CORE_READ(task, personality) & READ_IMPLIES_EXEC))
		prot |= PROT_EXEC;
	if (!(prot & PROT_EXEC))
		return 0;
	r.start = ctx->args[0];
	r.len = ctx->args[1];
	thread = bpf_get_current_pid_tgid();
	bpf_map_update_elem(&mprotects, &thread, &r, BPF_ANY);
	return 0;
}

static __always_inline int mprotect_exit(struct sys_exit *ctx)
{
	__u64 thread = bpf_get_current_pid_tgid(), addr, end;
	struct mprotect_range *r = bpf_map_lookup_elem(&mprotects, &thread);
	int i;

	if (!r)
		return 0;
	addr = r->start;
	end = r->start + r->len;
	bpf_map_delete_elem(&mprotects, &thread);
	if (ctx->ret != 0)
		return 0;
	for (i = 0; i < MPROTECT_VMAS && addr < end; i++) {
		addr = check_mapping(addr);
		if (!addr)
			return 0;
	}
	if (addr < end)
		mark_code((struct task_struct *)bpf_get_current_task(), CODE_TOO_DEEP, NULL);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mprotect")
int code_mprotect_enter(struct sys_enter *ctx)
{
	return mprotect_enter(ctx);
}

SEC("tracepoint/syscalls/sys_exit_mprotect")
int code_mprotect_exit(struct sys_exit *ctx)
{
	return mprotect_exit(ctx);
}

SEC("tracepoint/syscalls/sys_enter_pkey_mprotect")
int code_pkey_mprotect_enter(struct sys_enter *ctx)
{
	return mprotect_enter(ctx);
}

SEC("tracepoint/syscalls/sys_exit_pkey_mprotect")
int code_pkey_mprotect_exit(struct sys_exit *ctx)
{
	return mprotect_exit(ctx);
}

// sched_process_fork(struct task_struct *parent, struct task_struct *child)
SEC("raw_tracepoint/sched_process_fork")
int proc_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx->args[0];
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	struct proc_info p = {}, *pp;
	__u32 tgid, ptgid;

	if (!in_sandbox())
		return 0;
	tgid = BPF_CORE_READ(child, tgid);
	if (BPF_CORE_READ(child, pid) != tgid)
		return 0; // a new thread, not a new process
	fill_proc(child, &p);
	// The child's address space is a copy of the parent's: so is its mark.
	ptgid = BPF_CORE_READ(parent, tgid);
	pp = bpf_map_lookup_elem(&procs, &ptgid);
	if (pp && pp->code && pp->code_mm == (__u64)BPF_CORE_READ(parent, mm)) {
		p.code = pp->code;
		p.code_dev = pp->code_dev;
		p.code_ino = pp->code_ino;
		p.code_mm = (__u64)BPF_CORE_READ(child, mm);
	}
	bpf_map_update_elem(&procs, &tgid, &p, BPF_ANY);
	return 0;
}

// sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
SEC("raw_tracepoint/sched_process_exec")
int proc_exec(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	struct proc_info p = {}, *old;
	__u32 tgid, zero = 0, *seq, code;
	struct file *exe;
	__u64 mm;

	if (!in_sandbox())
		return 0;
	fill_proc(task, &p);
	// The parent is the one recorded at fork, not whoever adopted the
	// process since (an exec does not change who forked it).
	tgid = p.tgid;
	old = bpf_map_lookup_elem(&procs, &tgid);
	if (old && old->start_time == p.start_time) {
		p.ppid = old->ppid;
		p.pstart = old->pstart;
		// Marks made while the new image was loaded (its executable,
		// its interpreter) belong to the new address space; older
		// ones went with the old.
		if (old->code && old->code_mm == (__u64)BPF_CORE_READ(task, mm)) {
			p.code = old->code;
			p.code_dev = old->code_dev;
			p.code_ino = old->code_ino;
			p.code_mm = old->code_mm;
		}
	}
	// The new executable, mapped by the ELF loader without a system
	// call the mapping hooks see.
	exe = BPF_CORE_READ(task, mm, exe_file);
	if (exe && (code = code_of_file((__u64)exe))) {
		mm = (__u64)BPF_CORE_READ(task, mm);
		if (p.code_mm != mm) {
			p.code = 0;
			p.code_dev = BPF_CORE_READ(exe, f_inode, i_sb, s_dev);
			p.code_ino = BPF_CORE_READ(exe, f_inode, i_ino);
			p.code_mm = mm;
		}
		p.code |= code;
	}
	p.exec_seq = EXEC_SEQ_UNKNOWN;
	seq = bpf_map_lookup_elem(&execs, &zero);
	if (seq) {
		// Added, then read: two execs racing may read the same value,
		// but each reads a value above any read before its own add,
		// which is what makes a process's next image a new key.
		__sync_fetch_and_add(seq, 1);
		p.exec_seq = *seq;
		if (p.exec_seq == 0 || p.exec_seq == EXEC_SEQ_UNKNOWN)
			p.exec_seq = EXEC_SEQ_UNKNOWN; // wrapped: uncacheable
	}
	bpf_map_update_elem(&procs, &tgid, &p, BPF_ANY);
	return 0;
}

// sched_process_exit(struct task_struct *p): the last thread of a
// process removes it.
SEC("raw_tracepoint/sched_process_exit")
int proc_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	__u32 tgid;

	if (!in_sandbox())
		return 0;
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	bpf_map_delete_elem(&procs, &tgid);
	return 0;
}

// Kernel functions the seed program calls (6.2+).
extern struct task_struct *bpf_task_from_pid(__s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

// seed_ctx is the seed program's context: the proxy fills pid.
struct seed_ctx {
	__u32 pid;   // a host tgid of the sandbox
	__u32 added; // out: 1 when pid is a process and now has an entry
	// What the proxy found in /proc/<pid>/maps (mapped before the hooks
	// existed): CODE_* bits and the file, recorded as the hooks would.
	__u32 code;
	__u32 code_dev;
	__u64 code_ino;
};

// seed adds a process that existed before the tracepoints were attached
// to the tree, read from its task as the fork tracepoint would have (its
// start time, its parent's tgid and start time now: the fork-time parent
// of a process forked before the programs existed is not knowable). An
// entry the tracepoints wrote meanwhile is kept. Its image is marked not
// cacheable (its exec was not numbered). Run by the proxy only.
SEC("syscall")
int seed(struct seed_ctx *ctx)
{
	struct task_struct *task;
	struct proc_info p = {}, *e;
	__u32 pid = ctx->pid;
	__u64 mm;

	ctx->added = 0;
	task = bpf_task_from_pid(pid);
	if (!task)
		return 0;
	fill_proc(task, &p);
	mm = (__u64)BPF_CORE_READ(task, mm);
	bpf_task_release(task);
	if (p.tgid != pid)
		return 0; // a thread, not a process
	p.exec_seq = EXEC_SEQ_UNKNOWN;
	if (ctx->code) {
		p.code = ctx->code;
		p.code_dev = ctx->code_dev;
		p.code_ino = ctx->code_ino;
		p.code_mm = mm;
	}
	if (bpf_map_update_elem(&procs, &pid, &p, BPF_NOEXIST) == 0) {
		ctx->added = 1;
		return 0;
	}
	// The hooks made an entry meanwhile: add what /proc showed to it.
	e = bpf_map_lookup_elem(&procs, &pid);
	if (e && ctx->code && e->start_time == p.start_time) {
		if (e->code_mm != mm) {
			e->code = 0;
			e->code_mm = mm;
		}
		if (!e->code) {
			e->code_dev = ctx->code_dev;
			e->code_ino = ctx->code_ino;
		}
		e->code |= ctx->code;
	}
	return 0;
}


// struct user_msghdr on 64-bit: msg_controllen at offset 40; struct
// mmsghdr is 64 bytes.
#define MSGHDR_CONTROLLEN 40
#define MMSGHDR_SIZE 64
#define MMSG_CHECKED 8

static __always_inline void count_pass(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&passes, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline int has_control(const void *msghdr)
{
	__u64 len = 0;
	if (bpf_probe_read_user(&len, sizeof(len), msghdr + MSGHDR_CONTROLLEN))
		return 1; // unreadable: assume the worst
	return len != 0;
}

SEC("tracepoint/syscalls/sys_enter_sendmsg")
int pass_sendmsg(struct sys_enter *ctx)
{
	if (in_sandbox() && has_control((const void *)ctx->args[1]))
		count_pass();
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_sendmmsg")
int pass_sendmmsg(struct sys_enter *ctx)
{
	const void *v = (const void *)ctx->args[1];
	__u64 vlen = ctx->args[2];

	if (!in_sandbox())
		return 0;
	if (vlen > MMSG_CHECKED) {
		count_pass();
		return 0;
	}
	for (int i = 0; i < MMSG_CHECKED; i++) {
		if (i >= vlen)
			break;
		if (has_control(v + i * MMSGHDR_SIZE)) {
			count_pass();
			break;
		}
	}
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_connect")
int connect_fd(struct sys_enter *ctx)
{
	__u64 thread;
	__u32 fd;

	if (!in_sandbox())
		return 0;
	thread = bpf_get_current_pid_tgid();
	fd = (__u32)ctx->args[0];
	bpf_map_update_elem(&connect_fds, &thread, &fd, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_pidfd_getfd")
int pass_pidfd_getfd(struct sys_enter *ctx)
{
	if (in_sandbox())
		count_pass();
	return 0;
}

// LOOKUP_ANCESTORS is how many ancestors the lookup program reads; the
// proxy reads any further ones itself (pkg/attribution MaxAncestors).
#define LOOKUP_ANCESTORS 16

// lookup_ctx is the lookup program's context: the proxy fills key and
// gets the rest back.
struct lookup_ctx {
	struct tuple key;
	__u64 cookie;
	struct conn_info conn;
	__u64 passes;
	struct proc_info self;               // the connector's procs entry now
	struct proc_info anc[LOOKUP_ANCESTORS]; // its parent's, and so on up
	__u32 found;                         // LOOKUP_CONN | LOOKUP_SELF
	__u32 n_anc;
};

#define LOOKUP_CONN 1
#define LOOKUP_SELF 2

// lookup reads, in one BPF_PROG_RUN from the proxy instead of six map
// lookups, what the attribution fast path needs about an accepted
// connection: its record (by 4-tuple, then cookie), the pass counter,
// the connector's process-tree entry and its ancestors' entries. The
// proxy still checks the holder and reads the connector's entry again
// afterwards; this only batches the reads. Run by the proxy only
// (syscall programs attach nowhere).
SEC("syscall")
int lookup(struct lookup_ctx *ctx)
{
	__u32 zero = 0, tgid, pid;
	__u64 *cookie, *count, c, start;
	struct conn_info *conn;
	struct proc_info *p;
	struct tuple key;

	ctx->found = 0;
	ctx->n_anc = 0;
	// Map keys must be on the stack, not in the context.
	__builtin_memcpy(&key, &ctx->key, sizeof(key));
	cookie = bpf_map_lookup_elem(&tuples, &key);
	if (!cookie)
		return 0;
	c = *cookie;
	ctx->cookie = c;
	conn = bpf_map_lookup_elem(&conns, &c);
	if (!conn)
		return 0;
	__builtin_memcpy(&ctx->conn, conn, sizeof(ctx->conn));
	ctx->found = LOOKUP_CONN;
	count = bpf_map_lookup_elem(&passes, &zero);
	ctx->passes = count ? *count : 0;
	tgid = ctx->conn.proc.tgid;
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	__builtin_memcpy(&ctx->self, p, sizeof(ctx->self));
	ctx->found |= LOOKUP_SELF;
	pid = ctx->self.ppid;
	start = ctx->self.pstart;
	// One step per ancestor, written out: context fields must be at
	// constant offsets (clang does not unroll this loop). A parent
	// counts only while its entry has the start time recorded at fork.
#define LOOKUP_ANC(i)                                                  \
	if (pid == 0 || pid == tgid || start == 0)                     \
		return 0;                                              \
	p = bpf_map_lookup_elem(&procs, &pid);                         \
	if (!p || p->start_time != start)                              \
		return 0;                                              \
	__builtin_memcpy(&ctx->anc[i], p, sizeof(ctx->anc[i]));        \
	ctx->n_anc = (i) + 1;                                          \
	pid = p->ppid;                                                 \
	start = p->pstart;
	LOOKUP_ANC(0) LOOKUP_ANC(1) LOOKUP_ANC(2) LOOKUP_ANC(3)
	LOOKUP_ANC(4) LOOKUP_ANC(5) LOOKUP_ANC(6) LOOKUP_ANC(7)
	LOOKUP_ANC(8) LOOKUP_ANC(9) LOOKUP_ANC(10) LOOKUP_ANC(11)
	LOOKUP_ANC(12) LOOKUP_ANC(13) LOOKUP_ANC(14) LOOKUP_ANC(15)
#undef LOOKUP_ANC
	_Static_assert(LOOKUP_ANCESTORS == 16, "one LOOKUP_ANC step per ancestor");
	return 0;
}
