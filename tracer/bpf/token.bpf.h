/* SPDX-License-Identifier: GPL-2.0 */
/* Part of tracer.bpf.c (included there, in order): token level: llama_decode calls. */
#ifndef PROFINFER_TOKEN_BPF_H
#define PROFINFER_TOKEN_BPF_H

/* ---------------------------------------------------------------- token level */

struct decode_entry {
	__u64 start_ns;
	__s32 n_tokens;
	__u32 ops; /* ops_enabled at entry */
	__u64 pos, seq_id, logits; /* the batch's arrays (0: llama.cpp fills them in) */
};

/* Where a batch's tokens are gathered before they go out in one record. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pi_batch_event);
} batch_scratch SEC(".maps");

/* One token of a batch: its sequence, position and output flag into B's slot I. No branch on
 * what is read: a failed read leaves zeros (a NULL logits array: no outputs asked for, fixed
 * by the caller). */
static __always_inline void read_batch_token(const struct decode_entry *e, struct pi_batch_event *b, __u32 i)
{
	i &= PI_MAX_BATCH_READ - 1;
	__s32 pos = 0, seq = 0;
	__s8 out = 0;
	__u64 seq_ptr = 0;
	bpf_probe_read_user(&pos, sizeof(pos), (const void *)(e->pos + 4 * (__u64)i));
	bpf_probe_read_user(&seq_ptr, sizeof(seq_ptr), (const void *)(e->seq_id + 8 * (__u64)i));
	bpf_probe_read_user(&seq, sizeof(seq), (const void *)seq_ptr);
	bpf_probe_read_user(&out, sizeof(out), (const void *)(e->logits + (__u64)i));
	b->tok[i].seq = seq;
	b->tok[i].pos_out = ((__u32)pos & ~PI_BATCH_OUTPUT) | ((__u32)(out != 0) << 31);
}

struct batch_loop_ctx {
	const struct decode_entry *e;
	struct pi_batch_event *b;
};

static long batch_token_cb(__u32 i, void *ctx)
{
	struct batch_loop_ctx *c = ctx;
	read_batch_token(c->e, c->b, i);
	return 0;
}

/* Every token's sequence, position and output flag, sent before the call's token record;
 * runs of a sequence are found by the consumer. UNROLLED: a bounded loop the verifier walks
 * once per iteration (PI_MAX_BATCH_READ of them: 0.7 s of CPU at each start, 83 % of its
 * 1M-instruction limit, Linux 6.18) for kernels before bpf_loop (5.17); else bpf_loop, whose
 * callback is verified once. */
static __always_inline void send_batch(const struct decode_entry *e, __u64 pid_tgid, bool unrolled)
{
	if (!e->pos || !e->seq_id || e->n_tokens <= 0)
		return;
	__u32 zero = 0;
	struct pi_batch_event *b = bpf_map_lookup_elem(&batch_scratch, &zero);
	if (!b)
		return;
	__u32 n = e->n_tokens < PI_MAX_BATCH_READ ? e->n_tokens : PI_MAX_BATCH_READ;
	if (unrolled) {
		for (__u32 i = 0; i < PI_MAX_BATCH_READ; i++) {
			if (i >= n)
				break;
			read_batch_token(e, b, i);
		}
	} else {
		struct batch_loop_ctx c = { .e = e, .b = b };
		bpf_loop(n, batch_token_cb, &c, 0);
	}
	if (n == 0)
		return;
	if (!e->logits) /* llama.cpp's default: the last token's output only */
		b->tok[(n - 1) & (PI_MAX_BATCH_READ - 1)].pos_out |= PI_BATCH_OUTPUT;
	__u64 size = __builtin_offsetof(struct pi_batch_event, tok) + (__u64)n * sizeof(struct pi_batch_token);
	/* The verifier needs the size's bound in the register that carries it: clamped there. */
	asm volatile("if %[s] <= %[max] goto +1\n\t%[s] = %[max]" : [s] "+r"(size) : [max] "i"(sizeof(*b)));
	fill_header(&b->h, PI_EV_BATCH, size, pid_tgid);
	b->start_ns = e->start_ns;
	b->n_tokens = e->n_tokens;
	b->n_read = n;
	if (bpf_ringbuf_output(&events, b, size, wake_flags()))
		__sync_fetch_and_add(&lost_events[PI_EV_BATCH], 1);
}

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
	bpf_probe_read_user(&e.pos, sizeof(e.pos), batch + layout.batch_pos);
	bpf_probe_read_user(&e.seq_id, sizeof(e.seq_id), batch + layout.batch_seq_id);
	bpf_probe_read_user(&e.logits, sizeof(e.logits), batch + layout.batch_logits);
	__u32 tid = (__u32)pid_tgid;
	bpf_map_update_elem(&decode_entries, &tid, &e, BPF_ANY);
	return 0;
}

static __always_inline void decode_exit(int ret, bool unrolled)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_target(pid_tgid))
		return;
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = (__u32)pid_tgid;
	struct decode_entry *e = bpf_map_lookup_elem(&decode_entries, &tid);
	if (!e)
		return; /* entry happened before we attached */
	send_batch(e, pid_tgid, unrolled);
	struct pi_token_event *ev = reserve(PI_EV_TOKEN, sizeof(*ev));
	if (ev) {
		fill_header(&ev->h, PI_EV_TOKEN, sizeof(*ev), pid_tgid);
		if (!e->ops || !ops_enabled)
			ev->h.reserved = PI_TOKEN_OPS_OFF;
		ev->start_ns = e->start_ns;
		ev->end_ns = now;
		ev->n_tokens = e->n_tokens;
		ev->ret = ret;
		bpf_ringbuf_submit(ev, token_wake_flags());
	}
	bpf_map_delete_elem(&decode_entries, &tid);
}

SEC("uretprobe")
int BPF_KRETPROBE(llama_decode_exit, int ret)
{
	decode_exit(ret, false);
	return 0;
}

/* The same on kernels without bpf_loop (before 5.17); the loader loads one of the two. */
SEC("uretprobe")
int BPF_KRETPROBE(llama_decode_exit_unrolled, int ret)
{
	decode_exit(ret, true);
	return 0;
}

#endif /* PROFINFER_TOKEN_BPF_H */
