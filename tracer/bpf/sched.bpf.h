/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): scheduler events of target threads. */
#ifndef PROFINFER_SCHED_BPF_H
#define PROFINFER_SCHED_BPF_H

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

#endif /* PROFINFER_SCHED_BPF_H */
