// SPDX-License-Identifier: GPL-2.0
/* profinfer's kernel side: probe handlers that stamp and forward events to one
 * ring buffer. Settings are read-only globals set by user space before load; the
 * struct offsets they need come from user space too (DWARF or the built-in table). */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "profinfer/events.h"

char LICENSE[] SEC("license") = "GPL";

/* Only this process is traced (uprobes are attached per pid too; this guards the
 * shared handlers against any other mapping of the same library). Written by user space:
 * a launched command's process at first, then — follow_children — the first process of
 * its tree seen to load libllama (a wrapper that forks: `unshare --pid --fork`,
 * `timeout`, a shell). Global pids, whatever PID namespace the target lives in. */
__u32 target_tgid = 0;
const volatile bool follow_children = false;
/* Set by user space once the target has loaded libllama: no more following. */
bool target_chosen = false;
/* Processes of the launched command's tree (forked from the target or from each other)
 * while no target is chosen: their loader stops hold them too, so that user space can
 * look at what they loaded before their code runs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} followed SEC(".maps");
/* Followers held at a loader stop, by tgid % PI_HELD_SLOTS: user space (and the guardian
 * process, through its mapping of this .bss) resumes each and clears its slot. */
#define PI_HELD_SLOTS 8
__u32 held_followers[PI_HELD_SLOTS] = {};
/* Stop the target when the dynamic loader changes its link map, so that user space can
 * attach to a just-loaded library before any of its code runs. */
const volatile bool stop_on_library_load = false;
const volatile __u32 n_counters = 0; /* perf counters per CPU in `counters` */
const volatile __u32 counter_source[PI_MAX_COUNTERS] = {}; /* pi_counter_source of each */
const volatile __u32 n_cpus = 1;
const volatile bool capture_experts = false;
const volatile bool trace_ops = false; /* operator probes may run (--level op or full) */
const volatile bool emit_sched = false; /* sched records; sched_switch also runs for counters */
/* Where an operator-level run's cost goes (PROFINFER_ABLATE, for the overhead study; the
 * trace is incomplete): PI_ABLATE_TRAP, the node probes return at once (the traps alone);
 * PI_ABLATE_SEND, they do all their work but send no op record (no consumer work). */
const volatile __u32 ablate = 0;
/* PROFINFER_ALTERNATE=W (the overhead study's paired measure): the operator probes stay in,
 * and llama_decode calls alternate between W whose operators are recorded and W whose are
 * not (the node probes trap and return: PI_TOKEN_OPS_OFF). Neighbouring calls of the same
 * run then compare the operator level's work with the trap alone. 0: off. */
const volatile __u32 alternate_calls = 0;
__u64 decode_calls = 0;
/* Written by user space once it knows the target's libraries (DWARF or built-in). */
struct pi_layout layout = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24); /* resized by user space before load */
} events SEC(".maps");

/* counter c of CPU k at index c * n_cpus + k; sized by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, 1);
} counters SEC(".maps");

/* Records that could not be reserved, per event kind, and data cut or left out, per
 * reason (pi_drop_kind); user space stores both with every commit. */
__u64 lost_events[PI_EV_KIND_MAX] = {};
__u64 dropped[PI_DROP_KIND_MAX] = {};
/* SIGSTOPs sent at loader stops, counted after each is sent: user space resumes the
 * target whenever it sees this move past library_resumes (the library record is only the
 * wake-up), and once more on every exit path if it did. The two resume counts are
 * written by user space only: the recorder's, and the guardian process's (which maps
 * this .bss and resumes a target held while profinfer is stopped or dead). */
__u64 library_stops = 0;
__u64 library_resumes = 0;
__u64 guardian_resumes = 0;
/* Operator probes are live only while this is set (the operator gate — QoS, budget —
 * clears it before detaching them and sets it after re-attaching them). */
bool ops_enabled = true;
/* ops_enabled as it was when the current llama_decode call began: probes switched on in
 * the middle of a call record nothing until the next call, so a call's operators are
 * recorded whole or (PI_TOKEN_OPS_OFF) not at all. */
bool call_ops = true;
__u64 graph_counter = 0;
__u64 current_graph_seq = 0;
/* Node details are news only in a graph ggml has not run before: ggml_backend_sched gives
 * each graph it splits a new uid (ggml_cgraph.uid) and keeps it while llama.cpp reuses the
 * graph, tensors and all. Once thread 0 has described every node of a graph whose uid is
 * set, later runs of that uid skip the per-node identity check (a user read and compare
 * of 248 bytes per node). 0: no uid (an older ggml, or a graph built outside the
 * scheduler): every node is checked. */
__u64 described_uid = 0;
bool current_graph_known = false;
bool current_describe_failed = false;
/* Bumped by user space each time it turns the operator probes back on: a graph during
 * which they went off and on again may have nodes nobody described. */
__u32 ops_epoch = 0;

static __always_inline bool is_target(__u64 pid_tgid)
{
	return (__u32)(pid_tgid >> 32) == target_tgid;
}

static __always_inline void fill_header_for(struct pi_event_header *h, __u32 kind, __u32 size,
					    __u32 pid, __u32 tid)
{
	h->kind = kind;
	h->size = size;
	h->pid = pid;
	h->tid = tid;
	h->cpu = bpf_get_smp_processor_id();
	h->reserved = 0;
}

static __always_inline void fill_header(struct pi_event_header *h, __u32 kind, __u32 size,
					__u64 pid_tgid)
{
	fill_header_for(h, kind, size, pid_tgid >> 32, (__u32)pid_tgid);
}

