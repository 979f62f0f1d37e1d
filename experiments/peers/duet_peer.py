#!/usr/bin/env python3
"""One point of the duet overhead study: a traced and an untraced copy of the workload at once.

Separate runs on this noisy 2-CPU machine spread by several points from run to run (the A/A
of separate runs spans ~5 points), more than the cost of the cheap levels. A duet runs two
single-thread decodes AT THE SAME TIME, each pinned to a CPU of its own, so that whatever
disturbs the machine disturbs both:

  traced     `profinfer record --level LEVEL` of the streaming target (evalcb_peer --stream:
             llama-bench's tg workload, N tokens from an empty context, cleared, again, one
             line per decode call with the CLOCK_MONOTONIC times it read around llama_decode)
             on its own copy of the llama.cpp libraries (uprobes are per file: the untraced
             copy never traps); profinfer and its recorder pinned to the traced side's CPU, so
             that what recording costs is charged to the traced run, as a user feels it
  untraced   the same target on the original libraries

Both sides load the model and wait at a gate (evalcb_peer --ready/--go); once both are
ready, both are let go at the same moment (the untraced one is started when profinfer has
released the traced command, start_offset_s after the traced one). Which side starts decoding
first decides by itself which reads faster: a side let go later reads faster with nothing
traced (A/A, --lag: see experiments/specs/overhead-duet.toml); before the gate, the traced side
decoded ~50 ms ahead of the untraced one and every level read ~0.3-0.5 points dearer. Both
decode without end until told to stop. Once both have decoded WARMUP seconds past their
first whole cycle (profinfer attached, the model read, a --budget settled), WINDOWS windows of
WINDOW seconds are measured on both at once, the two sides swapped between the CPUs before
each (every thread of each side's process tree moved: the recorder goes with the traced side),
so that a CPU of the VM faster than the other, or one disturbed for a while, weighs on both
sides alike. A window's speed for each side is its calls wholly inside it over their span,
read by the target itself. Neither side's start-up or end (model load, profinfer's attach, a
side decoding alone after the other ended) is in a window: with llama-bench runs started
together, whichever side ended last decoded its end with the machine's memory to itself, and
read faster. Under --budget P the windows start one budget cycle later (the calls in which the
gate opens its first window: BUDGET_CYCLE_CALLS / P) and last together BUDGET_CYCLES cycles at
the calls' pace then (window_s in the output), so that a budget is read over its steady state,
not over the gap before its first window.

  duet_slowdown_pct = 100 × (1 − geometric mean of r over the windows),
  r = traced calls/s / untraced calls/s in the window

LEVEL none is the A/A control: both sides untraced, one on the copy, one on the original —
the method's own noise, in the same rounds. LEVEL bpftrace: the count-only floor (bpftrace
counting the operator hooks, BPFTRACE the script written for the original libraries, run on
the copy's) on the traced side. --against-bpftrace SCRIPT: the untraced side runs under that
floor (bpftrace on the original libraries, pinned with that side), so a level's slowdown is
its cost beyond the floor's, measured within the same windows rather than as the difference of
two duets' (each with its own noise).

Prints one JSON line: duet_slowdown_pct, traced_tps, untraced_tps (geometric means over the
windows), the ratio with the traced side on each CPU, the CPUs' own speeds (cpu0_tps, cpu1_tps: the untraced side on
each), which show a machine whose CPUs differ, the recorder's CPU time and wake-ups, and
predicted_pct: what `profinfer estimate` predicts for LEVEL from the run's own trace and this
machine's costs measured right after the duet (not for --budget, whose cost is asked), and
traced_calls_pct at op and full: the share of calls whose operators were recorded (--budget's
gate leaves the others out).

LEVEL watch: `profinfer watch --pid` of the traced side as a user leaves it on a server (its
default level and segments, the metrics endpoint on a loopback port), started once the traced
side has loaded its model, pinned with the traced side, and scraped every SCRAPE_S seconds
as Prometheus would (each scrape reads the segment under way); both sides are let go when it
runs, the windows start once its segment holds decode calls (start_offset_s: from its start
to then).

--load apart: the untraced side is started only once the traced side has loaded its model and
waits at its gate, under every tracer, the A/A included. Tried as the default on 2026-12-07, to
give every tracer the same start order: the A/A itself then read ~4 points (the side that loaded
first decodes slower: experiments/specs/investigations/overhead-duet-apart.toml), as the A/A whose untraced
side started 0.12 s late did (overhead-duet-start). --load together (the default): both started
at once, the untraced side once profinfer has released a launched traced command.

--load gated: both sides started at once and held before they read the model (evalcb_peer
--load-ready/--load-go: the backends loaded, nothing of the model read), then both let load at
the same moment once both wait there — a launched traced side too, however long profinfer took
to release it, so that a launched level and the A/A start their loads alike (overhead-duet's
way since 2026-12-07: experiments/specs/investigations/overhead-duet-gated.toml). start_offset_s
is then the seconds from the start to that moment.

--start-after S: the untraced side started S seconds after the traced one (with nothing traced,
the start order of a launched run, whose untraced side starts once profinfer has released the
traced command, ~0.1 s later).

--attach: the traced side started by the peer like the untraced one, and `profinfer record
--pid` of it at LEVEL (pinned with it) started once both sides have loaded their models — the
same probes as launched, attached as to a server that already runs: what launching the command
(forked by profinfer, held at a pipe, the loader watched from its first instruction, its tree
followed) adds is the launched level's duet minus this one's. The windows start once the
recording holds decode calls; the recorder is stopped (SIGTERM) before the sides.
"""
import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

