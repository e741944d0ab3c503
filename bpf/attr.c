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
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
	void *private_data;
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

// sock_ops indexes a connecting socket's cookie by its 4-tuple
// (TCP_CONNECT_CB: the local port is bound by then) and asks for state
// callbacks; the move to TCP_CLOSE removes both the tuple and the
// connection record.
SEC("sockops")
int sock_ops(struct bpf_sock_ops *ctx)
{
	struct tuple t = {};
	__u64 cookie;

	switch (ctx->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		bpf_sock_ops_cb_flags_set(ctx, ctx->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG);
		cookie = bpf_get_socket_cookie(ctx);
		if (tuple_of(ctx, &t))
			bpf_map_update_elem(&tuples, &t, &cookie, BPF_ANY);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (ctx->args[1] == BPF_TCP_CLOSE) {
			cookie = bpf_get_socket_cookie(ctx);
			bpf_map_delete_elem(&conns, &cookie);
			if (tuple_of(ctx, &t))
				bpf_map_delete_elem(&tuples, &t);
		}
		break;
	}
	return 1;
}

static __always_inline int in_sandbox(void)
{
	return bpf_current_task_under_cgroup(&sandbox_cgroup, 0) == 1;
}

// sched_process_fork(struct task_struct *parent, struct task_struct *child)
SEC("raw_tracepoint/sched_process_fork")
int proc_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	struct proc_info p = {};
	__u32 tgid;

	if (!in_sandbox())
		return 0;
	tgid = BPF_CORE_READ(child, tgid);
	if (BPF_CORE_READ(child, pid) != tgid)
		return 0; // a new thread, not a new process
	fill_proc(child, &p);
	bpf_map_update_elem(&procs, &tgid, &p, BPF_ANY);
	return 0;
}

// sched_process_exec(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
SEC("raw_tracepoint/sched_process_exec")
int proc_exec(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx->args[0];
	struct proc_info p = {}, *old;
	__u32 tgid, zero = 0, *seq;

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
	struct proc_info p = {};
	__u32 pid = ctx->pid;

	ctx->added = 0;
	task = bpf_task_from_pid(pid);
	if (!task)
		return 0;
	fill_proc(task, &p);
	bpf_task_release(task);
	if (p.tgid != pid)
		return 0; // a thread, not a process
	p.exec_seq = EXEC_SEQ_UNKNOWN;
	if (bpf_map_update_elem(&procs, &pid, &p, BPF_NOEXIST) == 0)
		ctx->added = 1;
	return 0;
}

// The layout of a syscalls:sys_enter_* tracepoint record.
struct sys_enter {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 args[6];
};

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