/* Waking the consumer for every record would preempt the inference threads (on a small
 * board every core runs one) and stall the others at the next barrier: records are
 * handed over silently, the consumer polls on a timer, and is woken early only when
 * the buffer fills past wakeup_bytes. */
const volatile __u64 wakeup_bytes = 1 << 20;

static __always_inline void submit(void *ev)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(ev, avail >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline void *reserve(__u32 kind, __u32 size)
{
	void *p = bpf_ringbuf_reserve(&events, size, 0);
	if (!p && kind < PI_EV_KIND_MAX)
		__sync_fetch_and_add(&lost_events[kind], 1);
	return p;
}

/* ---------------------------------------------------------------- token level */

struct decode_entry {
	__u64 start_ns;
	__s32 n_tokens;
	__u32 ops; /* ops_enabled at entry */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct decode_entry);
} decode_entries SEC(".maps");

/* llama_decode(struct llama_context *ctx, struct llama_batch batch): the 56-byte batch
 * goes by value. x86-64 SysV passes it in memory just above the return address;
 * AAPCS64 passes a composite over 16 bytes by reference in the second register. */
SEC("uprobe")
int BPF_KPROBE(llama_decode_enter, void *lctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	bool ops = ops_enabled;
	if (alternate_calls && (__sync_fetch_and_add(&decode_calls, 1) / alternate_calls) % 2)
		ops = false;
	struct decode_entry e = { .start_ns = bpf_ktime_get_ns(), .n_tokens = -1, .ops = ops };
	call_ops = ops;
#if defined(__TARGET_ARCH_x86)
	const void *batch = (const void *)(PT_REGS_SP(ctx) + 8);
#else
	const void *batch = (const void *)PT_REGS_PARM2(ctx);
#endif
	bpf_probe_read_user(&e.n_tokens, sizeof(e.n_tokens), batch + layout.batch_n_tokens);
	__u32 tid = (__u32)pid_tgid;
	bpf_map_update_elem(&decode_entries, &tid, &e, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(llama_decode_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = (__u32)pid_tgid;
	struct decode_entry *e = bpf_map_lookup_elem(&decode_entries, &tid);
	if (!e)
		return 0; /* entry happened before we attached */
	struct pi_token_event *ev = reserve(PI_EV_TOKEN, sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PI_EV_TOKEN, sizeof(*ev), pid_tgid);
		if (!e->ops || !ops_enabled)
			ev->h.reserved = PI_TOKEN_OPS_OFF;
		ev->start_ns = e->start_ns;
		ev->end_ns = now;
		ev->n_tokens = e->n_tokens;
		ev->ret = ret;
		submit(ev);
	}
	bpf_map_delete_elem(&decode_entries, &tid);
	return 0;
}

/* ---------------------------------------------------------------- graph level */

struct graph_entry {
	__u64 start_ns;
	__u64 cgraph, backend, seq;
	__u8 guid[16];
	__s32 n_nodes;
	__u32 ops_epoch; /* CPU graphs: ops_epoch at entry, or ~0 when operators were off */
	__u64 uid;       /* CPU graphs: ggml_cgraph.uid, 0 when unknown */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64); /* tid << 8 | api */
	__type(value, struct graph_entry);
} graph_entries SEC(".maps");

static __always_inline void graph_enter(__u32 api, void *backend, void *cgraph)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return;
	struct graph_entry g = { .start_ns = bpf_ktime_get_ns(), .cgraph = (__u64)cgraph,
				 .backend = (__u64)backend, .n_nodes = -1 };
	if (backend) {
		/* ggml_guid_t is a pointer to the 16 bytes */
		__u64 guid_ptr = 0;
		bpf_probe_read_user(&guid_ptr, sizeof(guid_ptr), backend + layout.backend_guid);
		if (guid_ptr)
			bpf_probe_read_user(g.guid, sizeof(g.guid), (const void *)guid_ptr);
	}
	bpf_probe_read_user(&g.n_nodes, sizeof(g.n_nodes), cgraph + layout.cgraph_n_nodes);
	/* Operator records name the CPU graph they belong to. */
	g.seq = __sync_fetch_and_add(&graph_counter, 1) + 1;
	if (api == 2) {
		current_graph_seq = g.seq;
		if (layout.cgraph_uid)
			bpf_probe_read_user(&g.uid, sizeof(g.uid), cgraph + layout.cgraph_uid);
		g.ops_epoch = ops_enabled && call_ops ? ops_epoch : ~0U;
		current_graph_known = g.uid && g.uid == described_uid;
		current_describe_failed = false;
	}
	__u64 key = ((__u64)(__u32)pid_tgid << 8) | api;
	bpf_map_update_elem(&graph_entries, &key, &g, BPF_ANY);
}

struct thread_state {
	__u64 start_ns, last_barrier_ns;
	__u64 tensor, fused;
	__u64 graph_seq;
	/* ith/nth read once per graph and thread (ggml keeps them in a struct on the
	 * thread's stack for the whole graph). */
	__u64 params, params_graph_seq;
	/* Thread 0: the position of its next node in the graph (node identities are kept per
	 * position). */
	__u64 pos_graph_seq;
	__u32 node_pos, reserved3;
	__s32 ith, nth;
	__u32 barriers, start_cpu;
	__u32 tid, tgid;
	__u32 active, reserved;
	__u16 samples, wait_samples; /* --wait sampled: this node's so far */
	__u16 barrier_state_samples;
	__u16 reserved4;
	/* Counter values where the current on-CPU stretch began, and the counts of earlier
	 * stretches of this node: sched_switch moves a running node's count into acc, so a
	 * node that sleeps or migrates (a major fault does both) is counted on every CPU it
	 * ran on, and only while it ran. */
	__u64 counters[PI_MAX_COUNTERS];
	__u64 acc[PI_MAX_COUNTERS];
	/* What the node had counted when the thread entered its last barrier. */
	__u64 counted[PI_MAX_COUNTERS];
	/* Finished nodes not sent yet, as the record that will carry them (flush_ops). */
	__u32 n_pending, reserved2;
	struct pi_op_event batch;
};

