/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): loader stops: the dynamic loader changed the link map. */
#ifndef PROFINFER_LIBRARIES_BPF_H
#define PROFINFER_LIBRARIES_BPF_H

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

#endif /* PROFINFER_LIBRARIES_BPF_H */
