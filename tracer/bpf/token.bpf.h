/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): token level: llama_decode calls. */
#ifndef PROFINFER_TOKEN_BPF_H
#define PROFINFER_TOKEN_BPF_H

/* ---------------------------------------------------------------- token level */

struct decode_entry {
	__u64 start_ns;
	__s32 n_tokens;
	__u32 ops; /* ops_enabled at entry */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct decode_entry);
} decode_entries SEC(".maps");

/* llama_decode(struct llama_context *ctx, struct llama_batch batch): the 56-byte batch
 * goes by value. x86-64 SysV passes it in memory just above the return address;
 * AAPCS64 passes a composite over 16 bytes by reference in the second register. */
SEC("uprobe")
int BPF_KPROBE(llama_decode_enter, void *lctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return 0;
	bool ops = ops_enabled;
	if (alternate_calls && (fetch_add_one(&decode_calls) / alternate_calls) % 2)
		ops = false;
	struct decode_entry e = { .start_ns = bpf_ktime_get_ns(), .n_tokens = -1, .ops = ops };
	call_ops = ops;
#if defined(__TARGET_ARCH_x86)
	const void *batch = (const void *)(PT_REGS_SP(ctx) + 8);
#else
	const void *batch = (const void *)PT_REGS_PARM2(ctx);
#endif
	bpf_probe_read_user(&e.n_tokens, sizeof(e.n_tokens), batch + layout.batch_n_tokens);
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
	struct pi_token_event *ev = reserve(PI_EV_TOKEN, sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PI_EV_TOKEN, sizeof(*ev), pid_tgid);
		if (!e->ops || !ops_enabled)
			ev->h.reserved = PI_TOKEN_OPS_OFF;
		ev->start_ns = e->start_ns;
		ev->end_ns = now;
		ev->n_tokens = e->n_tokens;
		ev->ret = ret;
		bpf_ringbuf_submit(ev, wake_on_token ? BPF_RB_FORCE_WAKEUP : wake_flags());
	}
	bpf_map_delete_elem(&decode_entries, &tid);
	return 0;
}

#endif /* PROFINFER_TOKEN_BPF_H */