/* Threads with a node under way. Slots are freed when a thread exits, so this bounds
 * the threads computing at once, not over the run; the graph-exit flush walks every
 * bucket, so it is kept small (PROFINFER_THREAD_SLOTS raises it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct thread_state);
} thread_states SEC(".maps");

/* Never written: the initial value of a new thread slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} thread_state_zero SEC(".maps");

static __always_inline void read_counters(__u64 *out)
{
	__u32 cpu = bpf_get_smp_processor_id();
	for (__u32 c = 0; c < PI_MAX_COUNTERS; c++) {
		if (c >= n_counters)
			break;
		if (counter_source[c] == PI_COUNTER_TASK_MAJ_FLT) {
			out[c] = bpf_get_current_task_btf()->maj_flt;
			continue;
		}
		if (counter_source[c] == PI_COUNTER_TASK_MIN_FLT) {
			out[c] = bpf_get_current_task_btf()->min_flt;
			continue;
		}
		struct bpf_perf_event_value v = {};
		if (bpf_perf_event_read_value(&counters, c * n_cpus + cpu, &v, sizeof(v)) != 0) {
			out[c] = ~0ULL;
		} else if (v.enabled != v.running) {
			/* Multiplexed: a delta of two unscaled reads is not the node's count. */
			out[c] = ~0ULL;
			__sync_fetch_and_add(&dropped[PI_DROP_MULTIPLEXED], 1);
		} else {
			out[c] = v.counter;
		}
	}
}

/* Node records finished but not sent yet, summed over CPUs (one CPU may add what another
 * takes away): what a recording stopped mid-graph leaves behind, counted as lost. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} ops_pending SEC(".maps");

static __always_inline void count_pending(__s64 delta)
{
	__u32 zero = 0;
	__s64 *p = bpf_map_lookup_elem(&ops_pending, &zero);
	if (p)
		*p += delta;
}

/* Sends the thread's finished nodes in one record (copied into the ring buffer by the
 * kernel: the record is built in place in the thread's slot). */
static __always_inline void flush_ops(struct thread_state *st)
{
	__u32 n = st->n_pending;
	if (!n)
		return;
	st->n_pending = 0;
	count_pending(-(__s64)n);
	if (ablate == PI_ABLATE_SEND)
		return;
	struct pi_op_event *ev = &st->batch;
	fill_header_for(&ev->h, PI_EV_OP, sizeof(*ev), st->tgid, st->tid);
	ev->n = n > PI_OP_BATCH ? PI_OP_BATCH : n;
	ev->reserved = 0;
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	if (bpf_ringbuf_output(&events, ev, sizeof(*ev), avail >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP))
		__sync_fetch_and_add(&lost_events[PI_EV_OP], n);
}

/* Ends the thread's current node at NOW: one entry of its next op record. NOW_COUNTERS: the
 * counters read on the thread's own CPU at NOW by the caller (the next node's start reads
 * them once for both), or 0 to read them here. */
static __always_inline void end_op_with(struct thread_state *st, __u64 now, const __u64 *read)
{
	st->active = 0;
	struct pi_op_entry *e = &st->batch.ops[st->n_pending & (PI_OP_BATCH - 1)];
	e->start_ns = st->start_ns;
	e->compute_end_ns = st->barriers ? st->last_barrier_ns : now;
	e->end_ns = now;
	e->graph_seq = st->graph_seq;
	e->tensor = st->tensor;
	e->fused_tensor = st->fused;
	e->ith = st->ith;
	e->nth = st->nth;
	e->barriers = st->barriers;
	e->start_cpu = st->start_cpu;
	e->end_cpu = bpf_get_smp_processor_id();
	e->samples = st->samples;
	e->wait_samples = st->wait_samples;
	e->barrier_state_samples = st->barrier_state_samples;
	/* Counts up to the node's last barrier (its compute), read on the thread's own CPU;
	 * a node without a barrier can only be counted by its own thread. */
	__u64 read_here[PI_MAX_COUNTERS] = {};
	bool own = st->tid == (__u32)bpf_get_current_pid_tgid();
	if (!read && n_counters && !st->barriers && own)
		read_counters(read_here);
	const __u64 *now_counters = read ? read : read_here;
	for (__u32 c = 0; c < PI_MAX_COUNTERS; c++) {
		if (c >= n_counters)
			e->counters[c] = ~0ULL;
		else if (st->barriers)
			e->counters[c] = st->counted[c];
		else if (own && now_counters[c] != ~0ULL && st->counters[c] != ~0ULL)
			e->counters[c] = st->acc[c] + now_counters[c] - st->counters[c];
		else
			e->counters[c] = ~0ULL;
	}
	count_pending(1);
	if (++st->n_pending >= PI_OP_BATCH)
		flush_ops(st);
}

static __always_inline void end_op(struct thread_state *st, __u64 now)
{
	end_op_with(st, now, 0);
}

struct flush_ctx {
	__u64 now;
	__u32 tgid;
};

static long flush_thread(struct bpf_map *map, __u32 *key, struct thread_state *st, struct flush_ctx *fc)
{
	if (st->tgid != fc->tgid)
		return 0;
	if (st->active)
		end_op(st, fc->now);
	flush_ops(st);
	return 0;
}

