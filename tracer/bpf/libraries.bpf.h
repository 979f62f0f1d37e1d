/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): loader stops: the dynamic loader changed the link map. */
#ifndef PROFINFER_LIBRARIES_BPF_H
#define PROFINFER_LIBRARIES_BPF_H

/* ---------------------------------------------------------------- libraries */

/* glibc's loader calls _dl_debug_state (r_brk) before and after every change of the link
 * map: once the program's own libraries are mapped, and around each dlopen. */
/* The first free slot (or the process's own) from tgid % PI_HELD_SLOTS on. Plain reads and
 * writes (no compare-and-swap before Linux 5.12): user space only ever clears slots, so a slot
 * seen free stays free but for another loader stop on another CPU at the same instant. With
 * every slot taken, the process's own home slot is overwritten (more than 8 held at once). */
static __always_inline void note_held(__u32 tgid)
{
	__u32 home = tgid & (PI_HELD_SLOTS - 1);
#pragma unroll
	for (__u32 i = 0; i < PI_HELD_SLOTS; i++) {
		__u32 k = (home + i) & (PI_HELD_SLOTS - 1);
		__u32 v = held_followers[k];
		if (v == 0 || v == tgid) {
			held_followers[k] = tgid;
			return;
		}
	}
	held_followers[home] = tgid;
}

SEC("uprobe")
int BPF_KPROBE(dl_debug_state)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!stop_on_library_load)
		return 0;
	if (!is_target(pid_tgid) &&
	    (!follow_children || target_chosen || !bpf_map_lookup_elem(&followed, &tgid)))
		return 0;
	/* Order matters: the stop is generated (synchronously here, interrupts are on in a
	 * uprobe), then the process noted as held, then counted, before user space can hear of
	 * it. User space reads the count, then takes the held processes, and SIGCONTs those it
	 * took: every stop it counted has its process among them, and any process it took has
	 * its SIGSTOP pending already, which the SIGCONT cancels. The other way round a process
	 * could be resumed first and then stop itself for good. Every process held is noted,
	 * the target too: user space may make a follower the target while the old one sits at
	 * a stop of its own, and must resume both. */
	if (bpf_send_signal(19 /* SIGSTOP */) == 0) {
		note_held(tgid);
		__sync_fetch_and_add(&library_stops, 1);
	}
	struct pi_library_event *ev = reserve(PI_EV_LIBRARY, sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PI_EV_LIBRARY, sizeof(*ev), pid_tgid);
		ev->ts_ns = bpf_ktime_get_ns();
		bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP); /* the target waits, stopped */
	}
	return 0;
}

#endif /* PROFINFER_LIBRARIES_BPF_H */
