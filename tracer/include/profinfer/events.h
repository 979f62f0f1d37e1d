/* The event records shared by the BPF programs and the user-space consumer.
 * Every record starts with pi_event_header; `size` is the whole record's size and the
 * consumer rejects a sample whose size does not match its kind. Bump
 * PI_EVENTS_VERSION whenever a record changes. */
#ifndef PROFINFER_EVENTS_H
#define PROFINFER_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define PI_EVENTS_VERSION 9

#define PI_MAX_COUNTERS 6   /* perf counters read per operator */
#define PI_MAX_SRC 10       /* GGML_MAX_SRC */
#define PI_DETAIL_SRC 3     /* sources whose type and shape are recorded */
#define PI_NAME_LEN 64      /* GGML_MAX_NAME */
#define PI_MAX_EXPERT_IDS 64
#define PI_COMM_LEN 16
#define PI_WAIT_RANGES 32 /* code ranges where a sampled thread counts as waiting */
#define PI_NAMED_RANGES 16 /* executable mappings of the libraries whose functions a trace names */
#define PI_CALLER_WORDS 8 /* stack words a sample outside them looks at for a return into them */
/* Where a counter's value comes from: a per-CPU perf event, or the running thread's own
 * task_struct (its fault counts: exact per thread, a plain load instead of a perf read). */
enum pi_counter_source { PI_COUNTER_PERF = 0, PI_COUNTER_TASK_MAJ_FLT = 1, PI_COUNTER_TASK_MIN_FLT = 2 };

enum pi_ablate { PI_ABLATE_NONE = 0, PI_ABLATE_TRAP = 1, PI_ABLATE_SEND = 2, PI_ABLATE_ATTACH = 3 };

#define PI_OP_BATCH 16  /* node records per PI_EV_OP record (one ring-buffer reservation) */

enum pi_event_kind {
	PI_EV_TOKEN = 1,   /* one llama_decode call, entry to return */
	PI_EV_LIBRARY = 2, /* the dynamic loader changed the link map (dlopen); target stopped */
	PI_EV_GRAPH = 3,   /* one graph computed by a backend */
	PI_EV_OP = 4,      /* up to PI_OP_BATCH nodes of one thread: timing and counters */
	PI_EV_NODE = 5,    /* one node's tensor: op, name, shapes (from thread 0) */
	PI_EV_EXPERTS = 6, /* the expert ids a MUL_MAT_ID node uses */
	PI_EV_SWITCH = 7,  /* sched_switch involving a target thread */
	PI_EV_WAKEUP = 8,  /* sched_wakeup of a target thread */
	PI_EV_GPU = 9,     /* host side of a GPU-API backend (Vulkan): a node's dispatch, a submit, a wait */
	PI_EV_BATCH = 10,  /* the sequence, position and output flag of each token of a llama_decode batch */
	PI_EV_SAMPLE = 11, /* --level op-sampled: a CPU-clock sample of a target thread while a CPU graph runs */
	PI_EV_KIND_MAX = 12,
};

/* Data the probes saw but could not record whole, counted per reason (besides records
 * lost to a full ring buffer, counted per event kind). */
enum pi_drop_kind {
	PI_DROP_EXPERT_IDS = 0,    /* expert ids beyond PI_MAX_EXPERT_IDS in one MUL_MAT_ID node */
	PI_DROP_THREAD_SLOTS = 1,  /* node starts of a thread that found no free slot */
	PI_DROP_MULTIPLEXED = 2,   /* counter reads whose counter was not running all the time */
	PI_DROP_KIND_MAX = 3,
};

struct pi_event_header {
	__u32 kind;
	__u32 size;
	__u32 pid; /* tgid */
	__u32 tid;
	__u32 cpu;
	__u32 reserved;
};

/* pi_token_event h.reserved: flags. OPS_OFF: the operator probes were switched off for this
 * call (--budget, --qos-min-tps) or switched during it: its operators are not (all) recorded. */
#define PI_TOKEN_OPS_OFF 1u