static __always_inline void graph_exit(__u32 api)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return;
	__u64 now = bpf_ktime_get_ns();
	__u64 key = ((__u64)(__u32)pid_tgid << 8) | api;
	struct graph_entry *g = bpf_map_lookup_elem(&graph_entries, &key);
	if (!g)
		return;
	if (api == 2 && trace_ops) {
		/* Every thread's last node ends when the graph returns. */
		struct flush_ctx fc = { .now = now, .tgid = pid_tgid >> 32 };
		bpf_for_each_map_elem(&thread_states, flush_thread, &fc, 0);
		/* Every node of the graph described (the operator probes on throughout, no
		 * record lost): its uid is known from now on. */
		if (g->uid && !current_graph_known && g->ops_epoch == ops_epoch && ops_enabled && call_ops &&
		    !current_describe_failed)
			described_uid = g->uid;
	}
	struct pi_graph_event *ev = reserve(PI_EV_GRAPH, sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PI_EV_GRAPH, sizeof(*ev), pid_tgid);
		ev->start_ns = g->start_ns;
		ev->end_ns = now;
		ev->graph_seq = g->seq;
		ev->cgraph = g->cgraph;
		ev->backend = g->backend;
		__builtin_memcpy(ev->guid, g->guid, sizeof(ev->guid));
		ev->n_nodes = g->n_nodes;
		ev->api = api;
		submit(ev);
	}
	bpf_map_delete_elem(&graph_entries, &key);
}

/* enum ggml_status ggml_backend_graph_compute_async(ggml_backend_t, struct ggml_cgraph *) */
SEC("uprobe")
int BPF_KPROBE(backend_graph_enter, void *backend, void *cgraph)
{
	graph_enter(1, backend, cgraph);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(backend_graph_exit)
{
	graph_exit(1);
	return 0;
}

/* enum ggml_status ggml_graph_compute(struct ggml_cgraph *, struct ggml_cplan *) */
SEC("uprobe")
int BPF_KPROBE(cpu_graph_enter, void *cgraph)
{
	graph_enter(2, 0, cgraph);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(cpu_graph_exit)
{
	graph_exit(2);
	return 0;
}

/* ---------------------------------------------------------------- operator level */

static __always_inline void read_shape(struct pi_tensor_shape *s, const void *t)
{
	s->addr = (__u64)t;
	if (!t)
		return;
	bpf_probe_read_user(&s->ne, sizeof(s->ne), t + layout.tensor_ne);
	bpf_probe_read_user(&s->type, sizeof(s->type), t + layout.tensor_type);
	bpf_probe_read_user(&s->op, sizeof(s->op), t + layout.tensor_op);
	bpf_probe_read_user(&s->view_src, sizeof(s->view_src), t + layout.tensor_view_src);
}

static __always_inline void emit_experts(__u64 pid_tgid, __u64 seq, const void *node, const void *ids)
{
	__s64 ne[2] = {};
	__u64 nb1 = 0, data = 0;
	bpf_probe_read_user(ne, sizeof(ne), ids + layout.tensor_ne);
	bpf_probe_read_user(&nb1, sizeof(nb1), ids + layout.tensor_nb + 8);
	bpf_probe_read_user(&data, sizeof(data), ids + layout.tensor_data);
	if (ne[0] <= 0 || ne[1] <= 0 || !data)
		return;
	struct pi_experts_event *ev = reserve(PI_EV_EXPERTS, sizeof(*ev));
	if (!ev)
		return;
	fill_header(&ev->h, PI_EV_EXPERTS, sizeof(*ev), pid_tgid);
	ev->ts_ns = bpf_ktime_get_ns();
	ev->graph_seq = seq;
	ev->tensor = (__u64)node;
	ev->n_used = ne[0];
	ev->n_tokens = ne[1];
	ev->reserved = 0;
	__u32 k = ne[0], n = 0;
	for (__u32 i = 0; i < PI_MAX_EXPERT_IDS; i++) {
		__u32 tok = i / k, j = i % k;
		if (tok >= ne[1])
			break;
		__s32 id = -1;
		bpf_probe_read_user(&id, sizeof(id), (void *)(data + tok * nb1 + j * 4));
		ev->ids[i & (PI_MAX_EXPERT_IDS - 1)] = id;
		n = i + 1;
	}
	ev->n_ids = n;
	__u64 all = (__u64)ne[0] * (__u64)ne[1];
	if (all > n)
		__sync_fetch_and_add(&dropped[PI_DROP_EXPERT_IDS], all - n);
	submit(ev);
}

/* llama.cpp reuses its graph from token to token: a node's details (name, shapes,
 * sources: a 416-byte record and a dozen user reads) are sent when the tensor at its
 * position in the graph is new or changed, and user space repeats them for every graph
 * that runs it. Identity: the tensor's address and first bytes (type, shape, strides, op,
 * params, flags, sources, view) read in one go, kept per position (an array, no hashing). */
#define PI_NODE_ID_BYTES 248
#define PI_NODE_POSITIONS 8192
struct node_identity {
	__u8 b[PI_NODE_ID_BYTES];
};

struct sent_node {
	__u64 tensor;
	struct node_identity id;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PI_NODE_POSITIONS);
	__type(key, __u32);
	__type(value, struct sent_node);
} nodes_sent SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct node_identity);
} node_scratch SEC(".maps");

/* True when the tensor at graph position POS differs from what was last sent for it;
 * the identity read is left in *OUT and the position's slot in *SLOT. */
