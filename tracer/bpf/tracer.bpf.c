// SPDX-License-Identifier: GPL-2.0
/* profinfer's kernel side: probe handlers that stamp and forward events to one
 * ring buffer. Settings are read-only globals set by user space before load. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "profinfer/events.h"

char LICENSE[] SEC("license") = "GPL";

/* Only this process is traced (uprobes are attached per pid too; this guards the
 * shared handlers against any other mapping of the same library). */
const volatile __u32 target_tgid = 0;
/* Stop the target when the dynamic loader changes its link map, so that user space can
 * attach to a just-loaded library before any of its code runs. */
const volatile bool stop_on_library_load = false;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} events SEC(".maps");

/* Records that could not be reserved, per event kind; read at the end of the run. */
__u64 lost_events[PI_EV_KIND_MAX] = {};

struct decode_entry {
	__u64 start_ns;
	__s32 n_tokens;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct decode_entry);
} decode_entries SEC(".maps");

static __always_inline bool is_target(__u64 pid_tgid)
{
	return (__u32)(pid_tgid >> 32) == target_tgid;
}

static __always_inline void fill_header(struct pi_event_header *h, __u32 kind, __u32 size,
					__u64 pid_tgid)
{
	h->kind = kind;
	h->size = size;
	h->pid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->cpu = bpf_get_smp_processor_id();
	h->reserved = 0;
}

/* llama_decode(struct llama_context *ctx, struct llama_batch batch): the 56-byte batch
 * goes by value. x86-64 SysV passes it in memory just above the return address;
 * AAPCS64 passes a composite over 16 bytes by reference in the second register. */
SEC("uprobe")
int BPF_KPROBE(llama_decode_enter, void *lctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	struct decode_entry e = { .start_ns = bpf_ktime_get_ns(), .n_tokens = -1 };
#if defined(__TARGET_ARCH_x86)
	const void *batch = (const void *)(PT_REGS_SP(ctx) + 8);
#else
	const void *batch = (const void *)PT_REGS_PARM2(ctx);
#endif
	bpf_probe_read_user(&e.n_tokens, sizeof(e.n_tokens), batch);
	__u32 tid = (__u32)pid_tgid;
	bpf_map_update_elem(&decode_entries, &tid, &e, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(llama_decode_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = (__u32)pid_tgid;
	struct decode_entry *e = bpf_map_lookup_elem(&decode_entries, &tid);
	if (!e)
		return 0; /* entry happened before we attached */
	struct pi_token_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&lost_events[PI_EV_TOKEN], 1);
		bpf_map_delete_elem(&decode_entries, &tid);
		return 0;
	}
	fill_header(&ev->h, PI_EV_TOKEN, sizeof(*ev), pid_tgid);
	ev->start_ns = e->start_ns;
	ev->end_ns = now;
	ev->n_tokens = e->n_tokens;
	ev->ret = ret;
	bpf_ringbuf_submit(ev, 0);
	bpf_map_delete_elem(&decode_entries, &tid);
	return 0;
}

/* glibc's loader calls _dl_debug_state (r_brk) before and after every change of the link
 * map: once the program's own libraries are mapped, and around each dlopen. */
SEC("uprobe")
int BPF_KPROBE(dl_debug_state)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid) || !stop_on_library_load)
		return 0;
	struct pi_library_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (ev) {
		fill_header(&ev->h, PI_EV_LIBRARY, sizeof(*ev), pid_tgid);
		ev->ts_ns = bpf_ktime_get_ns();
		bpf_ringbuf_submit(ev, 0);
	} else {
		__sync_fetch_and_add(&lost_events[PI_EV_LIBRARY], 1);
	}
	bpf_send_signal(19 /* SIGSTOP */);
	return 0;
}
