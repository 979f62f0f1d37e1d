/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): the host side of GPU-API backends (Vulkan). */
#ifndef PROFINFER_GPU_BPF_H
#define PROFINFER_GPU_BPF_H

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

#endif /* PROFINFER_GPU_BPF_H */