static __always_inline bool node_changed(const void *t, __u32 pos, struct node_identity **out, struct sent_node **slot)
{
	__u32 zero = 0;
	struct node_identity *id = bpf_map_lookup_elem(&node_scratch, &zero);
	if (!id)
		return true;
	*out = id;
	if (bpf_probe_read_user(id->b, sizeof(id->b), t) != 0)
		return true;
	__u32 key = pos & (PI_NODE_POSITIONS - 1);
	struct sent_node *sent = bpf_map_lookup_elem(&nodes_sent, &key);
	if (!sent)
		return true;
	*slot = sent;
	if (sent->tensor != (__u64)t)
		return true;
	for (int i = 0; i < PI_NODE_ID_BYTES / 8; i++)
		if (((__u64 *)id->b)[i] != ((__u64 *)sent->id.b)[i])
			return true;
	return false;
}

static __always_inline __u32 identity_op(const struct node_identity *id)
{
	__u32 off = layout.tensor_op;
	if (off > PI_NODE_ID_BYTES - 4)
		return ~0U;
	__u32 op = 0;
	__builtin_memcpy(&op, id->b + off, sizeof(op));
	return op;
}

static __always_inline __u64 identity_src(const struct node_identity *id, __u32 i)
{
	__u32 off = layout.tensor_src + i * 8;
	if (off > PI_NODE_ID_BYTES - 8)
		return 0;
	__u64 src = 0;
	__builtin_memcpy(&src, id->b + off, sizeof(src));
	return src;
}

static __always_inline bool emit_node(__u64 pid_tgid, __u64 seq, const void *t)
{
	struct pi_node_event *ev = reserve(PI_EV_NODE, sizeof(*ev));
	if (!ev)
		return false;
	fill_header(&ev->h, PI_EV_NODE, sizeof(*ev), pid_tgid);
	ev->ts_ns = bpf_ktime_get_ns();
	ev->graph_seq = seq;
	read_shape(&ev->dst, t);
	bpf_probe_read_user(&ev->op_param0, sizeof(ev->op_param0), t + layout.tensor_op_params);
	bpf_probe_read_user(&ev->flags, sizeof(ev->flags), t + layout.tensor_flags);
	bpf_probe_read_user(ev->src, sizeof(ev->src), t + layout.tensor_src);
	for (int i = 0; i < PI_DETAIL_SRC; i++)
		read_shape(&ev->src_shape[i], (const void *)ev->src[i]);
	bpf_probe_read_user_str(ev->name, sizeof(ev->name), t + layout.tensor_name);
	submit(ev);
	return true;
}

/* Sends node T's details and, once they are out, keeps its identity ID in its position's
 * SLOT (a lost record is not marked sent: it goes again next time). */
static __always_inline bool send_node(__u64 pid_tgid, __u64 seq, const void *t, const struct node_identity *id,
				      struct sent_node *slot)
{
	if (!emit_node(pid_tgid, seq, t) || !id || !slot)
		return false;
	slot->tensor = (__u64)t;
	for (int i = 0; i < PI_NODE_ID_BYTES / 8; i++)
		((__u64 *)slot->id.b)[i] = ((__u64 *)id->b)[i];
	return true;
}

/* The expert ids of node T when its identity ID says it is a MUL_MAT_ID. */
static __always_inline void experts_of(__u64 pid_tgid, __u64 seq, const void *t, const struct node_identity *id)
{
	__u64 ids = identity_src(id, 2);
	if (identity_op(id) == layout.op_mul_mat_id && ids)
		emit_experts(pid_tgid, seq, t, (const void *)ids);
}

/* Thread 0 describes node T, at position POS of graph SEQ: its details when they are
 * news, its expert ids (which change every token) always. */
static __always_inline void describe_node(__u64 pid_tgid, __u64 seq, __u32 pos, const void *t)
{
	if (current_graph_known) {
		/* Described before, and the same since (the graph's uid): only the expert ids,
		 * from the identity kept for the position (no user read). */
		__u32 key = pos & (PI_NODE_POSITIONS - 1);
		struct sent_node *sent = capture_experts ? bpf_map_lookup_elem(&nodes_sent, &key) : 0;
		if (sent && sent->tensor == (__u64)t)
			experts_of(pid_tgid, seq, t, &sent->id);
		return;
	}
	struct node_identity *id = 0;
	struct sent_node *slot = 0;
	if (node_changed(t, pos, &id, &slot) && !send_node(pid_tgid, seq, t, id, slot))
		current_describe_failed = true;
	if (capture_experts && id)
		experts_of(pid_tgid, seq, t, id);
}