from stream_target import Target, now_ns, recording_info


def fail(msg):
    raise SystemExit("duet_peer: " + msg)


def library_dir(target):
    """The directory the target loads libllama from (its RUNPATH, or the loader's search)."""
    r = subprocess.run(["ldd", target], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.strip().startswith("libllama.so") and "=>" in line:
            return os.path.dirname(os.path.realpath(line.split("=>")[1].split("(")[0].strip()))
    fail(f"{target} loads no libllama.so: {r.stdout[-500:]}")


def copy_libraries(src, into):
    """The llama.cpp libraries of SRC (lib*.so*), copied as new files (a hard link would share
    the inode, and with it the probes); symlinks recreated as symlinks."""
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


def check_copy_is_loaded(target, copy):
    """The traced side must run the copy: were it to load the original libraries (an RPATH,
    which LD_LIBRARY_PATH does not override), both sides would trap on the same files."""
    r = subprocess.run(["ldd", target], env=dict(os.environ, LD_LIBRARY_PATH=copy), capture_output=True, text=True)
    for lib in ("libllama.so", "libggml-cpu.so", "libggml-base.so"):
        lines = [l for l in r.stdout.splitlines() if lib in l]
        if not lines or not all(copy in l for l in lines):
            fail(f"{target} under LD_LIBRARY_PATH={copy} does not load {lib} from there: {lines or r.stdout[-300:]}")


def rate(calls):
    """Calls per second over the span of CALLS (whole calls, in order)."""
    if len(calls) < 2:
        fail(f"a window holds {len(calls)} whole calls: make it longer")
    return len(calls) * 1e9 / (calls[-1][2] - calls[0][1])


def warm(side, err, tokens, warmup_s):
    """Past the first whole cycle and WARMUP seconds of decoding after it."""
    side.wait_calls(tokens + 1, err)
    first = side.calls()[tokens][2]
    while now_ns() < first + warmup_s * 1e9:
        if side.proc.poll() is not None:
            fail(f"a side exited with status {side.proc.returncode} while warming up")
        time.sleep(0.05)


# --budget P opens a window of the gate's (4 traced calls and the two switches: 2.4 calls' worth
# by its priors, BudgetController::kWindow, kPriorCost, kPriorSwitchCost) once the calls have
# earned it, P % of a call each: every BUDGET_CYCLE_CALLS / P calls. Measured over less than a
# few such cycles, a budget reads what its phase happened to be: a run of ~250 calls (this
# machine's 1B, 4 windows of 3 s) ended before --budget 1's first window and read ~0 with 4 %
# of calls traced.
BUDGET_CYCLE_CALLS = 240.0
BUDGET_CYCLES = 3  # measured, over the windows together


def budget_of(record_args):
    """The P of a --budget P among profinfer record's arguments, or None."""
    for i, x in enumerate(record_args):
        if x == "--budget" and i + 1 < len(record_args):
            return float(record_args[i + 1])
        if x.startswith("--budget="):
            return float(x.split("=", 1)[1])
    return None


def warm_budget(side, err, budget, window_s, windows):
    """Past the budget's first gap and window (one cycle of calls more), then windows that hold
    BUDGET_CYCLES cycles together at the calls' present pace: the window length to use."""
    cycle = BUDGET_CYCLE_CALLS / budget
    side.wait_calls(side.count() + int(math.ceil(cycle)), err, limit_s=3600)
    recent = side.calls()[-32:]
    call_s = statistics.median((c[2] - c[1]) / 1e9 for c in recent)
    return max(window_s, BUDGET_CYCLES * cycle * call_s / windows)


def tree(pid):
    """PID and every process descending from it."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def pin(pid, cpu, descendants=True):
    """Every thread of PID's process tree (or of PID alone) onto CPU (threads started later
    inherit it)."""
    for p in tree(pid) if descendants else [pid]:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                try:
                    os.sched_setaffinity(int(t), {cpu})
                except OSError:
                    pass  # a thread that ended meanwhile
        except OSError:
            pass


def schedstat(pids):
    """CPU time and run-queue wait (ns) of every thread of PIDS so far (/proc/PID/task/TID/
    schedstat: on CPU, waiting to run); threads that ended are not in it."""
    run = wait = 0
    for p in pids:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    r, w, _ = f.read().split()
            except (OSError, ValueError):
                continue
            run += int(r)
            wait += int(w)
    return run, wait


def released(profinfer_pid, target, copy, limit_s=120):
    """Waits until the command profinfer launched runs with the copy's libraries mapped and is
    held at no loader stop (its state not T three looks in a row); returns the seconds waited."""
    t0 = time.monotonic()
    exe = os.path.realpath(target)
    running = 0
    while time.monotonic() - t0 < limit_s:
        for pid in tree(profinfer_pid)[1:]:
            try:
                if os.path.realpath(f"/proc/{pid}/exe") != exe:
                    continue
                with open(f"/proc/{pid}/maps") as f:
                    mapped = copy in f.read()
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            running = running + 1 if mapped and state != "T" else 0
            if running >= 3:
                return time.monotonic() - t0
        time.sleep(0.01)
    fail(f"profinfer did not release {target} within {limit_s} s")


def ready(sides, limit_s=600):
    """Waits until each side has loaded its model and waits at its gate (its ready file)."""
    deadline = time.monotonic() + limit_s
    for side, err, path in sides:
        while not os.path.exists(path):
            if side.proc.poll() is not None:
                err.seek(0)
                fail(f"a side exited with status {side.proc.returncode} before decoding: {err.read().strip()[-1000:]}")
            if time.monotonic() > deadline:
                fail(f"a side was not ready to decode within {limit_s} s")
            time.sleep(0.01)


def duet(a, copy, cpus, work):
    """Both sides at once, swapped between the CPUs every window; returns, per window, (the
    traced side's CPU, traced calls/s, untraced calls/s), and the recording's meta."""
    stream = lambda side: [a.target, a.model, "--mode", "none", "--stream", "--threads", "1", "--tokens", str(a.tokens)]
    gate = {side: [os.path.join(work, side + ".ready"), os.path.join(work, side + ".go")] for side in ("traced", "untraced")}
    load_gate = {side: [os.path.join(work, side + ".load-ready"), os.path.join(work, side + ".load-go")]
                 for side in ("traced", "untraced")}
    gated = lambda side: stream(side) + ["--ready", gate[side][0], "--go", gate[side][1]] + (
        ["--load-ready", load_gate[side][0], "--load-go", load_gate[side][1]] if a.load == "gated" else [])
    db = os.path.join(work, "duet.db")
    launched = a.level not in ("none", "bpftrace", "watch") and not a.attach  # by profinfer
    watching = a.level == "watch"
    if not launched:
        traced_argv = gated("traced")
    else:
        traced_argv = [a.profinfer, "record", "--stop-with-parent", "--level", a.level, "--board", a.board, "-o", db]
        traced_argv += a.record_arg + ["--"] + gated("traced")
    # The floor: bpftrace's probes on the copy's operator hooks (level bpftrace), or on the
    # original libraries' (--against-bpftrace: the untraced side runs under the floor, and the
    # slowdown is the level's cost beyond the floor's), attached before the duet; bpftrace
    # moves with the side it probes.
    bt = start_bpftrace(a.bpftrace.replace(a.libs, copy), cpus[0]) if a.level == "bpftrace" else None
    floor = start_bpftrace(a.against_bpftrace, cpus[1]) if a.against_bpftrace else None
    errs = [open(os.path.join(work, f"{side}.err"), "w+") for side in ("traced", "untraced")]
    traced = Target(["taskset", "-c", str(cpus[0])] + traced_argv, os.path.join(work, "traced.txt"), errs[0],
                    env=dict(os.environ, LD_LIBRARY_PATH=copy))
    offset = released(traced.proc.pid, a.target, copy) if launched and a.load != "gated" else 0.0
    if a.start_after > 0:  # the control of a launched run's start: the untraced side that much later
        time.sleep(a.start_after)
        offset += a.start_after
    if a.load == "apart":  # the untraced side loads once the traced one has loaded and waits at its gate
        t = time.monotonic()
        ready(((traced, errs[0], gate["traced"][0]),))
        offset += time.monotonic() - t
    untraced = Target(["taskset", "-c", str(cpus[1])] + gated("untraced"), os.path.join(work, "untraced.txt"), errs[1])
    windows, meta = [], {}
    spent, spent_s = {}, [0.0]  # within the windows: CPU time and run-queue wait by group
    watcher, watch_dir, scraper = None, os.path.join(work, "watch"), None
    attacher = None  # --attach: `profinfer record --pid` of the traced side
    try:
        if a.load == "gated":  # both load from the same moment, however late profinfer released its command
            t = time.monotonic()
            ready(((traced, errs[0], load_gate["traced"][0]), (untraced, errs[1], load_gate["untraced"][0])))
            for side in ("traced", "untraced"):
                open(load_gate[side][1], "w").close()
            offset += time.monotonic() - t
        # Both decode from the same moment (--lag: the untraced side that much later).
        ready(((traced, errs[0], gate["traced"][0]), (untraced, errs[1], gate["untraced"][0])))
        if watching:
            watcher = start_watch(a.profinfer, traced.proc.pid, watch_dir, cpus[0], work)
            watch_t0 = time.monotonic()
        if a.attach:
            attacher = start_attached(a, traced.proc.pid, db, cpus[0], work)
            watch_t0 = time.monotonic()
        first, then = (("traced", "untraced") if a.lag >= 0 else ("untraced", "traced"))
        open(gate[first][1], "w").close()
        if a.lag:
            time.sleep(abs(a.lag))
        open(gate[then][1], "w").close()
        if watching:
            db = watch_attached(a.profinfer, watcher, watch_dir)
            offset = time.monotonic() - watch_t0
            scraper = Scraper(metrics_url(watcher), a.scrape_s)
        if attacher:
            holds_calls(a.profinfer, attacher, lambda: db, "profinfer record --pid")
            offset = time.monotonic() - watch_t0
        for side, err in ((traced, errs[0]), (untraced, errs[1])):
            warm(side, err, a.tokens, a.warmup)
        budget = budget_of(a.record_arg)
        if budget:
            a.window = warm_budget(traced, errs[0], budget, a.window, a.windows)
        for w in range(a.windows):
            on = cpus[w % 2]
            if w:  # the first window runs where the sides started
                for pid in [traced.proc.pid] + [p.pid for p in (bt, watcher, attacher) if p]:
                    pin(pid, on)
                for pid in [untraced.proc.pid] + ([floor.pid] if floor else []):
                    pin(pid, cpus[(w + 1) % 2])
            if a.recorder_apart and launched:  # profinfer's own threads with the untraced side
                pin(traced.proc.pid, cpus[(w + 1) % 2], descendants=False)
            if w or a.recorder_apart:
                time.sleep(a.settle)
            groups = accounted(traced, untraced, launched, (bt, floor), a.profinfer, watcher or attacher)
            before = {k: schedstat(v) for k, v in groups.items()}
            start = now_ns()
            time.sleep(a.window)
            end = now_ns()
            for k, v in groups.items():
                after = schedstat(v)
                spent[k] = [x + (y - z) for x, y, z in zip(spent.get(k, [0, 0]), after, before[k])]
            spent_s[0] += (end - start) / 1e9
            for side, name in ((traced, "traced"), (untraced, "untraced")):
                if side.proc.poll() is not None:
                    fail(f"the {name} side exited with status {side.proc.returncode} during window {w + 1}")
            windows.append((on, rate(traced.between(start, end)), rate(untraced.between(start, end))))
    finally:
        if scraper:
            scraper.stop()
        if watcher:  # first: its segment closed while the target still runs, as on a server
            stop_profinfer(watcher, "profinfer watch")
        if attacher:  # first too: detached while the target runs, its recording complete
            stop_profinfer(attacher, "profinfer record --pid")
        # SIGTERM to profinfer: it passes it on to the command and ends the recording.
        for side in (traced, untraced):
            side.stop()
        for b in (bt, floor):
            if b:
                stop_bpftrace(b)
    if traced.proc.returncode != 0:
        errs[0].seek(0)
        fail(f"the traced side exited with status {traced.proc.returncode}: {errs[0].read().strip()[-1500:]}")
    predicted = None
    if os.path.exists(db):
        j = recording_info(a.profinfer, db)
        meta = j["meta"]
        calls = (j.get("decode_calls") or 0) + (j.get("prefill_calls") or 0)
        if calls and a.level in ("op", "full"):  # the calls whose operators were recorded (--budget: its gate's)
            meta["traced_calls_pct"] = 100.0 * (1 - (j.get("ops_untraced_calls") or 0) / calls)
        # Not against the floor (the prediction is against no probe); a run with no probe in
        # the target (noprobe) has no decode calls.
        if not a.record_arg and not a.against_bpftrace and j.get("decode_calls"):
            predicted = predict(a, db, j["meta"].get("level", a.level) if watching else a.level)
    for e in errs:
        e.close()
    meta["start_offset_s"] = offset
    if scraper:
        meta["scrapes"] = scraper.scrapes
    # Within the windows, per second of window: the recorder's CPU (profinfer's own threads,
    # not the command's), each side's CPU and run-queue wait, bpftrace's CPU.
    for k, (run, wait) in spent.items():
        meta[f"window_{k}_cpu_ms_s"] = run / 1e6 / spent_s[0]
        if k in ("traced", "untraced"):
            meta[f"window_{k}_wait_ms_s"] = wait / 1e6 / spent_s[0]
    return windows, meta, predicted


def accounted(traced, untraced, launched, bpftraces, profinfer, watcher=None):
    """The processes whose time the windows account: the recorder (profinfer's processes), each
    side's decode (the command profinfer launched, or the side's own process), bpftrace."""
    groups = {"untraced": [untraced.proc.pid]}
    if watcher:  # the watcher and its segment's recorder, or the attached recorder
        groups["recorder"] = tree(watcher.pid)
        groups["traced"] = [traced.proc.pid]
    elif launched:  # profinfer and its helper processes (its guardian) against the command's tree
        exe = os.path.realpath(profinfer)
        ours = lambda p: os.path.realpath(f"/proc/{p}/exe") == exe if os.path.exists(f"/proc/{p}/exe") else False
        pids = tree(traced.proc.pid)
        groups["recorder"] = [p for p in pids if ours(p)]
        groups["traced"] = [p for p in pids if not ours(p)]
    else:
        groups["traced"] = [traced.proc.pid]
    groups["bpftrace"] = [b.pid for b in bpftraces if b]
    return groups


def start_bpftrace(script, cpu):
    """bpftrace running SCRIPT pinned to CPU, once it says it is attaching."""
    bt = subprocess.Popen(["taskset", "-c", str(cpu), "bpftrace", "-B", "none", "-e", script], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    said = ""
    for line in bt.stdout:  # warnings first (bpftrace 0.17: "couldn't set RLIMIT_MEMLOCK"), then attaching
        said += line
        if line.startswith("Attaching"):
            return bt
    bt.wait()
    fail(f"bpftrace exited with status {bt.returncode} before attaching: {said[-500:]}")


def end(proc, sig, limit_s):
    """SIG to PROC, killed if it has not ended within LIMIT_S seconds; its status."""
    proc.send_signal(sig)
    try:
        proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    return proc.returncode


def stop_bpftrace(bt):
    """Its counts are not read; an end that hangs (bpftrace once sat in epoll_wait for 9
    minutes after its SIGINT, 2026-12-06) is cut after 30 s."""
    end(bt, signal.SIGINT, 30)


def start_watch(profinfer, pid, into, cpu, work):
    """`profinfer watch --pid PID` with its defaults but a free loopback port, pinned to CPU."""
    err = open(os.path.join(work, "watch.err"), "w+")
    w = subprocess.Popen(["taskset", "-c", str(cpu), profinfer, "watch", "--pid", str(pid), "--dir", into,
                          "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=err)
    w.err = err
    return w


def said_and_failed(proc, what, who="profinfer watch"):
    """Fail with what PROC (the watcher, or an attached recorder) said on its stderr."""
    proc.err.seek(0)
    fail(f"{who} {what}: {proc.err.read().strip()[-1500:]}")


def holds_calls(profinfer, proc, find_db, who, limit_s=120):
    """The recording PROC writes (FIND_DB: its path, or None while there is none) once it holds
    decode calls (the recorder attached and flushing); returns its path."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said_and_failed(proc, f"exited with status {proc.returncode}", who)
        db = find_db()
        if db and os.path.exists(db):
            r = subprocess.run([profinfer, "info", "--json", db], capture_output=True, text=True)
            if r.returncode == 0 and (json.loads(r.stdout).get("decode_calls") or 0) > 0:
                return db
        time.sleep(0.5)
    said_and_failed(proc, f"recorded no decode call within {limit_s} s", who)


def watch_attached(profinfer, watcher, into):
    """The watcher's first segment once it holds decode calls; returns its path."""
    def first_segment():
        segs = sorted(f for f in os.listdir(into) if f.startswith("segment-") and f.endswith(".db")) if os.path.isdir(into) else []
        return os.path.join(into, segs[0]) if segs else None
    return holds_calls(profinfer, watcher, first_segment, "profinfer watch")


def start_attached(a, pid, db, cpu, work):
    """`profinfer record --pid PID --level LEVEL` into DB, pinned to CPU (--attach)."""
    err = open(os.path.join(work, "record.err"), "w+")
    r = subprocess.Popen(["taskset", "-c", str(cpu), a.profinfer, "record", "--pid", str(pid), "--level", a.level,
                          "--board", a.board, "-o", db] + a.record_arg, stdout=subprocess.DEVNULL, stderr=err)
    r.err = err
    return r


def metrics_url(watcher):
    """The URL the watcher said it serves its metrics on."""
    watcher.err.seek(0)
    for line in watcher.err.read().splitlines():
        if line.startswith("profinfer watch: metrics on "):
            return line.split()[-1]
    said_and_failed(watcher, "named no metrics URL")


class Scraper:
    """GET URL every EVERY_S seconds, as Prometheus scrapes (the first at once)."""

    def __init__(self, url, every_s):
        self.scrapes, self._done = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, every_s), daemon=True)
        self._thread.start()

    def _run(self, url, every_s):
        while True:
            try:
                urllib.request.urlopen(url, timeout=10).read()
                self.scrapes += 1
            except OSError:
                pass
            if self._done.wait(every_s):
                return

    def stop(self):
        self._done.set()
        self._thread.join()


