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

#endif /* PROFINFER_WAIT_SAMPLE_BPF_H */
