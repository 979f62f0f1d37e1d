/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): loader stops: the dynamic loader changed the link map. */
#ifndef PROFINFER_LIBRARIES_BPF_H
#define PROFINFER_LIBRARIES_BPF_H

/* ---------------------------------------------------------------- libraries */

/* glibc's loader calls _dl_debug_state (r_brk) before and after every change of the link
 * map: once the program's own libraries are mapped, and around each dlopen. */
/* Notes the process as held (BPF_NOEXIST: a process noted already keeps its element, which
 * user space's walk of the map must not see move). False if the map is full. */
static __always_inline bool note_held(__u32 tgid)
{
	__u32 one = 1;
	long err = bpf_map_update_elem(&held, &tgid, &one, BPF_NOEXIST);
	return err == 0 || err == -17 /* EEXIST */;
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
		if (note_held(tgid))
			__sync_fetch_and_add(&library_stops, 1);
		else /* 1024 processes held at once: this one goes on, untraced until next time */
			bpf_send_signal(18 /* SIGCONT: cancels the pending SIGSTOP */);
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