/* A thread begins node TENSOR (and FUSED, when one kernel computes two nodes). */
static __always_inline void node_start(const void *params, const void *tensor, const void *fused)
{
	if (ablate == PI_ABLATE_TRAP)
		return;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid) || !ops_enabled || !call_ops)
		return;
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = (__u32)pid_tgid;
	struct thread_state *st = bpf_map_lookup_elem(&thread_states, &tid);
	if (!st) {
		/* A new slot starts as a copy of an all-zero state (too large for the stack). */
		__u32 zero_key = 0;
		struct thread_state *zero = bpf_map_lookup_elem(&thread_state_zero, &zero_key);
		if (zero)
			bpf_map_update_elem(&thread_states, &tid, zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&thread_states, &tid);
		if (!st) {
			__sync_fetch_and_add(&dropped[PI_DROP_THREAD_SLOTS], 1);
			return;
		}
		st->tid = tid;
		st->tgid = pid_tgid >> 32;
	}
	/* One reading of the counters ends the last node and begins this one. */
	__u64 counters_now[PI_MAX_COUNTERS] = {};
	if (n_counters)
		read_counters(counters_now);
	if (st->active)
		end_op_with(st, now, n_counters ? counters_now : 0);
	st->start_ns = now;
	st->last_barrier_ns = 0;
	st->barriers = 0;
	st->tensor = (__u64)tensor;
	st->fused = (__u64)fused;
	st->graph_seq = current_graph_seq;
	if ((__u64)params != st->params || st->graph_seq != st->params_graph_seq) {
		st->ith = -1;
		st->nth = -1;
		bpf_probe_read_user(&st->ith, sizeof(st->ith), params + layout.params_ith);
		bpf_probe_read_user(&st->nth, sizeof(st->nth), params + layout.params_nth);
		st->params = (__u64)params;
		st->params_graph_seq = st->graph_seq;
	}
	st->start_cpu = bpf_get_smp_processor_id();
	st->samples = 0;
	st->wait_samples = 0;
	st->barrier_state_samples = 0;
	if (n_counters) {
		for (__u32 c = 0; c < PI_MAX_COUNTERS; c++) {
			st->counters[c] = counters_now[c];
			st->acc[c] = 0;
		}
	}
	st->active = 1;
	if (st->ith == 0) {
		if (st->graph_seq != st->pos_graph_seq)
			st->node_pos = 0, st->pos_graph_seq = st->graph_seq;
		describe_node(pid_tgid, st->graph_seq, st->node_pos++, tensor);
		if (fused)
			describe_node(pid_tgid, st->graph_seq, st->node_pos++, fused);
	}
}

/* bool ggml_cpu_extra_compute_forward(struct ggml_compute_params *, struct ggml_tensor *):
 * ggml_compute_forward (inlined in today's builds) calls it first for every node it
 * computes, on every thread — the one per-node entry point that survives inlining. */
SEC("uprobe")
int BPF_KPROBE(extra_compute_forward, void *params, void *tensor)
{
	node_start(params, tensor, 0);
	return 0;
}

/* void ggml_compute_forward_rms_norm_mul_fused(params, struct ggml_tensor *rms_norm,
 * struct ggml_tensor *mul): the fused RMS_NORM+MUL kernel, which bypasses
 * ggml_compute_forward. */
SEC("uprobe")
int BPF_KPROBE(rms_norm_mul_fused, void *params, void *norm, void *mul)
{
	node_start(params, norm, mul);
	return 0;
}

/* void ggml_compute_forward(struct ggml_compute_params *, struct ggml_tensor *): older
 * builds where it is a symbol. */
SEC("uprobe")
int BPF_KPROBE(compute_forward, void *params, void *tensor)
{
	node_start(params, tensor, 0);
	return 0;
}

/* void ggml_barrier(struct ggml_threadpool *): the graph loop calls it after every node;
 * some kernels call it inside a node too. The last one before the next node ends the
 * node's compute. */
