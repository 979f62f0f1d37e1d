/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): the sampled split of compute and wait (--wait sampled). */
#ifndef PROFINFER_WAIT_SAMPLE_BPF_H
#define PROFINFER_WAIT_SAMPLE_BPF_H

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

/* --level op-sampled: operator time without a trap per node. A CPU-clock perf event per thread
 * of the target (inherited by the threads and processes it starts: nothing else on the machine
 * is interrupted) samples the running thread; a sample while one of the target's CPU graphs
 * runs is sent with the interrupted instruction and the graph (a few hundred records a second
 * per thread). User space names each instruction's function and, from it, the operator (most
 * kernels run in a function of their op: ggml_compute_forward_<op>..., or in the kernels of
 * matrix products). The graph and token probes stay: the sampler's cost per token is its
 * tick, not the ~500 traps of an exact operator level.
 *
 * Attached to a running process, a thread started while the events were being opened may have
 * an event of its own as well as one inherited: a thread's second sample within half a period
 * is that double and is dropped (sample_last). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} sample_last SEC(".maps");

/* The executable mappings of the libraries whose functions the trace names (the llama.cpp
 * libraries, libgomp; user space keeps them current at each loader stop). */
struct pi_wait_range named_ranges[PI_NAMED_RANGES] = {};
__u32 n_named_ranges = 0;

static __always_inline bool in_named_code(__u64 addr)
{
	__u32 n = *(volatile __u32 *)&n_named_ranges;
	for (__u32 i = 0; i < PI_NAMED_RANGES; i++) {
		if (i >= n)
			break;
		if (addr >= named_ranges[i].lo && addr < named_ranges[i].hi)
			return true;
	}
	return false;
}

/* A sample in code the trace cannot name (libm's tanhf under TANH or a softcapped flash
 * attention, libc's memcpy under CPY/GET_ROWS: Gemma2's 3 % "[other]" before) counts for the
 * llama.cpp function that called out: the first of the top stack words at SP that points into
 * named code. A leaf or a short chain of library calls keeps that return address within a few
 * words (glibc's tanhf: one push, then expm1f's); a stray word that happens to point into the
 * code would name a wrong function, never an unnamed one. */
static __always_inline __u64 caller_of(__u64 ip, __u64 sp)
{
	if ((__s64)ip < 0 || !sp || in_named_code(ip))
		return 0;
	__u64 words[PI_CALLER_WORDS];
	if (bpf_probe_read_user(words, sizeof(words), (const void *)sp))
		return 0;
	for (int i = 0; i < PI_CALLER_WORDS; i++)
		if (in_named_code(words[i]))
			return words[i];
	return 0;
}

/* One sample of a target thread at TS, interrupted at IP with its stack at SP: sent when one
 * of the target's CPU graphs runs (SEQ, read before TS was taken). */
static __always_inline void send_sample(__u64 pid_tgid, __u64 ts, __u64 ip, __u64 sp, __u64 seq)
{
	__u64 caller = caller_of(ip, sp);
	struct pi_sample_event *ev = reserve(PI_EV_SAMPLE, sizeof(*ev));
	if (!ev)
		return;
	fill_header(&ev->h, PI_EV_SAMPLE, sizeof(*ev), pid_tgid);
	ev->ts_ns = ts;
	ev->ip = ip;
	ev->graph_seq = seq;
	ev->caller = caller;
	submit(ev);
}

SEC("perf_event")
int op_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	/* The time first, then the graph: a graph found running began before it and ends after
	 * it (graph_exit clears cpu_graph_running before it reads the end). */
	__u64 ts = bpf_ktime_get_ns();
	__u64 seq = cpu_graph_running;
	__u32 tid = (__u32)pid_tgid;
	__u64 *last = bpf_map_lookup_elem(&sample_last, &tid);
	if (last && ts - *last < ctx->sample_period / 2)
		return 0;
	if (last)
		*last = ts;
	else
		bpf_map_update_elem(&sample_last, &tid, &ts, BPF_ANY);
	/* A sample in the kernel (ip < 0) looks at no stack: its sp is the kernel's. */
	if (seq)
		send_sample(pid_tgid, ts, PT_REGS_IP(&ctx->regs), PT_REGS_SP(&ctx->regs), seq);
	return 0;
}

/* --level op-sampled on the scheduler tick (the default where the kernel allows it): no timer
 * of ours. The kernel's tick interrupts every busy CPU HZ times a second anyway (250 on
 * Debian's kernels): when its hrtimer expires (tick_function: tick_nohz_handler, or
 * tick_sched_timer before 6.9, from kallsyms; every other timer returns at once) on a CPU
 * running a thread of the target, that thread is sampled at the user instruction its last
 * entry into the kernel saved (bpf_task_pt_regs): the instruction the tick interrupted when
 * it came from user code, or the one that entered the kernel when the tick found the thread
 * there (a page fault counts for the op that faulted). A perf event's sample is a timer of
 * its own, each expiry a VM exit in a KVM guest (8-12 µs taken from the sampled thread,
 * measured); the tick is paid whether we look or not, and this program adds only its own run
 * to it. (fentry or a kprobe on update_process_times would say whether the tick came from user
 * code, but kernels without kprobes or trampolines exist: this one; a raw tracepoint runs
 * everywhere with BTF.) Not where the tick stops on a CPU running one task (nohz_full): user
 * space falls back to the perf events there. */
const volatile __u64 tick_function = 0;

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(op_tick, struct hrtimer *timer, __s64 *now)
{
	if ((__u64)timer->function != tick_function)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	__u64 ts = bpf_ktime_get_ns();
	__u64 seq = cpu_graph_running;
	if (!seq)
		return 0;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	send_sample(pid_tgid, ts, PT_REGS_IP_CORE(regs), PT_REGS_SP_CORE(regs), seq);
	return 0;
}

#endif /* PROFINFER_WAIT_SAMPLE_BPF_H */
