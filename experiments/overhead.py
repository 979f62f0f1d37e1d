#!/usr/bin/env python3
"""Cost of tracing (paper Tables 5 and 7), with the floor and the peers in the same run.

Configurations, run interleaved (one of each per round, so drift on a shared machine hits
all alike), each against the untraced baseline of its own program in the same round:
  llama-bench (prompt P tokens, then N decode tokens), baseline `none`:
    token, graph, op, full, full-exact   profinfer record at each level (full: --wait sampled;
                                         full-exact: --wait exact, a probe on every ggml_barrier)
    budget-0.5, budget-1, budget-2       profinfer record --level op --budget PCT
    op-trap, op-nosend                   --level op with PROFINFER_ABLATE=trap (node probes return at
                                         once: the traps alone) and =send (all the work, no record
                                         sent: no consumer work): where op's cost goes
  llama-bench (no prompt, --paired-tokens decode tokens), within the run:
    op-paired, full-paired               --level op / full with PROFINFER_ALTERNATE=W: windows of W
                                         recorded calls against their neighbouring windows of W calls
                                         whose node probes only trap (per window, pooled over rounds)
    op-, trap-, full-detach-paired       the same against windows with the operator probes out
                                         (PROFINFER_ALTERNATE=W:detach): op's whole cost, its traps'
                                         (PROFINFER_ABLATE=trap), full's node probes'
    bpftrace                             bpftrace counting hits of the same node hooks per
                                         thread: what uprobes on them cost at least (the floor)
  evalcb_peer (N decode tokens), baseline `peer-none`:
    evalcb                               llama.cpp's eval callback timestamping every node
  ONNX Runtime on a LLaMA-shaped 4-bit model (prompt P, N decode runs), baseline `ort`:
    ort-profile                          ORT's own profiler (enableProfiling)
Per run: prefill and decode tokens/s, and the CPU time (user + sys) of the whole run,
tracer included. Per configuration: median speed; the median over rounds of the slowdown
against the same round's baseline, with a 95 % bootstrap confidence interval; the same for
CPU time; the slowdown as a multiple of the bpftrace floor's.
Once per round: the cost of ggml_graph_dump_dot on one decode graph (evalcb_peer).
Once per run: fidelity — per-operator times of `profinfer record --level op` against the
eval callback's on the same program and model (median relative error per operator), and
how much of each thread's decode time the recorded operators cover.
"""
import argparse, csv, json, os, random, resource, shutil, signal, sqlite3, statistics, subprocess, sys, tempfile, threading