SEC("uprobe")
int BPF_KPROBE(barrier_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	__u32 tid = (__u32)pid_tgid;
	struct thread_state *st = bpf_map_lookup_elem(&thread_states, &tid);
	if (st && st->active) {
		st->last_barrier_ns = bpf_ktime_get_ns();
		st->barriers++;
		if (n_counters) {
			__u64 now[PI_MAX_COUNTERS] = {};
			read_counters(now);
			for (__u32 c = 0; c < PI_MAX_COUNTERS; c++)
				if (c < n_counters)
					st->counted[c] = (now[c] == ~0ULL || st->counters[c] == ~0ULL)
								 ? ~0ULL
								 : st->acc[c] + now[c] - st->counters[c];
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- sampled wait */

/* --wait sampled: instead of a trap at every ggml_barrier (the costliest probe: about
 * 20 % of decode on a 2-CPU machine), a CPU-clock perf event on every CPU samples the
 * running thread at a low rate. A sample finding a target thread inside a node counts
 * for that node, as waiting when the interrupted user IP lies in barrier code (the
 * ranges user space puts in wait_ranges: ggml_barrier in each libggml-cpu, libgomp's
 * text when ggml runs on OpenMP), as computing otherwise; samples in the kernel are left
 * out. */
struct pi_wait_range wait_ranges[PI_WAIT_RANGES] = {};
__u32 n_wait_ranges = 0;

SEC("perf_event")
int wait_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	__u32 tid = (__u32)pid_tgid;
	struct thread_state *st = bpf_map_lookup_elem(&thread_states, &tid);
	if (!st || !st->active)
		return 0;
	__u64 ip = PT_REGS_IP(&ctx->regs);
	/* A sample in the kernel (the kernel half of the address space on x86-64 and arm64)
	 * is a trap, a fault or a system call: neither the kernel's compute nor a barrier
	 * spin, and much of it is our own probes' trap. Left out. */
	if ((__s64)ip < 0)
		return 0;
	bool wait = false;
	for (__u32 i = 0; i < PI_WAIT_RANGES; i++) {
		if (i >= n_wait_ranges)
			break;
		if (ip >= wait_ranges[i].lo && ip < wait_ranges[i].hi) {
			wait = true;
			break;
		}
	}
	if (st->samples < 0xffff) {
		st->samples++;
		if (wait)
			st->wait_samples++;
		if (st->barriers)
			st->barrier_state_samples++;
	}
	return 0;
}

/* ---------------------------------------------------------------- scheduler */

/* Per-node counters follow the thread across CPUs (see thread_state). */
static __always_inline void account_switch(__u32 prev_tid, bool prev_ours, __u32 next_tid, bool next_ours)
{
	if (!n_counters)
		return;
	__u64 now[PI_MAX_COUNTERS] = {};
	read_counters(now);
	struct thread_state *st;
	/* A thread's own counts (task_struct) follow it by themselves: per-CPU ones only. */
	if (prev_ours && (st = bpf_map_lookup_elem(&thread_states, &prev_tid)) && st->active) {
		for (__u32 c = 0; c < PI_MAX_COUNTERS; c++)
			if (c < n_counters && counter_source[c] == PI_COUNTER_PERF && now[c] != ~0ULL && st->counters[c] != ~0ULL)
				st->acc[c] += now[c] - st->counters[c];
	}
	if (next_ours && (st = bpf_map_lookup_elem(&thread_states, &next_tid)) && st->active) {
		for (__u32 c = 0; c < PI_MAX_COUNTERS; c++)
			if (c < n_counters && counter_source[c] == PI_COUNTER_PERF)
				st->counters[c] = now[c];
	}
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev, struct task_struct *next, __s64 prev_state)
{
	__u32 prev_tgid = prev->tgid, next_tgid = next->tgid;
	if (prev_tgid != target_tgid && next_tgid != target_tgid)
		return 0;
	account_switch(prev->pid, prev_tgid == target_tgid, next->pid, next_tgid == target_tgid);
	if (!emit_sched)
		return 0;
	struct pi_switch_event *ev = reserve(PI_EV_SWITCH, sizeof(*ev));
	if (!ev)
		return 0;
	fill_header_for(&ev->h, PI_EV_SWITCH, sizeof(*ev), target_tgid,
			prev_tgid == target_tgid ? prev->pid : next->pid);
	ev->ts_ns = bpf_ktime_get_ns();
	ev->prev_tid = prev->pid;
	ev->prev_tgid = prev_tgid;
	ev->next_tid = next->pid;
	ev->next_tgid = next_tgid;
	ev->prev_state = prev_state;
	ev->preempt = preempt;
	ev->reserved = 0;
	bpf_probe_read_kernel_str(ev->prev_comm, sizeof(ev->prev_comm), prev->comm);
	bpf_probe_read_kernel_str(ev->next_comm, sizeof(ev->next_comm), next->comm);
	submit(ev);
	return 0;
}

/* Linux >= 5.18: sched_switch(preempt, prev, next, prev_state). */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return on_switch(preempt, prev, next, prev_state);
}

/* Before 5.14 the task's state was the long `state`, since then `__state`. */
struct task_struct___pre_5_14 {
	long state;
} __attribute__((preserve_access_index));

/* Linux 5.5 - 5.17 (vendor kernels of the boards: RK3588's 5.10, ...): the tracepoint has
 * no prev_state argument; the state is read from the task, as the kernel itself did, and a
 * preempted task counts as runnable (0). User space loads this one when the kernel's BTF
 * prototype of sched_switch has three arguments. */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_3arg, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__s64 state = 0;
	if (!preempt) {
		if (bpf_core_field_exists(prev->__state))
			state = BPF_CORE_READ(prev, __state);
		else
			state = BPF_CORE_READ((struct task_struct___pre_5_14 *)prev, state);
	}
	return on_switch(preempt, prev, next, state);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	if (p->tgid != target_tgid)
		return 0;
	struct pi_wakeup_event *ev = reserve(PI_EV_WAKEUP, sizeof(*ev));
	if (!ev)
		return 0;
	__u64 waker = bpf_get_current_pid_tgid();
	fill_header_for(&ev->h, PI_EV_WAKEUP, sizeof(*ev), target_tgid, p->pid);
	ev->ts_ns = bpf_ktime_get_ns();
	ev->waker_tid = (__u32)waker;
	ev->waker_tgid = waker >> 32;
	ev->target_cpu = p->wake_cpu;
	ev->reserved = 0;
	bpf_get_current_comm(ev->waker_comm, sizeof(ev->waker_comm));
	submit(ev);
	return 0;
}

/* ---------------------------------------------------------------- libraries */

/* glibc's loader calls _dl_debug_state (r_brk) before and after every change of the link
 * map: once the program's own libraries are mapped, and around each dlopen. */
SEC("uprobe")
int BPF_KPROBE(dl_debug_state)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!stop_on_library_load)
		return 0;
	if (!is_target(pid_tgid)) {
		if (!follow_children || target_chosen || !bpf_map_lookup_elem(&followed, &tgid))
			return 0;
		held_followers[tgid & (PI_HELD_SLOTS - 1)] = tgid;
	}
	/* Order matters: the stop is generated (synchronously here, interrupts are on in a
	 * uprobe) and counted before user space can hear of it, so the SIGCONT it sends on
	 * seeing the count or the record always comes after the SIGSTOP and cancels it. The
	 * other way round the target could be preempted between the record and the signal,
	 * be resumed first and then stop itself for good. */
	if (bpf_send_signal(19 /* SIGSTOP */) == 0)
		__sync_fetch_and_add(&library_stops, 1);
	struct pi_library_event *ev = reserve(PI_EV_LIBRARY, sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PI_EV_LIBRARY, sizeof(*ev), pid_tgid);
		ev->ts_ns = bpf_ktime_get_ns();
		bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP); /* the target waits, stopped */
	}
	return 0;
}

/* ---------------------------------------------------------------- GPU-API backends (Vulkan) */

/* The host side of ggml-vulkan, in the thread that computes the backend's graph: each
 * node's dispatch recorded into a command buffer (ggml_vk_build_graph, with the node: a
 * per-node record at --level op, like the CPU's operators), and the submits and fence
 * waits between the host and the device (--level graph). The device's own time per node
 * is not visible from the host without changing the target. Static functions of the
 * stock library, found by their symbols; their first arguments are the source's. */
