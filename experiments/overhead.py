#!/usr/bin/env python3
"""Decode slowdown of tracing (paper Table 5), with the floor in the same run.

Configurations, run interleaved (one of each per round, so drift on a shared machine hits
all alike): llama-bench untraced; traced by profinfer at each level; and bpftrace merely
counting hits of the same node hooks per thread (what uprobes on them cost at least).
Per run: llama-bench's decode tokens/s, and the CPU time (user + sys) of the whole run,
tracer included. Summary per configuration: median speed; the median over rounds of the
slowdown against the same round's untraced run, with a 95 % bootstrap confidence interval;
the same for CPU time; and the slowdown as a multiple of the bpftrace floor's.
"""
import argparse, csv, os, random, resource, signal, statistics, subprocess, sys, tempfile, time

# full: the compute/wait split by CPU-clock samples (--wait sampled, the default);
# full-exact: by a probe on every ggml_barrier call (--wait exact).
CONFIGS = ["none", "token", "graph", "op", "full", "full-exact", "bpftrace"]


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_tps(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["avg_ts"])


def run_one(config, args, work):
    out = os.path.join(work, "bench.csv")
    bench = [args.bench, "-m", args.model, "-t", str(args.threads), "-p", "0", "-n", str(args.tokens), "-r", "1", "-o", "csv"]
    before = cpu_seconds()
    floor = None
    if config == "bpftrace":
        lib = os.path.join(os.path.dirname(args.bench), "libggml-cpu.so")
        script = (f"uprobe:{lib}:ggml_cpu_extra_compute_forward, uprobe:{lib}:ggml_compute_forward_rms_norm_mul_fused "
                  "{ @[tid] = count(); }")
        floor = subprocess.Popen(["bpftrace", "-e", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in floor.stdout:  # "Attaching N probes..." once they are in place
            if line.startswith("Attaching"):
                break
        cmd = bench
    elif config == "none":
        cmd = bench
    else:
        db = os.path.join(work, "run.db")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db + suffix):
                os.remove(db + suffix)
        level = ["--level", "full", "--wait", "exact"] if config == "full-exact" else ["--level", config]
        cmd = [args.profinfer, "record", "-q"] + level + ["-o", db, "--"] + bench
    with open(out, "w") as f:
        status = subprocess.run(cmd, stdout=f, stderr=subprocess.DEVNULL).returncode
    if floor:
        floor.send_signal(signal.SIGINT)
        floor.communicate()
    if status != 0:
        sys.exit(f"profinfer: the {config} run failed (exit status {status})")
    return bench_tps(out), cpu_seconds() - before


def bootstrap_median_ci(values, n=4000, seed=1):
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def summarise(rows, out_dir):
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["config"]] = r
    summary = []
    floor_slowdown = None
    for config in CONFIGS:
        speeds = [float(r["tokens_per_s"]) for r in rows if r["config"] == config]
        slow, cpu = [], []
        for runs in by_round.values():
            if config in runs and "none" in runs:
                base = runs["none"]
                slow.append(100 * (1 - float(runs[config]["tokens_per_s"]) / float(base["tokens_per_s"])))
                cpu.append(100 * (float(runs[config]["cpu_s"]) / float(base["cpu_s"]) - 1))
        s_lo, s_hi = bootstrap_median_ci(slow)
        c_lo, c_hi = bootstrap_median_ci(cpu)
        row = {"config": config, "rounds": len(speeds), "median_tps": round(statistics.median(speeds), 3),
               "slowdown_pct": round(statistics.median(slow), 2), "slowdown_ci95": f"[{s_lo:.2f}, {s_hi:.2f}]",
               "cpu_pct": round(statistics.median(cpu), 2), "cpu_ci95": f"[{c_lo:.2f}, {c_hi:.2f}]"}
        if config == "bpftrace":
            floor_slowdown = row["slowdown_pct"]
        summary.append(row)
    for row in summary:
        row["x_floor"] = (round(row["slowdown_pct"] / floor_slowdown, 2)
                          if floor_slowdown and floor_slowdown > 0 and row["config"] != "none" else "")
    with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0].keys()))
        w.writeheader()
        w.writerows(summary)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("| config | rounds | median t/s | decode slowdown % (median, 95 % CI) | CPU time % (median, 95 % CI) | × bpftrace floor |\n")
        f.write("|---|---|---|---|---|---|\n")
        for r in summary:
            f.write(f"| {r['config']} | {r['rounds']} | {r['median_tps']} | {r['slowdown_pct']} {r['slowdown_ci95']} | "
                    f"{r['cpu_pct']} {r['cpu_ci95']} | {r['x_floor']} |\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--bench", required=True, help="llama-bench of the pinned debug build")
    p.add_argument("--profinfer", default="build/profinfer")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for r in range(1, args.rounds + 1):
            for config in CONFIGS:
                tps, cpu = run_one(config, args, work)
                rows.append({"round": r, "config": config, "tokens_per_s": f"{tps:.3f}", "cpu_s": f"{cpu:.3f}"})
                print(f"\rround {r}/{args.rounds} {config:8} {tps:7.2f} t/s {cpu:6.2f} s CPU", end="", file=sys.stderr)
    print(file=sys.stderr)
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["round", "config", "tokens_per_s", "cpu_s"])
        w.writeheader()
        w.writerows(rows)
    summarise(rows, args.out)
    print(open(os.path.join(args.out, "summary.md")).read())


if __name__ == "__main__":
    main()