struct pi_token_event {
	struct pi_event_header h;
	__u64 start_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) at entry */
	__u64 end_ns;   /* ... at return */
	__s32 n_tokens; /* llama_batch.n_tokens */
	__s32 ret;      /* llama_decode's return value */
};

/* A llama_decode batch's tokens, read at the call's return just before its PI_EV_TOKEN record
 * (same thread): per token its first sequence id (llama_batch.seq_id[i][0]), its position and
 * whether the caller asked for its output (logits[i]). Sent only for batches that carry
 * them (a server's; llama_batch_get_one's have none: llama.cpp fills them in). The record's
 * size is the header's and n_read tokens'; tokens beyond PI_MAX_BATCH_READ are not read. */
#define PI_MAX_BATCH_READ 2048
#define PI_BATCH_OUTPUT 0x80000000u /* pos_out: the token's output was asked for */
struct pi_batch_token {
	__s32 seq;
	__u32 pos_out; /* position | PI_BATCH_OUTPUT */
};
struct pi_batch_event {
	struct pi_event_header h;
	__u64 start_ns;  /* the call's entry: its PI_EV_TOKEN start_ns */
	__s32 n_tokens;  /* llama_batch.n_tokens */
	__u32 n_read;    /* tokens below: min(n_tokens, PI_MAX_BATCH_READ) */
	struct pi_batch_token tok[PI_MAX_BATCH_READ];
};

struct pi_library_event {
	struct pi_event_header h;
	__u64 ts_ns;
};

struct pi_graph_event {
	struct pi_event_header h;
	__u64 start_ns, end_ns;
	__u64 graph_seq; /* numbers the graphs of the run; ops carry it */
	__u64 cgraph;    /* address of the ggml_cgraph */
	__u64 backend;   /* address of the ggml_backend (0 for ggml_graph_compute) */
	__u8 guid[16];   /* *backend->guid */
	__s32 n_nodes;
	__u32 api;       /* 1: ggml_backend_graph_compute_async, 2: ggml_graph_compute */
};

/* Per thread and node: start when the thread begins the node, compute_end when it
 * enters the barrier that ends the node, end when it begins the next node (or the
 * graph returns). end - compute_end is time spent waiting for the other threads. */
struct pi_op_entry {
	__u64 start_ns, compute_end_ns, end_ns;
	__u64 graph_seq;
	__u64 tensor;       /* address of the node's ggml_tensor */
	__u64 fused_tensor; /* second node of a fused kernel, else 0 */
	__s32 ith, nth;
	__u16 barriers;     /* ggml_barrier calls within the node (intra-op sync) */
	/* --wait both: samples taken after the thread's first barrier call in the node (the
	 * exact probes' view: with one barrier, its wait), to check the IP classification on
	 * the very same samples. */
	__u16 barrier_state_samples;
	__u32 start_cpu;
	__u32 end_cpu;
	/* CPU-clock samples that found the thread in this node, and those of them whose
	 * user IP was inside a barrier's code (ggml_barrier, libgomp): --wait sampled. */
	__u16 samples, wait_samples;
	__u64 counters[PI_MAX_COUNTERS]; /* deltas; valid when the thread stayed on one CPU */
};

/* Code addresses [lo, hi) where a sampled thread counts as waiting (--wait sampled). */
struct pi_wait_range {
	__u64 lo, hi;
};

/* A thread's finished nodes, sent together: one reservation per PI_OP_BATCH nodes instead
 * of one per node (the header's tid is the thread's). */
struct pi_op_event {
	struct pi_event_header h;
	__u32 n;
	__u32 reserved;
	struct pi_op_entry ops[PI_OP_BATCH];
};

struct pi_tensor_shape {
	__u64 addr;
	__u64 view_src; /* the tensor a view looks into (ggml keeps it pointing at the base) */
	__s64 ne[4];
	__u32 type;
	__u32 op;
};