LEVELS = ["token", "graph", "op", "full", "full-exact"]
BUDGETS = ["budget-0.5", "budget-1", "budget-2"]
# Where --level op's cost goes (PROFINFER_ABLATE): its node probes trapping and returning at
# once (our own floor), and doing all their work but sending nothing (no consumer).
ABLATIONS = ["op-trap", "op-nosend"]
# The operator level's work above its traps, measured inside one run (PROFINFER_ALTERNATE):
# decode calls alternate between windows whose operators are recorded and windows whose node
# probes trap and return; each recorded window's median call against its two neighbours'.
# Neighbouring calls share the machine's state, so this resolves what separate runs on a
# shared machine cannot (their rounds differ by several %).
# With :detach the other windows have the operator probes out (attached and detached by the
# recorder, the calls a switch overlaps left out): op-detach-paired is the operator level's
# whole cost, trap-detach-paired (PROFINFER_ABLATE=trap) its traps' alone, full-detach-paired
# the full level's node probes (counters, sampling state) — its scheduler and sampling
# programs stay in during both kinds of window.
PAIRED = ["op-paired", "full-paired", "op-detach-paired", "trap-detach-paired", "full-detach-paired"]
BASELINE = {c: "none" for c in LEVELS + BUDGETS + ABLATIONS + ["bpftrace", "bpftrace-stream"]}
BASELINE.update({"evalcb": "peer-none", "ort-profile": "ort"})
CONFIGS = ["none"] + LEVELS + ABLATIONS + PAIRED + ["bpftrace", "bpftrace-stream"] + BUDGETS + ["peer-none", "evalcb", "ort", "ort-profile"]


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_speeds(path):
    """llama-bench -o csv: one row per test (pp, then tg)."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    pp = [float(r["avg_ts"]) for r in rows if int(r["n_prompt"]) > 0 and int(r["n_gen"]) == 0]
    tg = [float(r["avg_ts"]) for r in rows if int(r["n_gen"]) > 0]
    return (pp[-1] if pp else None), tg[-1]


def json_line(path):
    with open(path) as f:
        return json.loads([l for l in f if l.startswith("{")][-1])


def fresh_db(work):
    db = os.path.join(work, "run.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    return db


# Detaching the probes restores the target's code pages: its threads refault them, and calls
# are slowed for a while after the switch has ended (seen here: 30-40 ms calls among 23 ms
# ones for ~10 calls after a detach). Calls up to this long after a switch are left out.
SWITCH_AFTERMATH_NS = 300_000_000


def touched_by_switch(start, end, switches):
    """A call from START to END overlaps a probe switch (start_ns, ts_ns) or its aftermath."""
    return any(start < ts + SWITCH_AFTERMATH_NS and end > s0 for s0, ts in switches)


def paired_windows(db, skip=1):
    """PROFINFER_ALTERNATE run: per recorded window, its median decode call over the mean of
    its two neighbouring windows' medians, minus 1, in %; the first SKIP calls of each window
    are left out (the switch falls there), and so is every call a probe switch may overlap."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT t.start_ns, t.end_ns, t.n_tokens, u.token_id IS NOT NULL FROM tokens t "
                       "LEFT JOIN ops_untraced u ON u.token_id = t.id ORDER BY t.start_ns").fetchall()
    switches = con.execute("SELECT coalesce(start_ns, ts_ns), ts_ns FROM qos_events").fetchall()
    con.close()
    windows = []
    for start, end, n, off in rows:
        if not windows or windows[-1][0] != off:
            windows.append((off, []))
        if touched_by_switch(start, end, switches):
            n = 0  # kept in its window (the windows' edges), left out of its median
        windows[-1][1].append((end - start, n))
    def med(w):
        v = [d for d, n in w[1][skip:] if n == 1]
        return statistics.median(v) if v else None
    out = []
    for i in range(1, len(windows) - 1):
        if windows[i][0]:
            continue
        a, m, b = med(windows[i - 1]), med(windows[i]), med(windows[i + 1])
        if a and m and b:
            out.append(100 * (m / ((a + b) / 2) - 1))
    return out