struct gpu_entry {
	__u64 start_ns;
	__u64 tensor;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64); /* tid << 8 | kind */
	__type(value, struct gpu_entry);
} gpu_entries SEC(".maps");

/* Node positions of GPU graphs are kept apart from the CPU graph's (nodes_sent). */
#define PI_GPU_POSITION_BASE (PI_NODE_POSITIONS / 2)

static __always_inline __u64 backend_graph_seq(__u64 pid_tgid)
{
	__u64 key = ((__u64)(__u32)pid_tgid << 8) | 1;
	struct graph_entry *g = bpf_map_lookup_elem(&graph_entries, &key);
	return g ? g->seq : 0;
}

static __always_inline void gpu_enter(__u64 pid_tgid, __u32 kind, __u64 tensor)
{
	struct gpu_entry e = { .start_ns = bpf_ktime_get_ns(), .tensor = tensor };
	__u64 key = ((__u64)(__u32)pid_tgid << 8) | kind;
	bpf_map_update_elem(&gpu_entries, &key, &e, BPF_ANY);
}

static __always_inline void gpu_exit(__u32 kind, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return;
	__u64 key = ((__u64)(__u32)pid_tgid << 8) | kind;
	struct gpu_entry *e = bpf_map_lookup_elem(&gpu_entries, &key);
	if (!e)
		return;
	struct pi_gpu_event *ev = reserve(PI_EV_GPU, sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PI_EV_GPU, sizeof(*ev), pid_tgid);
		ev->graph_seq = backend_graph_seq(pid_tgid);
		ev->tensor = e->tensor;
		ev->start_ns = e->start_ns;
		ev->end_ns = bpf_ktime_get_ns();
		ev->kind = kind;
		ev->ret = ret;
		submit(ev);
	}
	bpf_map_delete_elem(&gpu_entries, &key);
}

/* static bool ggml_vk_build_graph(ggml_backend_vk_context *ctx, ggml_cgraph *cgraph,
 * int node_idx, ...): the node is cgraph->nodes[node_idx]. */
SEC("uprobe")
int BPF_KPROBE(vk_build_graph_enter, void *vkctx, void *cgraph, int node_idx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid) || !ops_enabled || !call_ops)
		return 0;
	__u64 nodes = 0, t = 0;
	if (node_idx < 0 || bpf_probe_read_user(&nodes, sizeof(nodes), cgraph + layout.cgraph_nodes) != 0 ||
	    bpf_probe_read_user(&t, sizeof(t), (const void *)(nodes + 8 * (__u64)node_idx)) != 0 || !t)
		return 0;
	gpu_enter(pid_tgid, PI_GPU_DISPATCH, t);
	struct node_identity *id = 0;
	struct sent_node *slot = 0;
	__u32 pos = PI_GPU_POSITION_BASE + ((__u32)node_idx & (PI_GPU_POSITION_BASE - 1));
	if (node_changed((const void *)t, pos, &id, &slot))
		send_node(pid_tgid, backend_graph_seq(pid_tgid), (const void *)t, id, slot);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(vk_build_graph_exit, int ret)
{
	gpu_exit(PI_GPU_DISPATCH, ret & 1);
	return 0;
}

#define PI_GPU_SPAN(name, kind)                                          \
	SEC("uprobe")                                                    \
	int BPF_KPROBE(name##_enter)                                     \
	{                                                                \
		__u64 pid_tgid = bpf_get_current_pid_tgid();             \
		if (is_target(pid_tgid))                                 \
			gpu_enter(pid_tgid, kind, 0);                    \
		return 0;                                                \
	}                                                                \
	SEC("uretprobe")                                                 \
	int BPF_KRETPROBE(name##_exit)                                   \
	{                                                                \
		gpu_exit(kind, 0);                                       \
		return 0;                                                \
	}
PI_GPU_SPAN(vk_submit, PI_GPU_SUBMIT)
PI_GPU_SPAN(vk_fence_wait, PI_GPU_FENCE_WAIT)
PI_GPU_SPAN(vk_synchronize, PI_GPU_SYNC)

/* ---------------------------------------------------------------- thread exit */

/* A process forked by the target or by one of its followers, while none has loaded
 * libllama: followed (threads are not processes: pid != tgid). */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!follow_children || target_chosen)
		return 0;
	__u32 ptgid = parent->tgid, ctgid = child->tgid, one = 1;
	if (child->pid != child->tgid)
		return 0;
	if (ptgid != target_tgid && !bpf_map_lookup_elem(&followed, &ptgid))
		return 0;
	bpf_map_update_elem(&followed, &ctgid, &one, BPF_ANY);
	return 0;
}

/* A thread's slots go with it: the release builds start a worker thread per graph, so a
 * long-running server would otherwise fill the maps with dead threads. A worker exits
 * before its graph returns: its last node ends here. Runs in the exiting thread. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(thread_exit, struct task_struct *p)
{
	if (p->tgid != target_tgid)
		return 0;
	__u32 tid = p->pid;
	struct thread_state *st = bpf_map_lookup_elem(&thread_states, &tid);
	if (st) {
		if (st->active)
			end_op(st, bpf_ktime_get_ns());
		flush_ops(st);
	}
	bpf_map_delete_elem(&thread_states, &tid);
	bpf_map_delete_elem(&decode_entries, &tid);
	for (__u32 k = PI_GPU_DISPATCH; k <= PI_GPU_SYNC; k++) {
		__u64 key = ((__u64)tid << 8) | k;
		bpf_map_delete_elem(&gpu_entries, &key);
	}
	return 0;
}