struct pi_node_event {
	struct pi_event_header h;
	__u64 ts_ns;
	__u64 graph_seq;
	struct pi_tensor_shape dst;
	__s32 op_param0;  /* op_params[0]: the unary/glu op for UNARY and GLU nodes */
	__s32 flags;
	__u64 src[PI_MAX_SRC];
	struct pi_tensor_shape src_shape[PI_DETAIL_SRC];
	char name[PI_NAME_LEN];
};

struct pi_experts_event {
	struct pi_event_header h;
	__u64 ts_ns;
	__u64 graph_seq;
	__u64 tensor;      /* the MUL_MAT_ID node */
	__s32 n_used;      /* ids->ne[0] (k) */
	__s32 n_tokens;    /* ids->ne[1] */
	__s32 n_ids;       /* ids recorded (<= PI_MAX_EXPERT_IDS, row-major by token) */
	__s32 reserved;
	__s32 ids[PI_MAX_EXPERT_IDS];
};

struct pi_switch_event {
	struct pi_event_header h; /* cpu: where the switch happened */
	__u64 ts_ns;
	__u32 prev_tid, prev_tgid, next_tid, next_tgid;
	__s64 prev_state;
	__u32 preempt;
	__u32 reserved;
	char prev_comm[PI_COMM_LEN];
	char next_comm[PI_COMM_LEN];
};

struct pi_wakeup_event {
	struct pi_event_header h; /* tid: the woken thread; cpu: where the wakeup ran */
	__u64 ts_ns;
	__u32 waker_tid, waker_tgid;
	__u32 target_cpu;
	__u32 reserved;
	char waker_comm[PI_COMM_LEN];
};

/* Where the fields the probes read live in the target's structs (from DWARF, or the
 * built-in table for the pinned llama.cpp). Set by user space before load. */
/* pi_gpu_event.kind: what the backend's host thread was doing from start to end. */
enum pi_gpu_kind {
	PI_GPU_DISPATCH = 1,   /* ggml_vk_build_graph: one node recorded into a command buffer */
	PI_GPU_SUBMIT = 2,     /* ggml_vk_submit: command buffers handed to the queue */
	PI_GPU_FENCE_WAIT = 3, /* ggml_vk_wait_for_fence: the host waits for the device */
	PI_GPU_SYNC = 4,       /* ggml_vk_synchronize: the backend's synchronize */
};

struct pi_gpu_event {
	struct pi_event_header h;
	__u64 graph_seq; /* the backend graph (ggml_backend_graph_compute_async) it happened in; 0 outside */
	__u64 tensor;    /* DISPATCH: the node; 0 otherwise */
	__u64 start_ns, end_ns;
	__u32 kind;
	__s32 ret;       /* DISPATCH: ggml_vk_build_graph's result (1: the node ended a command buffer) */
};

/* One sample of the running thread (h.tid, h.cpu) of the target while a CPU graph of it runs:
 * the interrupted instruction (a kernel address when the sample fell in the kernel: a trap,
 * a fault, a system call), and the graph. */
struct pi_sample_event {
	struct pi_event_header h;
	__u64 ts_ns;
	__u64 ip;
	__u64 graph_seq;
	/* ip outside the libraries whose functions the trace names (libm's tanhf, libc's
	 * memcpy): the first of the top PI_CALLER_WORDS stack words that points into them (the
	 * return address into the llama.cpp function that called out); 0 otherwise. */
	__u64 caller;
};

struct pi_layout {
	__u32 tensor_type, tensor_ne, tensor_op, tensor_op_params, tensor_flags;
	__u32 tensor_src, tensor_data, tensor_name, tensor_nb, tensor_view_src;
	__u32 params_ith, params_nth;
	__u32 cgraph_n_nodes, cgraph_nodes;
	__u32 cgraph_uid; /* 0: the ggml has no ggml_cgraph.uid */
	__u32 backend_guid;
	__u32 batch_n_tokens, batch_pos, batch_seq_id, batch_logits;
	__u32 op_mul_mat_id; /* value of GGML_OP_MUL_MAT_ID */
};

#endif