def achieved_overhead(db, half=32):
    """--budget run: what tracing cost the run's decode, measured on the run itself: the sum
    of its decode calls over the sum of what each would have taken untraced (the mean of the
    untraced calls no switch touched among the 2 HALF calls around it: decode slows as the
    context grows, and the machine drifts; a mean, as the sum it stands for has the calls'
    slow outliers too), minus 1, in %."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT t.start_ns, t.end_ns, u.token_id IS NOT NULL FROM tokens t LEFT JOIN ops_untraced u "
                       "ON u.token_id = t.id WHERE t.n_tokens = 1 ORDER BY t.start_ns").fetchall()
    switches = con.execute("SELECT coalesce(start_ns, ts_ns), ts_ns FROM qos_events").fetchall()
    con.close()
    clean = [off and not touched_by_switch(start, end, switches) for start, end, off in rows]
    spent = base = 0.0
    for i, (start, end, _) in enumerate(rows):
        near = [rows[j][1] - rows[j][0] for j in range(max(0, i - half), min(len(rows), i + half + 1)) if clean[j]]
        if near:
            spent += end - start
            base += statistics.fmean(near)
    return 100 * (spent / base - 1) if base else float("nan")


def run_one(config, args, work):
    """Returns (prefill t/s or None, decode t/s, CPU seconds, extra dict)."""
    out = os.path.join(work, "out.txt")
    bench = [args.bench, "-m", args.model, "-t", str(args.threads), "-p", str(args.prompt), "-n", str(args.tokens),
             "-r", "1", "-o", "csv"]
    peer = [args.evalcb, args.model, "--threads", str(args.threads), "--tokens", str(args.tokens)]
    ort = ["node", os.path.join(os.path.dirname(__file__), "peers", "ort_peer.js"), args.ort_model, "--threads",
           str(args.threads), "--prompt", str(args.prompt), "--tokens", str(args.tokens)]
    env = dict(os.environ)
    before = cpu_seconds()
    floor = reader = None
    kind = "bench"
    if config in ("bpftrace", "bpftrace-stream"):
        lib = os.path.join(os.path.dirname(args.bench), "libggml-cpu.so")
        # The floor counts hits in the kernel; the streaming peer sends one line per hit to
        # user space (as a BCC/bpftrace script printing every operator would), read here.
        action = "{ @[tid] = count(); }" if config == "bpftrace" else '{ printf("%d %d %llu\\n", tid, cpu, nsecs); }'
        script = (f"uprobe:{lib}:ggml_cpu_extra_compute_forward, uprobe:{lib}:ggml_compute_forward_rms_norm_mul_fused "
                  + action)
        floor = subprocess.Popen(["bpftrace", "-e", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in floor.stdout:  # "Attaching N probes..." once they are in place
            if line.startswith("Attaching"):
                break
        if config == "bpftrace-stream":
            reader = threading.Thread(target=lambda out: [None for _ in out], args=(floor.stdout,), daemon=True)
            reader.start()
        cmd = bench
    elif config == "none":
        cmd = bench
    elif config in PAIRED:
        env["PROFINFER_ALTERNATE"] = f"{args.detach_window}:detach" if "detach" in config else str(args.paired_window)
        if config.startswith("trap"):
            env["PROFINFER_ABLATE"] = "trap"
        cmd = [args.profinfer, "record", "-q", "--level", "full" if config.startswith("full") else "op", "-o",
               fresh_db(work), "--", args.bench,
               "-m", args.model, "-t", str(args.threads), "-p", "0", "-n", str(args.paired_tokens), "-r", "1", "-o", "csv"]
    elif config in LEVELS or config in BUDGETS or config in ABLATIONS:
        if config in ABLATIONS:
            level = ["--level", "op"]
            env["PROFINFER_ABLATE"] = "trap" if config == "op-trap" else "send"
        elif config == "full-exact":
            level = ["--level", "full", "--wait", "exact"]
        elif config in BUDGETS:
            level = ["--level", "op", "--budget", config.split("-", 1)[1]]
        else:
            level = ["--level", config]
        # A budget earns its windows as the run goes: long runs (the window's switches
        # alone cost ~2 calls, which 48 calls of a 2 % budget do not repay).
        run = bench if config not in BUDGETS else [args.bench, "-m", args.model, "-t", str(args.threads), "-p", "0",
                                                   "-n", str(args.budget_tokens), "-r", "1", "-o", "csv"]
        cmd = [args.profinfer, "record", "-q"] + level + ["-o", fresh_db(work), "--"] + run
    elif config in ("peer-none", "evalcb"):
        kind = "peer"
        cmd = peer + ["--mode", "none" if config == "peer-none" else "callback"]
    elif config in ("ort", "ort-profile"):
        kind = "ort"
        env["NODE_PATH"] = args.ort_node_path
        cmd = ort + (["--profile"] if config == "ort-profile" else [])
    else:
        raise ValueError(config)
    with open(out, "w") as f:
        status = subprocess.run(cmd, stdout=f, stderr=subprocess.DEVNULL, env=env).returncode
    if floor:
        floor.send_signal(signal.SIGINT)
        if reader:  # it reads the lines to their end; closing them under it would be an error
            floor.wait()
            reader.join()
        else:
            floor.communicate()
    if status != 0:
        sys.exit(f"profinfer: the {config} run failed (exit status {status}): {' '.join(cmd)}")
    cpu = cpu_seconds() - before
    extra = {}
    if kind == "bench":
        pp, tg = bench_speeds(out)
        if config in PAIRED:
            extra["paired_window_pct"] = ";".join(f"{x:.3f}" for x in paired_windows(os.path.join(work, "run.db")))
        if config in BUDGETS:
            con = sqlite3.connect(os.path.join(work, "run.db"))
            n, untraced = con.execute("SELECT count(*), (SELECT count(*) FROM ops_untraced) FROM tokens").fetchone()
            extra["traced_calls_pct"] = round(100.0 * (n - untraced) / max(1, n), 1)
            con.close()
            extra["achieved_pct"] = f"{achieved_overhead(os.path.join(work, 'run.db')):.3f}"
        return pp, tg, cpu, extra
    j = json_line(out)
    if kind == "ort":
        if config == "ort-profile":
            extra["threads_profiled"] = j["profiled_threads"]
        return j["prefill_tps"], j["decode_tps"], cpu, extra
    return None, j["decode_tps"], cpu, extra


def dump_dot_cost(args, work):
    out = os.path.join(work, "dot.txt")
    with open(out, "w") as f:
        subprocess.run([args.evalcb, args.model, "--threads", str(args.threads), "--tokens", "8", "--mode", "dump-dot",
                        "--dot", os.path.join(work, "graph.dot")], stdout=f, stderr=subprocess.DEVNULL, check=True)
    return json_line(out)


def bootstrap_median_ci(values, n=4000, seed=1):
    if not values:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def fmt_ci(values):
    if not values:
        return "", ""
    lo, hi = bootstrap_median_ci(values)
    return round(statistics.median(values), 2), f"[{lo:.2f}, {hi:.2f}]"


def summarise(rows, out_dir):
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r["config"]] = r
    summary = []
    for config in CONFIGS:
        mine = [r for r in rows if r["config"] == config]
        if not mine:
            continue  # a configuration added after these runs
        if config in PAIRED:
            pooled = [float(x) for r in mine for x in (r.get("paired_window_pct") or "").split(";") if x]
            s, s_ci = fmt_ci(pooled)
            summary.append({"config": config, "baseline": "the same run's trap-only windows", "rounds": len(mine),
                            "median_decode_tps": round(statistics.median(float(r["decode_tps"]) for r in mine), 3),
                            "decode_slowdown_pct": s, "decode_slowdown_ci95": s_ci, "prefill_slowdown_pct": "",
                            "prefill_slowdown_ci95": "", "cpu_pct": "", "cpu_ci95": "",
                            "traced_calls_pct": f"{len(pooled)} windows"})
            continue
        if config in BUDGETS:
            achieved = [float(r["achieved_pct"]) for r in mine if r.get("achieved_pct") not in (None, "", "nan")]
            a, a_ci = fmt_ci(achieved)
            traced = [float(r["traced_calls_pct"]) for r in mine if r.get("traced_calls_pct") not in (None, "")]
            summary.append({"config": config, "baseline": "the run's own untraced calls", "rounds": len(mine),
                            "median_decode_tps": round(statistics.median(float(r["decode_tps"]) for r in mine), 3),
                            "decode_slowdown_pct": a, "decode_slowdown_ci95": a_ci, "prefill_slowdown_pct": "",
                            "prefill_slowdown_ci95": "", "cpu_pct": "", "cpu_ci95": "",
                            "traced_calls_pct": round(statistics.median(traced), 1) if traced else ""})
            continue
        base_of = BASELINE.get(config, config)
        slow, cpu, pslow = [], [], []
        for runs in by_round.values():
            if config in runs and base_of in runs:
                me, base = runs[config], runs[base_of]
                slow.append(100 * (1 - float(me["decode_tps"]) / float(base["decode_tps"])))
                cpu.append(100 * (float(me["cpu_s"]) / float(base["cpu_s"]) - 1))
                if me["prefill_tps"] and base["prefill_tps"]:
                    pslow.append(100 * (1 - float(me["prefill_tps"]) / float(base["prefill_tps"])))
        s, s_ci = fmt_ci(slow)
        c, c_ci = fmt_ci(cpu)
        p, p_ci = fmt_ci(pslow)
        traced = [float(r["traced_calls_pct"]) for r in mine if r.get("traced_calls_pct") not in (None, "")]
        summary.append({"config": config, "baseline": base_of, "rounds": len(mine),
                        "median_decode_tps": round(statistics.median(float(r["decode_tps"]) for r in mine), 3),
                        "decode_slowdown_pct": s, "decode_slowdown_ci95": s_ci,
                        "prefill_slowdown_pct": p, "prefill_slowdown_ci95": p_ci,
                        "cpu_pct": c, "cpu_ci95": c_ci,
                        "traced_calls_pct": round(statistics.median(traced), 1) if traced else ""})
    floor = next((r["decode_slowdown_pct"] for r in summary if r["config"] == "bpftrace"), None)
    for row in summary:
        row["x_floor"] = (round(row["decode_slowdown_pct"] / floor, 2)
                          if isinstance(floor, float) and floor > 0 and row["config"] in BASELINE and row["config"] not in BUDGETS
                          and BASELINE[row["config"]] == "none" else "")
    with open(os.path.join(out_dir, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0].keys()))
        w.writeheader()
        w.writerows(summary)
    return summary


def write_tables(summary, dot, fidelity, threads_profiled, args, out_dir):
    row = {r["config"]: r for r in summary}
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("Table 5 — llama-bench, decode and prefill slowdown against untraced runs in the same rounds\n\n")
        f.write("| config | rounds | median decode t/s | decode slowdown % (median, 95 % CI) | prefill slowdown % "
                "(median, 95 % CI) | CPU time % (median, 95 % CI) | × bpftrace floor | decode calls traced % |\n")
        f.write("|---|---|---|---|---|---|---|---|\n")
        for c in ["none"] + LEVELS + ABLATIONS + ["bpftrace", "bpftrace-stream"] + BUDGETS:
            if c == BUDGETS[0] and c in row:
                f.write(f"| *--budget runs: llama-bench -p 0 -n {args.budget_tokens}; slowdown = what tracing cost the "
                        "run's decode against its own untraced calls no switch touched (local medians)* |||||||| \n")
            if c not in row:
                continue  # a configuration added after these runs
            r = row[c]
            f.write(f"| {c} | {r['rounds']} | {r['median_decode_tps']} | {r['decode_slowdown_pct']} "
                    f"{r['decode_slowdown_ci95']} | {r['prefill_slowdown_pct']} {r['prefill_slowdown_ci95']} | "
                    f"{r['cpu_pct']} {r['cpu_ci95']} | {r['x_floor']} | {r['traced_calls_pct']} |\n")
        if any(c in row for c in PAIRED):
            f.write(f"\nWithin one run (`PROFINFER_ALTERNATE={args.paired_window}`, llama-bench -p 0 -n "
                    f"{args.paired_tokens}): windows of {args.paired_window} decode calls whose operators are "
                    "recorded against the neighbouring windows whose node probes trap and return (the op-trap "
                    "state), the first call of each window left out; per window, pooled over rounds. This is the "
                    "cost of the operator level above its traps, resolved to a few tenths of a % where separate "
                    "runs on this shared machine differ by several %; at --level full the scheduler and sampling "
                    "programs run in both kinds of window, so full-paired is the node probes' part only.\n\n")
            f.write("| config | rounds | windows | slowdown of recorded windows % (median, 95 % CI) |\n|---|---|---|---|\n")
            for c in PAIRED:
                if c in row:
                    r = row[c]
                    f.write(f"| {c} | {r['rounds']} | {r['traced_calls_pct'].split()[0]} | "
                            f"{r['decode_slowdown_pct']} {r['decode_slowdown_ci95']} |\n")
    with open(os.path.join(out_dir, "peers.md"), "w") as f:
        f.write("Table 7 — profilers side by side, each against its own untraced program in the same rounds\n\n")
        f.write("| profiler | program | what it records | threads with operator records | prefill slowdown % "
                "(95 % CI) | decode slowdown % (95 % CI) |\n|---|---|---|---|---|---|\n")
        op = row["op"]
        f.write(f"| profinfer `--level op` | llama-bench | every node on every thread, shapes once per graph | "
                f"all ({fidelity.get('threads', '?')}) | {op['prefill_slowdown_pct']} {op['prefill_slowdown_ci95']} | "
                f"{op['decode_slowdown_pct']} {op['decode_slowdown_ci95']} |\n")
        for c, what in (("budget-1", "as op, on sampled decode calls (`--budget 1`)"),
                        ("bpftrace", "a hit count per thread on the same hooks (the floor)"),
                        ("bpftrace-stream", "a line per hit on the same hooks, streamed to user space")):
            if c not in row:
                continue
            r = row[c]
            name = {"budget-1": "profinfer `--budget 1`", "bpftrace": "bpftrace", "bpftrace-stream": "bpftrace (streaming)"}[c]
            f.write(f"| {name} | llama-bench | {what} | all | "
                    f"{r['prefill_slowdown_pct']} {r['prefill_slowdown_ci95']} | {r['decode_slowdown_pct']} "
                    f"{r['decode_slowdown_ci95']} |\n")
        r = row["evalcb"]
        f.write(f"| llama.cpp eval callback (`cb_eval`, every node timestamped) | evalcb_peer | each node as a graph of "
                f"its own, timed by the calling thread | 1 (the caller) | – | {r['decode_slowdown_pct']} "
                f"{r['decode_slowdown_ci95']} |\n")
        r = row["ort-profile"]
        f.write(f"| ONNX Runtime profiler (`enableProfiling`) | ort_peer.js, LLaMA-shaped 4-bit ONNX | operator events "
                f"| {threads_profiled} | {r['prefill_slowdown_pct']} {r['prefill_slowdown_ci95']} | "
                f"{r['decode_slowdown_pct']} {r['decode_slowdown_ci95']} |\n")
        d, d_ci = fmt_ci([x["dump_dot_pct_of_decode"] for x in dot])
        f.write(f"\n`ggml_graph_dump_dot` on one decode graph ({int(dot[0]['graph_nodes'])} nodes): "
                f"{statistics.median(x['dump_dot_ms'] for x in dot):.2f} ms, {d} % {d_ci} of a decode call "
                f"(median of {len(dot)} rounds; paper: 13 % of a forward pass) — structure only, no times.\n")
        f.write(f"\nUntraced speeds (median): llama-bench {row['none']['median_decode_tps']} t/s, evalcb_peer "
                f"{row['peer-none']['median_decode_tps']} t/s, ONNX Runtime {row['ort']['median_decode_tps']} t/s "
                f"(decode, {args.threads} threads).\n")
    with open(os.path.join(out_dir, "fidelity.md"), "w") as f:
        f.write("Fidelity — per-operator decode times of `profinfer record --level op` against llama.cpp's eval "
                "callback, the same program (evalcb_peer) and model, separate runs\n\n")
        f.write(f"- operators compared: {fidelity['operators']} (node names with layer, mean over "
                f"{fidelity['calls']} decode calls)\n")
        f.write(f"- median relative difference per operator, |profinfer − callback| / callback: "
                f"{fidelity['median_rel_err_pct']:.1f} % (callback slower: {fidelity['callback_slower_pct']:.0f} % "
                f"of operators)\n")
        f.write(f"- sum over operators: profinfer {fidelity['profinfer_ms']:.1f} ms, callback "
                f"{fidelity['callback_ms']:.1f} ms per decode call; decode call {fidelity['call_ms']:.1f} ms "
                f"(profinfer run)\n")
        f.write("- time coverage per thread (operator records / decode call time): " +
                ", ".join(f"thread {k}: {v:.1f} %" for k, v in fidelity["coverage"].items()) + "\n\n")
        f.write("| op type | profinfer ms/call | callback ms/call | median rel. diff % |\n|---|---|---|---|\n")
        for t in fidelity["by_type"]:
            f.write(f"| {t['op']} | {t['profinfer_ms']:.3f} | {t['callback_ms']:.3f} | {t['median_rel_err_pct']:.1f} |\n")


def write_figure(summary, out_dir):
    """overhead.png/.svg: decode slowdown per configuration, median and 95 % interval (gnuplot,
    the terminals of the analysis figures: analysis/include/profinfer/plotter.h)."""
    rows = [r for r in summary if r["config"] not in ("none", "peer-none", "ort") and r["decode_slowdown_ci95"]]
    data = os.path.join(out_dir, "overhead.dat")
    with open(data, "w") as f:
        for i, r in enumerate(rows):
            lo, hi = (float(x) for x in r["decode_slowdown_ci95"].strip("[]").split(","))
            f.write(f'{i} {r["decode_slowdown_pct"]} {lo} {hi} "{r["config"]}"\n')
    for term, ext in (("pngcairo size 900,500 font 'DejaVu Sans,10'", "png"), ("svg size 900,500 dynamic", "svg")):
        script = (f"set terminal {term}\nset output '{os.path.join(out_dir, 'overhead.' + ext)}'\n"
                  "set termoption noenhanced\nset title 'Decode slowdown of tracing, median and 95 % CI "
                  "(each against its own untraced program)'\nset grid\nset ylabel 'decode slowdown %'\n"
                  "set style fill solid 0.5\nset boxwidth 0.6\nset xtics rotate by -35\nset yrange [*:*]\n"
                  f"plot '{data}' using 1:2:xtic(5) with boxes notitle, '' using 1:2:3:4 with yerrorbars pt 0 lc "
                  "rgb 'black' notitle\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.remove(data)


def fidelity_run(args, work):
    db = fresh_db(work)
    subprocess.run([args.profinfer, "record", "-q", "--level", "op", "-o", db, "--", args.evalcb, args.model,
                    "--threads", str(args.threads), "--tokens", str(args.tokens), "--mode", "none"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    cb_csv = os.path.join(work, "cb.csv")
    subprocess.run([args.evalcb, args.model, "--threads", str(args.threads), "--tokens", str(args.tokens), "--mode",
                    "callback", "--nodes-csv", cb_csv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    cb = {}
    with open(cb_csv) as f:
        for r in csv.DictReader(f):
            cb.setdefault((r["name"], r["op"]), []).append(int(r["end_ns"]) - int(r["start_ns"]))
    # The derived views (node_times, call_graphs, calls) are TEMP objects each reader creates:
    # this connection creates them from the one definition, store/src/derived.sql (after
    # derived_nodes.sql from schema 7 on, as store::Database does).
    con = sqlite3.connect(db)
    sql_dir = os.path.join(os.path.dirname(__file__), "..", "store", "src")
    if con.execute("PRAGMA user_version").fetchone()[0] >= 7:
        con.executescript(open(os.path.join(sql_dir, "derived_nodes.sql")).read())
    con.executescript(open(os.path.join(sql_dir, "derived.sql")).read())
    # The warm-up call (call 0) is not in the callback's CSV.
    ours = {}
    for name, op, dur in con.execute("SELECT name, op, dur_ns FROM node_times WHERE phase = 'decode' AND call > 0"):
        ours.setdefault((name, op), []).append(dur)
    calls = con.execute("SELECT count(*), avg(dur_ns) FROM calls WHERE phase = 'decode' AND call > 0").fetchone()
    cover = {}
    for tid, busy in con.execute("SELECT o.tid, sum(o.end_ns - o.start_ns) FROM ops o JOIN call_graphs cg ON "
                                 "cg.graph_seq = o.graph_seq WHERE cg.phase = 'decode' AND cg.call > 0 GROUP BY o.tid"):
        cover[tid] = 100.0 * busy / max(1, calls[0] * calls[1])
    con.close()
    rel, by_type, slower = [], {}, 0
    for key in sorted(set(ours) & set(cb)):
        o, c = statistics.mean(ours[key]), statistics.mean(cb[key])
        e = abs(o - c) / c
        rel.append(e)
        slower += c > o
        t = by_type.setdefault(key[1], {"o": 0.0, "c": 0.0, "e": []})
        t["o"] += o
        t["c"] += c
        t["e"].append(e)
    return {
        "operators": len(rel), "calls": calls[0], "call_ms": calls[1] / 1e6,
        "median_rel_err_pct": 100 * statistics.median(rel), "callback_slower_pct": 100.0 * slower / max(1, len(rel)),
        "profinfer_ms": sum(t["o"] for t in by_type.values()) / 1e6,
        "callback_ms": sum(t["c"] for t in by_type.values()) / 1e6,
        "threads": len(cover),
        "coverage": {i: v for i, (_, v) in enumerate(sorted(cover.items()))},
        "by_type": sorted(({"op": k, "profinfer_ms": v["o"] / 1e6, "callback_ms": v["c"] / 1e6,
                            "median_rel_err_pct": 100 * statistics.median(v["e"])} for k, v in by_type.items()),
                          key=lambda t: -t["callback_ms"]),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--bench", required=True, help="llama-bench of the pinned debug build")
    p.add_argument("--evalcb", required=True, help="evalcb_peer, built against the same llama.cpp")
    p.add_argument("--ort-model", required=True, help="LLaMA-shaped ONNX model (scripts/ort.sh model)")
    p.add_argument("--ort-node-path", required=True, help="NODE_PATH with onnxruntime-node (scripts/ort.sh node-path)")
    p.add_argument("--profinfer", default="build/profinfer")
    p.add_argument("--out", required=True)
    p.add_argument("--paired-tokens", type=int, default=384, help="decode tokens of the paired runs")
    p.add_argument("--paired-window", type=int, default=8, help="calls per window of op-paired and full-paired")
    p.add_argument("--detach-window", type=int, default=32,
                   help="calls per window of the *-detach-paired runs (a switch and its aftermath take ~25 calls here)")
    p.add_argument("--budget-tokens", type=int, default=512, help="decode tokens of the --budget runs")
    p.add_argument("--budget-rounds", type=int, default=6, help="rounds with --budget runs (the first ones)")
    p.add_argument("--configs", help="comma-separated subset of " + ",".join(CONFIGS) + " (their baselines are "
                   "added): runs.csv and summary.csv only, no dump_dot cost, fidelity or tables")
    p.add_argument("--tables-only", action="store_true",
                   help="no runs: rewrite the tables and the figure from OUT's runs.csv, dump_dot.csv, fidelity.json")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.tables_only:
        with open(os.path.join(args.out, "runs.csv")) as f:
            rows = list(csv.DictReader(f))
        with open(os.path.join(args.out, "dump_dot.csv")) as f:
            dot = [{k: (v if k == "mode" else float(v)) for k, v in r.items()} for r in csv.DictReader(f)]
        with open(os.path.join(args.out, "fidelity.json")) as f:
            fidelity = json.load(f)
        write_outputs(rows, dot, fidelity, args)
        return
    configs = CONFIGS
    if args.configs:
        wanted = set(args.configs.split(","))
        unknown = wanted - set(CONFIGS)
        if unknown:
            sys.exit(f"profinfer: unknown configuration(s) {', '.join(sorted(unknown))}; known: {', '.join(CONFIGS)}")
        wanted |= {BASELINE[c] for c in wanted if c in BASELINE}
        if "bpftrace" not in wanted and any(BASELINE.get(c) == "none" for c in wanted):
            wanted.add("bpftrace")  # the floor, for the ratio
        configs = [c for c in CONFIGS if c in wanted]
    rows, dot = [], []
    with tempfile.TemporaryDirectory() as work:
        # Copies of our own programs: a rebuild during the run must not change (or remove)
        # what is measured.
        for attr in ("profinfer", "evalcb"):
            copy = os.path.join(work, os.path.basename(getattr(args, attr)) + "-measured")
            shutil.copy2(getattr(args, attr), copy)
            setattr(args, attr, copy)
        for r in range(1, args.rounds + 1):
            for config in configs:
                if config in BUDGETS and r > args.budget_rounds:
                    continue
                pp, tg, cpu, extra = run_one(config, args, work)
                rows.append({"round": r, "config": config, "prefill_tps": f"{pp:.3f}" if pp else "",
                             "decode_tps": f"{tg:.3f}", "cpu_s": f"{cpu:.3f}", **extra})
                print(f"\rround {r}/{args.rounds} {config:12} {tg:7.2f} t/s {cpu:6.2f} s CPU   ", end="", file=sys.stderr)
            if not args.configs:
                dot.append(dump_dot_cost(args, work))
        if not args.configs:
            print("\rfidelity: profinfer --level op vs the eval callback" + " " * 20, file=sys.stderr)
            fidelity = fidelity_run(args, work)
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["round", "config", "prefill_tps", "decode_tps", "cpu_s", "traced_calls_pct",
                                          "threads_profiled", "paired_window_pct", "achieved_pct"])
        w.writeheader()
        w.writerows(rows)
    if args.configs:
        print(file=sys.stderr)
        for r in summarise(rows, args.out):
            print(f"{r['config']:16} {r['median_decode_tps']:8.2f} t/s  decode {r['decode_slowdown_pct']} % "
                  f"{r['decode_slowdown_ci95']}  prefill {r['prefill_slowdown_pct']} %  CPU {r['cpu_pct']} % "
                  f"{r['cpu_ci95']}  x floor {r['x_floor']}")
        return
    with open(os.path.join(args.out, "dump_dot.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dot[0].keys()))
        w.writeheader()
        w.writerows(dot)
    with open(os.path.join(args.out, "fidelity.json"), "w") as f:
        json.dump(fidelity, f, indent=1)
    write_outputs(rows, dot, fidelity, args)


def write_outputs(rows, dot, fidelity, args):
    summary = summarise(rows, args.out)
    threads_profiled = sorted({str(r["threads_profiled"]) for r in rows if r.get("threads_profiled") not in (None, "")})
    write_figure(summary, args.out)
    write_tables(summary, dot, fidelity, ", ".join(map(str, threads_profiled)) or "?", args, args.out)
    for name in ("summary.md", "peers.md", "fidelity.md"):
        print(open(os.path.join(args.out, name)).read())


if __name__ == "__main__":
    main()
