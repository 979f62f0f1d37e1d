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
/* Processes held at a loader stop (followers, and the target), by tgid: user space (the
 * recorder, or the guardian process through a descriptor of this map) deletes each and
 * resumes the ones it deleted, so a process is resumed by one of them, once. A hash map, not
 * slots in .bss: two CPUs noting two processes at once must not pick the same free slot
 * (no compare-and-swap before 5.12); under load a preempted handler kept that window open,
 * and one follower of six stayed stopped for good in 3 runs of 5. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} held SEC(".maps");
/* Stop the target when the dynamic loader changes its link map, so that user space can
 * attach to a just-loaded library before any of its code runs. */
const volatile bool stop_on_library_load = false;
const volatile __u32 n_counters = 0; /* perf counters per CPU in `counters` */
const volatile __u32 counter_source[PI_MAX_COUNTERS] = {}; /* pi_counter_source of each */
const volatile __u32 n_cpus = 1;
const volatile bool capture_experts = false;
const volatile bool trace_ops = false; /* operator probes may run (--level op or full) */
const volatile bool emit_sched = false; /* sched records; sched_switch also runs for counters */
/* Where an operator-level run's cost goes (record --ablate, hidden, for the overhead study; the
 * trace is incomplete): PI_ABLATE_TRAP, the node probes return at once (the traps alone);
 * PI_ABLATE_SEND, they do all their work but send no op record (no consumer work);
 * PI_ABLATE_ATTACH, the uprobes go into profinfer's own process, not the target's (a
 * recording at any level that never traps: what being recorded costs without a probe). */
const volatile __u32 ablate = 0;
/* record --alternate W (hidden; the overhead study's paired measure): the operator probes stay in,
 * and llama_decode calls alternate between W whose operators are recorded and W whose are
 * not (the node probes trap and return: PI_TOKEN_OPS_OFF). Neighbouring calls of the same
 * run then compare the operator level's work with the trap alone. 0: off. */
const volatile __u32 alternate_calls = 0;
__u64 decode_calls = 0;
/* What the kernel's verifier accepts, probed by user space before load (kernel_features.h):
 * an atomic add whose old value is used (5.12), bpf_get_current_task_btf (5.11),
 * bpf_for_each_map_elem (5.13: without it the loader loads cpu_graph_exit_loop instead of
 * cpu_graph_exit). A branch a constant here rules out is dropped by the verifier unseen, so
 * the object loads on the vendor-era 5.10 kernels of the boards. */
const volatile bool has_atomic_fetch = true;
const volatile bool has_task_btf = true;

/* *V += 1, returning the value before. Without atomic fetch: the add is atomic, the read
 * after it is not — two callers on two CPUs in the same instant may both get the later
 * value (graph numbers: only when two contexts of one process begin graphs at once). */
static __always_inline __u64 fetch_add_one(__u64 *v)
{
	if (has_atomic_fetch)
		return __sync_fetch_and_add(v, 1);
	__sync_fetch_and_add(v, 1);
	return *(volatile __u64 *)v - 1;
}
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
/* The CPU graph under way (ggml_graph_compute entry to return), 0 between graphs: what
 * --level op-sampled samples. */
__u64 cpu_graph_running = 0;
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
 * handed over silently, and the consumer is woken only when the buffer fills past
 * wakeup_bytes, or by the first record after wakeup_interval_ns without a wake-up (so
 * that what is recorded reaches the database within about that long), or — with a gate
 * that must see each decode call as it ends (--budget, --qos-min-tps) — by every token
 * record. The consumer sleeps otherwise: no timer of its own. */
const volatile __u64 wakeup_bytes = 1 << 20;
const volatile __u64 wakeup_interval_ns = 1000000000;
/* Past wakeup_bytes, one wake-up per wakeup_gap_ns at most: until the woken recorder has
 * drained the buffer, every record is past it, and a wake-up per record kept the keeper
 * looping through them (dozens within 3 ms, measured). */
const volatile __u64 wakeup_gap_ns = 1000000;
const volatile bool wake_on_token = false;
__u64 last_wakeup_ns = 0;
/* With wake_on_token: a token record wakes the consumer only this long after the last wake-up
 * (0: every one). Written by user space while it runs: --budget sets it between its windows,
 * where the gate only counts calls and is not hurried (each wake-up of the recorder cost the
 * traced CPU ~0.1 ms: at one per token it was --budget's cost with nothing traced), and
 * clears it while a window is open (the window ends after its calls). */
__u64 token_wake_gap_ns = 0;

static __always_inline __u64 wake_flags(void)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 now = bpf_ktime_get_ns();
	__u64 since = now - last_wakeup_ns;
	if (avail >= wakeup_bytes ? since >= wakeup_gap_ns : since >= wakeup_interval_ns) {
		last_wakeup_ns = now;
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

/* A decode call's record: with wake_on_token, the consumer is woken for it (token_wake_gap_ns
 * since the last wake-up at least); otherwise as any record. */
static __always_inline __u64 token_wake_flags(void)
{
	if (!wake_on_token)
		return wake_flags();
	__u64 now = bpf_ktime_get_ns();
	if (now - last_wakeup_ns < token_wake_gap_ns)
		return wake_flags();
	last_wakeup_ns = now;
	return BPF_RB_FORCE_WAKEUP;
}

static __always_inline void submit(void *ev)
{
	bpf_ringbuf_submit(ev, wake_flags());
}

static __always_inline void *reserve(__u32 kind, __u32 size)
{
	void *p = bpf_ringbuf_reserve(&events, size, 0);
	if (!p && kind < PI_EV_KIND_MAX)
		__sync_fetch_and_add(&lost_events[kind], 1);
	return p;
}

/* The handlers, by concern, in the order they build on each other: one object, one
 * skeleton (tracer_bpf.skel.h). */
#include "token.bpf.h"
#include "graph.bpf.h"
#include "operator.bpf.h"
#include "wait_sample.bpf.h"
#include "sched.bpf.h"
#include "libraries.bpf.h"
#include "gpu.bpf.h"
#include "process.bpf.h"
