/* The event records shared by the BPF programs and the user-space consumer.
 * Every record starts with pi_event_header; `size` is the whole record's size and the
 * consumer rejects a sample whose size does not match its kind. Bump
 * PI_EVENTS_VERSION whenever a record changes. */
#ifndef PROFINFER_EVENTS_H
#define PROFINFER_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define PI_EVENTS_VERSION 1

enum pi_event_kind {
	PI_EV_TOKEN = 1, /* one llama_decode call, entry to return */
	PI_EV_LIBRARY = 2, /* the dynamic loader changed the link map (dlopen); target stopped */
	PI_EV_KIND_MAX = 8,
};

struct pi_event_header {
	__u32 kind;
	__u32 size;
	__u32 pid; /* tgid */
	__u32 tid;
	__u32 cpu; /* CPU at the return probe */
	__u32 reserved;
};

struct pi_token_event {
	struct pi_event_header h;
	__u64 start_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) at entry */
	__u64 end_ns;   /* ... at return */
	__s32 n_tokens; /* llama_batch.n_tokens */
	__s32 ret;      /* llama_decode's return value */
};

struct pi_library_event {
	struct pi_event_header h;
	__u64 ts_ns;
};

#endif
