/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): graph level: graph computes, and the flush of the operator records they end. */
#ifndef PROFINFER_GRAPH_BPF_H
#define PROFINFER_GRAPH_BPF_H

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
	g.seq = fetch_add_one(&graph_counter) + 1;
	if (api == 2) {
		current_graph_seq = g.seq;
		cpu_graph_running = g.seq;
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
			out[c] = has_task_btf ? bpf_get_current_task_btf()->maj_flt
					      : BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), maj_flt);
			continue;
		}
		if (counter_source[c] == PI_COUNTER_TASK_MIN_FLT) {
			out[c] = has_task_btf ? bpf_get_current_task_btf()->min_flt
					      : BPF_CORE_READ((struct task_struct *)bpf_get_current_task(), min_flt);
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
	if (bpf_ringbuf_output(&events, ev, sizeof(*ev), wake_flags()))
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
	__u32 tgid, tid;
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

/* The threads of the CPU graph under way by their index in it (ggml's ith): node_start
 * writes its thread's tid once per graph, and the graph's exit visits its nth threads here
 * instead of walking every bucket of thread_states with bpf_for_each_map_elem (11.1 us a
 * graph on a Zen 4 against ~1 us: experiments/handler_cost.sh op). Kernels without
 * bpf_for_each_map_elem (before 5.13) have only this; with it, a graph of more than
 * PI_GRAPH_THREADS threads is walked whole, else its threads past PI_GRAPH_THREADS keep
 * their last node open until their next one (a board has 8 cores; GGML_MAX_N_THREADS is 512). */
#define PI_GRAPH_THREADS 64
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PI_GRAPH_THREADS);
	__type(key, __u32);
	__type(value, __u32);
} graph_threads SEC(".maps");

static __always_inline void note_graph_thread(__s32 ith, __u32 tid)
{
	if (ith < 0 || ith >= PI_GRAPH_THREADS)
		return;
	__u32 key = ith;
	bpf_map_update_elem(&graph_threads, &key, &tid, BPF_ANY);
}

/* True when the graph's threads were all found here: the calling thread's record names the
 * graph and its nth fits graph_threads. */
static __always_inline bool flush_graph_threads(struct flush_ctx *fc, __u64 seq)
{
	struct thread_state *self = bpf_map_lookup_elem(&thread_states, &fc->tid);
	if (!self || self->graph_seq != seq)
		return false;
	__s32 nth = self->nth;
	bool all = nth >= 1 && nth <= PI_GRAPH_THREADS;
	for (__s32 i = 0; i < PI_GRAPH_THREADS; i++) {
		if (i >= nth)
			break;
		/* A copy for the lookup: the counter itself must stay in a register, where the
		 * verifier tracks its bounds (through the stack it lost them: "infinite loop"). */
		__u32 key = i;
		__u32 *tid = bpf_map_lookup_elem(&graph_threads, &key);
		if (!tid)
			break;
		struct thread_state *st = bpf_map_lookup_elem(&thread_states, tid);
		if (st && st->graph_seq == seq)
			flush_thread(0, tid, st, fc);
	}
	return all;
}

/* API: 1 the backend's graph_compute_async, 2 the CPU's ggml_graph_compute. The graph's
 * threads are found through graph_threads; where they are not all there, LOOP false
 * (cpu_graph_exit, kernels from 5.13) walks thread_states with bpf_for_each_map_elem. */
static __always_inline void graph_exit(__u32 api, bool loop)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return;
	/* Before the graph's end is read: a CPU-clock sample may interrupt this handler (uprobe
	 * programs run without the guard that keeps other BPF programs out), and one that finds
	 * the graph still running must not be later than its end. */
	if (api == 2)
		cpu_graph_running = 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 key = ((__u64)(__u32)pid_tgid << 8) | api;
	struct graph_entry *g = bpf_map_lookup_elem(&graph_entries, &key);
	if (!g)
		return;
	if (api == 2 && trace_ops) {
		/* Every thread's last node ends when the graph returns. */
		struct flush_ctx fc = { .now = now, .tgid = pid_tgid >> 32, .tid = (__u32)pid_tgid };
		if (!flush_graph_threads(&fc, g->seq) && !loop)
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
	graph_exit(1, false);
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
	graph_exit(2, false);
	return 0;
}

/* The same on kernels without bpf_for_each_map_elem; the loader loads one of the two. */
SEC("uretprobe")
int BPF_KRETPROBE(cpu_graph_exit_loop)
{
	graph_exit(2, true);
	return 0;
}

#endif /* PROFINFER_GRAPH_BPF_H */
