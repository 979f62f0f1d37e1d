/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): operator level: ggml nodes, their details and expert ids, barriers. */
#ifndef PROFINFER_OPERATOR_BPF_H
#define PROFINFER_OPERATOR_BPF_H

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
 * params, flags, sources, view) read in one go, and the shapes of the sources whose shapes
 * are recorded (a node's own bytes need not change when a source's shape does: flash
 * attention's output keeps its shape while K and V grow with the KV cache's used cells),
 * kept per position (an array, no hashing). */
#define PI_NODE_ID_BYTES 248
#define PI_NODE_POSITIONS 8192
struct node_identity {
	__u8 b[PI_NODE_ID_BYTES];
	__s64 src_ne[PI_DETAIL_SRC][4];
};
#define PI_NODE_ID_WORDS (sizeof(struct node_identity) / 8)

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
	for (int i = 0; i < PI_DETAIL_SRC; i++) {
		const void *src = (const void *)identity_src(id, i);
		if (!src || bpf_probe_read_user(id->src_ne[i], sizeof(id->src_ne[i]), src + layout.tensor_ne) != 0)
			__builtin_memset(id->src_ne[i], 0, sizeof(id->src_ne[i]));
	}
	__u32 key = pos & (PI_NODE_POSITIONS - 1);
	struct sent_node *sent = bpf_map_lookup_elem(&nodes_sent, &key);
	if (!sent)
		return true;
	*slot = sent;
	if (sent->tensor != (__u64)t)
		return true;
	for (int i = 0; i < PI_NODE_ID_WORDS; i++)
		if (((__u64 *)id)[i] != ((__u64 *)&sent->id)[i])
			return true;
	return false;
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
	for (int i = 0; i < PI_NODE_ID_WORDS; i++)
		((__u64 *)&slot->id)[i] = ((__u64 *)id)[i];
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
		note_graph_thread(st->ith, tid);
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

#endif /* PROFINFER_OPERATOR_BPF_H */
