#!/usr/bin/env python3
"""One point of the duet overhead study: a traced and an untraced copy of the workload at once.

Separate runs on this noisy 2-CPU machine spread by several points from run to run (the A/A
of separate runs spans ~5 points), more than the cost of the cheap levels. A duet runs two
single-thread llama-bench decodes AT THE SAME TIME, each pinned to a CPU of its own, so that
whatever disturbs the machine disturbs both:

  traced     `profinfer record --level LEVEL` of llama-bench on its own copy of the llama.cpp
             libraries (uprobes are per file: the untraced copy never traps); profinfer and
             its recorder pinned to the traced side's CPU, so that what recording costs is
             charged to the traced run, as a user feels it
  untraced   llama-bench on the original libraries

and takes the ratio of their decode speeds (llama-bench's own tokens/s). Each invocation runs
two duets, the roles swapped between the CPUs (a CPU of a VM may be faster than the other),
and reports the geometric mean of the two ratios:

  duet_slowdown_pct = 100 × (1 − sqrt(r1 × r2)),  r = traced tokens/s / untraced tokens/s

LEVEL none is the A/A control: both sides untraced, one on the copy, one on the original —
the method's own noise, in the same rounds. LEVEL bpftrace: the count-only floor (bpftrace
counting the operator hooks, BPFTRACE the script written for the original libraries, run on
the copy's) on the traced side.

Prints one JSON line: duet_slowdown_pct, traced_tps, untraced_tps (geometric means over the
two duets), the two ratios, and the CPUs' own speeds (cpu0_tps, cpu1_tps: the untraced side
on each), which show a machine whose CPUs differ.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time


def fail(msg):
    raise SystemExit("duet_peer: " + msg)


def copy_libraries(bench, into):
    """The libraries llama-bench loads (its directory's lib*.so*), copied as new files (a hard
    link would share the inode, and with it the probes); symlinks recreated as symlinks."""
    src = os.path.dirname(os.path.realpath(bench))
    wanted = ("libllama", "libggml")
    for name in sorted(os.listdir(src)):
        if not name.startswith(wanted) or ".so" not in name:
            continue
        if any(skip in name for skip in ("-server-impl", "-completion-impl", "-quantize-impl")):
            continue
        path = os.path.join(src, name)
        if os.path.islink(path):
            os.symlink(os.readlink(path), os.path.join(into, name))
        else:
            shutil.copyfile(path, os.path.join(into, name))
    return into


def check_copy_is_loaded(bench, copy):
    """The traced side must run the copy: were it to load the original libraries (an RPATH,
    which LD_LIBRARY_PATH does not override), both sides would trap on the same files."""
    r = subprocess.run(["ldd", bench], env=dict(os.environ, LD_LIBRARY_PATH=copy), capture_output=True, text=True)
    for lib in ("libllama.so", "libggml-cpu.so", "libggml-base.so"):
        lines = [l for l in r.stdout.splitlines() if lib in l]
        if not lines or not all(copy in l for l in lines):
            fail(f"llama-bench under LD_LIBRARY_PATH={copy} does not load {lib} from there: {lines or r.stdout[-300:]}")


def bench_argv(bench, model, tokens, reps):
    return [bench, "-m", model, "-p", "0", "-n", str(tokens), "-t", "1", "-r", str(reps), "-o", "json"]


def tps_of(out, who):
    try:
        rows = json.loads(out)
    except json.JSONDecodeError:
        fail(f"{who}: llama-bench printed no JSON: {out[-500:]}")
    tg = [r for r in rows if r.get("n_gen", 0) > 0]
    if not tg:
        fail(f"{who}: llama-bench measured no decode")
    return float(tg[0]["avg_ts"])


def wait_for_launch(profinfer_pid, comm, limit_s=120):
    """Waits until profinfer (under taskset) has released the command: a descendant named COMM."""
    deadline = time.monotonic() + limit_s
    prefix = comm[:15]
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if name == prefix and descends_from(ppid, profinfer_pid):
                return
        time.sleep(0.01)
    fail(f"profinfer did not launch {comm} within {limit_s} s")


def descends_from(pid, ancestor):
    for _ in range(8):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            return False
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return False


def finish_side_by_side(traced, untraced, a, copy, traced_cpu, untraced_cpu):
    """Waits for both sides; the one that ends first is followed on its CPU by an unmeasured
    copy of its decode until the other ends, so that neither side decodes its last part with
    the machine's memory to itself (that side read faster, whichever it was). Returns both
    sides' (stdout, stderr)."""
    outs = {}
    filler = None
    sides = {"traced": traced, "untraced": untraced}
    while len(outs) < 2:
        for name, p in sides.items():
            if name in outs or p.poll() is None:
                continue
            outs[name] = p.communicate()
            if len(outs) == 1:
                cpu = traced_cpu if name == "traced" else untraced_cpu
                env = dict(os.environ, LD_LIBRARY_PATH=copy) if name == "traced" else None
                filler = subprocess.Popen(["taskset", "-c", str(cpu)] + bench_argv(a.llama_bench, a.model, a.tokens * 4, a.reps),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(0.005)
    if filler:
        filler.kill()
        filler.wait()
    return outs["traced"][0], outs["traced"][1], outs["untraced"][0], outs["untraced"][1]


def duet(a, copy, traced_cpu, untraced_cpu, work, k):
    """Both at once; returns (traced tok/s, untraced tok/s)."""
    env_copy = dict(os.environ, LD_LIBRARY_PATH=copy)
    traced_bench = bench_argv(a.llama_bench, a.model, a.tokens, a.reps)
    if a.level in ("none", "bpftrace"):
        traced_argv = traced_bench
    else:
        db = os.path.join(work, f"duet-{k}.db")
        traced_argv = [a.profinfer, "record", "--stop-with-parent", "--level", a.level, "--board", a.board, "-o", db]
        traced_argv += a.record_arg + ["--"] + traced_bench
    bt = None
    if a.level == "bpftrace":
        # The floor: bpftrace's probes on the copy's operator hooks, attached before the duet.
        script = a.bpftrace.replace(os.path.dirname(os.path.realpath(a.llama_bench)), copy)
        bt = subprocess.Popen(["taskset", "-c", str(traced_cpu), "bpftrace", "-e", script], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        line = bt.stdout.readline()
        if "Attaching" not in line:
            fail(f"bpftrace did not attach: {line}{bt.stdout.read()[-500:]}")
    traced = subprocess.Popen(["taskset", "-c", str(traced_cpu)] + traced_argv, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env_copy)
    if traced_argv is not traced_bench:
        # Both decodes must run side by side from their start: started at once, the untraced one
        # was ahead by profinfer's start-up (BPF load, ELF and DWARF: ~1 s), and the traced one
        # decoded its last second alone — faster, with the memory to itself: traced sides read
        # 3-4 % faster than untraced (8 rounds, graph, op-sampled and op alike).
        wait_for_launch(traced.pid, os.path.basename(a.llama_bench))
    untraced = subprocess.Popen(["taskset", "-c", str(untraced_cpu)] + bench_argv(a.llama_bench, a.model, a.tokens, a.reps),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t_out, t_err, u_out, u_err = finish_side_by_side(traced, untraced, a, copy, traced_cpu, untraced_cpu)
    if bt:
        bt.terminate()
        bt.wait()
    if traced.returncode != 0:
        fail(f"the traced side exited with status {traced.returncode}: {t_err.strip()[-1500:]}")
    if untraced.returncode != 0:
        fail(f"the untraced side exited with status {untraced.returncode}: {u_err.strip()[-1500:]}")
    for f in os.listdir(work):
        if f.startswith(f"duet-{k}.db"):
            os.remove(os.path.join(work, f))
    return tps_of(t_out, "traced side"), tps_of(u_out, "untraced side")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("llama_bench")
    ap.add_argument("model")
    ap.add_argument("--level", required=True, help="none (A/A), bpftrace (the floor) or a record --level")
    ap.add_argument("--record-arg", action="append", default=[], help="one more argument of profinfer record (repeatable)")
    ap.add_argument("--profinfer", required=True)
    ap.add_argument("--bpftrace", help="level bpftrace: the script, on the original libraries' paths (run on the copy's)")
    ap.add_argument("--board", default="host")
    ap.add_argument("--tokens", type=int, default=48, help="llama-bench -n")
    ap.add_argument("--reps", type=int, default=3, help="llama-bench -r")
    ap.add_argument("--cpus", default="0,1", help="the two CPUs")
    a = ap.parse_args()
    cpus = [int(c) for c in a.cpus.split(",")]
    if len(cpus) != 2 or cpus[0] == cpus[1]:
        fail("--cpus needs two different CPUs")
    if a.level == "bpftrace" and not a.bpftrace:
        fail("level bpftrace needs --bpftrace SCRIPT")
    work = tempfile.mkdtemp(prefix="duet-peer-")
    try:
        os.mkdir(os.path.join(work, "lib"))
        copy = copy_libraries(a.llama_bench, os.path.join(work, "lib"))
        check_copy_is_loaded(a.llama_bench, copy)
        results = [duet(a, copy, cpus[0], cpus[1], work, 0), duet(a, copy, cpus[1], cpus[0], work, 1)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [t / u for t, u in results]
    gmean = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    out = {"level": a.level, "tokens": a.tokens, "reps": a.reps,
           "duet_slowdown_pct": 100.0 * (1.0 - gmean(ratios)),
           "traced_tps": gmean([t for t, _ in results]), "untraced_tps": gmean([u for _, u in results]),
           "ratio_a": ratios[0], "ratio_b": ratios[1],
           # the untraced side ran on cpus[1] in the first duet, on cpus[0] in the second
           f"cpu{cpus[1]}_tps": results[0][1], f"cpu{cpus[0]}_tps": results[1][1]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
