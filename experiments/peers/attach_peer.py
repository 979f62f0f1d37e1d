#!/usr/bin/env python3
"""One point of the attach-window overhead study: the cost of a recording on one process.

Starts EVALCB_PEER --stream (llama-bench's tg workload repeated: N tokens from an empty
context, cleared, again; one line per decode call with its CLOCK_MONOTONIC start and end,
taken inside the target), lets it warm up, then measures PAIRS pairs of windows on that one
process, each pair in a random order:

  detached  nothing attached for WINDOW seconds
  attached  `profinfer record --pid TARGET --level LEVEL --duration WINDOW`: the recorder's
            threads, its ring buffer and its probes, everything a user attaching to a running
            program brings; the window is the recording's first call to its last (its
            tokens table), so attaching and detaching are outside it. LEVEL bpftrace: the
            floor instead — bpftrace counting hits of the operator hooks (--bpftrace SCRIPT)

and prints one JSON line: the calls per second of the target's own clock in each kind of
window (calls wholly inside a window; a window's rate is its calls over the span from its
first call's start to its last call's end), pooled over the pairs, and
attach_slowdown_pct = 100 × (1 − attached / detached).

Both kinds of window are measured the same way, by the target, on the same process and its
memory layout: the run-to-run spread of separate processes (several % here) is not in the
comparison. LEVEL none is the A/A control: both windows detached — the method's own noise.
unmatched_calls: recorded calls the target's own stream has no call for (or the reverse)
in the attached windows — 0 when the recording is exact.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

from stream_target import Target, now_ns, recording_info


def fail(msg):
    raise SystemExit("attach_peer: " + msg)


def bpftrace_window(script, window, target):
    """bpftrace running SCRIPT for WINDOW seconds; the window starts once it says it is
    attaching, plus a settle for the attach to complete, and ends when it is told to stop."""
    if not script:
        fail("level bpftrace needs --bpftrace SCRIPT")
    bt = subprocess.Popen(["bpftrace", "-e", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in bt.stdout:
        if line.startswith("Attaching"):
            break
    else:
        bt.wait()
        fail(f"bpftrace exited with status {bt.returncode} before attaching (is it installed?)")
    time.sleep(0.3)
    start = now_ns()
    time.sleep(window)
    end = now_ns()
    bt.send_signal(signal.SIGINT)
    bt.stdout.read()
    bt.wait()
    return target.between(start, end)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("evalcb_peer", help="the streaming target (experiments/peers/evalcb_peer.cpp)")
    ap.add_argument("model")
    ap.add_argument("--level", required=True, choices=["none", "token", "graph", "op", "full", "bpftrace"])
    ap.add_argument("--bpftrace", help="level bpftrace: the script attached in the attached windows (the floor)")
    ap.add_argument("--profinfer", required=True)
    ap.add_argument("--board", default="host")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=48, help="tokens per cycle from an empty context (llama-bench -n)")
    ap.add_argument("--window", type=float, default=4.0, help="seconds per window")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--settle", type=float, default=0.5, help="seconds between windows")
    ap.add_argument("--keep-db", help="keep the last attached window's recording here")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="attach-peer-")
    err = open(os.path.join(work, "target.err"), "w+")
    target = Target([a.evalcb_peer, a.model, "--mode", "none", "--stream", "--threads", str(a.threads), "--tokens",
                     str(a.tokens)], os.path.join(work, "calls.txt"), err)
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    totals = {"attached": [0, 0], "detached": [0, 0]}  # calls, ns
    unmatched = 0
    recorder = {"recorder_wakeups": 0, "recorder_cpu_ms": 0.0}
    try:
        # Warm-up: the model read in and one whole cycle decoded.
        target.wait_calls(a.tokens + 1, err)
        time.sleep(a.settle)
        for pair in range(a.pairs):
            for kind in rng.sample(["detached", "attached"], 2):
                if kind == "detached" or a.level == "none":
                    start = now_ns()
                    time.sleep(a.window)
                    calls = target.between(start, now_ns())
                elif a.level == "bpftrace":
                    calls = bpftrace_window(a.bpftrace, a.window, target)
                else:
                    db = os.path.join(work, f"window-{pair}.db")
                    r = subprocess.run([a.profinfer, "record", "--pid", str(target.proc.pid), "--level", a.level,
                                        "--duration", str(a.window), "--board", a.board, "-o", db],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    if r.returncode != 0:
                        fail(f"profinfer record exited with status {r.returncode}: {r.stderr.strip()[-2000:]}")
                    j = recording_info(a.profinfer, db)
                    first, last, n, meta = j["first_call_start_ns"], j["last_call_end_ns"], j["calls_recorded"], j["meta"]
                    if not n or n < 2:
                        fail(f"the {a.window} s recording holds {n or 0} calls")
                    calls = target.recorded(first, last)
                    unmatched += abs(len(calls) - n)
                    recorder["recorder_wakeups"] += int(meta.get("recorder_wakeups", 0) or 0)
                    recorder["recorder_cpu_ms"] += float(meta.get("recorder_cpu_ms", 0) or 0)
                    if a.keep_db:
                        os.replace(db, a.keep_db)
                    else:
                        os.remove(db)
                if len(calls) < 2:
                    fail(f"a {kind} window of {a.window} s holds {len(calls)} whole calls: make it longer")
                totals[kind][0] += len(calls)
                totals[kind][1] += calls[-1][2] - calls[0][1]
                time.sleep(a.settle)
        if target.proc.poll() is not None:
            fail(f"the target exited with status {target.proc.returncode} during the windows")
    finally:
        target.stop()
        err.close()
        for f in os.listdir(work):
            os.remove(os.path.join(work, f))
        os.rmdir(work)
    tps = {k: c * 1e9 / ns for k, (c, ns) in totals.items()}
    out = {"level": a.level, "threads": a.threads, "pairs": a.pairs, "window_s": a.window,
           "attached_tps": tps["attached"], "detached_tps": tps["detached"],
           "attach_slowdown_pct": 100.0 * (1.0 - tps["attached"] / tps["detached"]),
           "attached_calls": totals["attached"][0], "detached_calls": totals["detached"][0],
           "unmatched_calls": unmatched, **recorder}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
