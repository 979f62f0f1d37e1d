/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): processes and threads: following a launched command's tree, thread exit. */
#ifndef PROFINFER_PROCESS_BPF_H
#define PROFINFER_PROCESS_BPF_H

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

#endif /* PROFINFER_PROCESS_BPF_H */
