"""The streaming target of the overhead peers (attach_peer.py, duet_peer.py): evalcb_peer
--stream decoding llama-bench's tg workload over and over, one line per decode call with the
CLOCK_MONOTONIC start and end it read around llama_decode, so that its speed over any window
is measured by the target itself, without tracing it."""
import json
import signal
import subprocess
import time


def recording_info(profinfer, db):
    """What `profinfer info --json` says of a recording (keys: docs/cli.md): the peers read
    recordings through it, never with SQL on the trace."""
    r = subprocess.run([profinfer, "info", "--json", db], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"profinfer info exited with status {r.returncode}: {r.stderr.strip()[-1000:]}")
    return json.loads(r.stdout)


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Target:
    """The streaming target; its lines go to a file, never a pipe, so that the target does
    not wait for this reader (a pipe filled by a fast target would pace it)."""

    def __init__(self, argv, log, err, env=None):
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)

    def calls(self):
        out = []
        with open(self.log) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and line.endswith("\n"):
                    out.append(tuple(int(x) for x in parts))
        return out

    def count(self):
        with open(self.log, "rb") as f:
            return f.read().count(b"\n")

    def between(self, a_ns, b_ns, slack_ns=200_000):
        """Calls wholly inside [a, b]; slack: the target's own clock reads are taken just
        outside llama_decode, the recorder's just inside."""
        return [c for c in self.calls() if c[1] >= a_ns - slack_ns and c[2] <= b_ns + slack_ns]

    def recorded(self, first_ns, last_ns):
        """The target's calls a recording spanning [first, last] (its first call's start to its
        last call's end, read inside llama_decode) should hold: those that overlap that span.
        Exact without a slack, however long a probe or a descheduled vCPU holds the clock
        reads apart: each recorded time lies within its call's own (read outside it), and
        calls do not overlap, so the call before the first ends before it starts."""
        return [c for c in self.calls() if c[2] >= first_ns and c[1] <= last_ns]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def wait_calls(self, n, err, limit_s=600):
        """Waits until the target has decoded N calls; fails if it ends first (ERR: its stderr file)."""
        deadline = time.monotonic() + limit_s
        while self.count() < n:
            if self.proc.poll() is not None:
                err.seek(0)
                raise SystemExit(f"the target exited with status {self.proc.returncode} before decoding {n} calls: "
                                 f"{err.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"the target decoded fewer than {n} calls within {limit_s} s")
            time.sleep(0.05)