def stop_profinfer(proc, who):
    """SIGTERM, as a user ends it: its recording (the watcher's segment) closed and complete."""
    if end(proc, signal.SIGTERM, 120) != 0:
        said_and_failed(proc, f"ended with status {proc.returncode}", who)
    proc.err.close()


def predict(a, db, level):
    """What `profinfer estimate` predicts for LEVEL from the run's own trace and this
    machine's costs, measured now (both sides stopped)."""
    r = subprocess.run([a.profinfer, "estimate", db, "--json", "--seconds", "1"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"profinfer estimate exited with status {r.returncode}: {r.stderr.strip()[-1000:]}")
    level_asked = level
    for level in json.loads(r.stdout)["levels"]:
        if level["level"] == level_asked:
            return level["slowdown_pct"]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="the streaming target (experiments/peers/evalcb_peer.cpp)")
    ap.add_argument("model")
    ap.add_argument("--level", required=True,
                    help="none (A/A), bpftrace (the floor), watch (profinfer watch as left on a server) or a record --level")
    ap.add_argument("--record-arg", action="append", default=[], help="one more argument of profinfer record (repeatable)")
    ap.add_argument("--profinfer", required=True)
    ap.add_argument("--bpftrace", help="level bpftrace: the script, on the original libraries' paths (run on the copy's)")
    ap.add_argument("--against-bpftrace", metavar="SCRIPT",
                    help="the untraced side runs under the floor (SCRIPT, bpftrace on the original libraries): the "
                         "slowdown is the level's cost beyond the floor's, paired within each window")
    ap.add_argument("--board", default="host")
    ap.add_argument("--tokens", type=int, default=48, help="tokens per cycle from an empty context (llama-bench -n)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds decoded after the first cycle, before the window")
    ap.add_argument("--window", type=float, default=3.0, help="seconds measured on both sides at once, per window")
    ap.add_argument("--windows", type=int, default=4, help="windows, the sides swapped between the CPUs after each")
    ap.add_argument("--settle", type=float, default=0.3, help="seconds after a swap before the next window")
    ap.add_argument("--cpus", default="0,1", help="the two CPUs")
    ap.add_argument("--scrape-s", type=float, default=15.0,
                    help="level watch: seconds between two scrapes of its metrics (Prometheus' common 15 s)")
    ap.add_argument("--lag", type=float, default=0.0,
                    help="seconds the untraced side starts decoding after the traced one (negative: before); "
                         "the control of the start order's own effect")
    ap.add_argument("--load", choices=("apart", "together", "gated"), default="together",
                    help="together (the default): the untraced side started at once (after profinfer released the "
                         "traced command); apart: once the traced one has loaded its model and waits at its gate — "
                         "the side that loaded first then reads ~4 %% slower (overhead-duet-apart's A/A); gated: "
                         "both started at once and held before reading the model (evalcb_peer --load-ready/--load-go), "
                         "both let load at the same moment once both wait there, however late profinfer released its "
                         "command: every tracer's sides, the A/A's too, start their loads alike")
    ap.add_argument("--start-after", type=float, default=0.0, metavar="S",
                    help="start the untraced side S seconds after the traced one (after profinfer released it, "
                         "launched): a launched run's start order, as a control with nothing traced")
    ap.add_argument("--attach", action="store_true",
                    help="`profinfer record --pid` of the traced side started by the peer (not launched by profinfer)")
    ap.add_argument("--recorder-apart", action="store_true",
                    help="profinfer's own threads on the untraced side's CPU (the traced command alone on its own)")
    a = ap.parse_args()
    cpus = [int(c) for c in a.cpus.split(",")]
    if len(cpus) != 2 or cpus[0] == cpus[1]:
        fail("--cpus needs two different CPUs")
    if a.level == "bpftrace" and not a.bpftrace:
        fail("level bpftrace needs --bpftrace SCRIPT")
    if a.against_bpftrace and a.level in ("none", "bpftrace"):
        fail("--against-bpftrace compares a profinfer level with the floor, not " + a.level)
    if a.attach and a.level in ("none", "bpftrace", "watch"):
        fail("--attach attaches profinfer record at a level, not " + a.level)
    if a.load == "gated" and a.start_after:
        fail("--start-after delays the untraced side's start, which --load gated holds before its load anyway")
    if a.windows < 2 or a.windows % 2:
        fail("--windows must be even (each CPU holds the traced side as often), at least 2")
    a.libs = library_dir(a.target)
    work = tempfile.mkdtemp(prefix="duet-peer-")
    try:
        os.mkdir(os.path.join(work, "lib"))
        copy = copy_libraries(a.libs, os.path.join(work, "lib"))
        check_copy_is_loaded(a.target, copy)
        windows, meta, predicted = duet(a, copy, cpus, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    gmean = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    ratio_on = {c: gmean([t / u for on, t, u in windows if on == c]) for c in cpus}
    out = {"level": a.level, "against": "bpftrace" if a.against_bpftrace else "none", "tokens": a.tokens, "window_s": a.window, "windows": a.windows,
           "duet_slowdown_pct": 100.0 * (1.0 - gmean([t / u for _, t, u in windows])),
           "traced_tps": gmean([t for _, t, _ in windows]), "untraced_tps": gmean([u for _, _, u in windows]),
           # the ratio with the traced side on each CPU, and each CPU's own speed (the untraced
           # side's there): they show a machine whose CPUs differ
           "ratio_a": ratio_on[cpus[0]], "ratio_b": ratio_on[cpus[1]],
           **{f"cpu{c}_tps": gmean([u for on, _, u in windows if on != c]) for c in cpus},
           "window_ratios": [round(t / u, 5) for _, t, u in windows],
           "predicted_pct": predicted,
           "start_offset_s": meta.get("start_offset_s", 0.0), "lag_s": a.lag, "load": a.load,
           "recorder_cpu_ms": float(meta.get("recorder_cpu_ms") or 0),
           "recorder_wakeups": int(meta.get("recorder_wakeups") or 0),
           "traced_calls_pct": meta.get("traced_calls_pct"),
           "scrapes": meta.get("scrapes"),
           **{k: meta[k] for k in sorted(meta) if k.startswith("window_")}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
