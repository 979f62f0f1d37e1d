/* The kernel types the tracer's BPF programs use, and only those: CO-RE relocates every
 * field access against the running kernel's BTF at load time, so one header serves every
 * kernel and architecture (x86-64, arm64) and the build needs no vmlinux.h dumped from the
 * build machine's kernel — a cross build or an OpenHarmony board's kernel is no different. */
#ifndef PROFINFER_VMLINUX_MIN_H
#define PROFINFER_VMLINUX_MIN_H

#include <linux/types.h>
#include <linux/bpf.h> /* map types and flags: UAPI, the same on every architecture */

/* bpf_tracing.h names the kernel's registers (di, ip; not the UAPI rdi, rip) when it
 * sees this, and events.h takes its integer types from here. */
#define __VMLINUX_H__

typedef _Bool bool;
enum { false = 0, true = 1 };

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct task_struct {
	unsigned int __state; /* long state before 5.14: see tracer.bpf.c */
	int wake_cpu;
	int pid;
	int tgid;
	char comm[16];
	unsigned long min_flt, maj_flt;
};

struct bpf_map; /* bpf_for_each_map_elem's callbacks take it */

struct hrtimer { /* tp_btf/hrtimer_expire_entry: which timer expired (the tick's, for op_tick) */
	void *function;
};

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
typedef struct pt_regs bpf_user_pt_regs_t;
#elif defined(__TARGET_ARCH_arm64)
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};
struct pt_regs {
	union {
		struct user_pt_regs user_regs;
		struct {
			__u64 regs[31];
			__u64 sp;
			__u64 pc;
			__u64 pstate;
		};
	};
	__u64 orig_x0;
};
typedef struct user_pt_regs bpf_user_pt_regs_t;
#else
#error "profinfer's BPF programs know the registers of x86-64 and arm64 only"
#endif

struct bpf_perf_event_data {
	bpf_user_pt_regs_t regs;
	__u64 sample_period;
	__u64 addr;
};

#pragma clang attribute pop

#endif
