#!/usr/bin/env python3
"""One point of the serving study: llama-server of the pinned commit under a bounded load.

Starts SERVER on MODEL (loopback, a free port, --parallel CLIENTS slots), waits until it
listens, runs experiments/server_load.py's load (CLIENTS concurrent clients, REQUESTS
requests of seeded varied lengths, temperature 0), stops the server with SIGTERM and prints
one JSON line on stdout:

  serve_tps      generated tokens of all requests / the load's wall time (first send to last answer)
  ttft_ms        median over requests of the server's prompt_ms (its time to the first token)
  tpot_ms        median over requests of predicted_ms / predicted_n (its time per output token)
  decode_share_pct  the server's decode time over its prompt and decode time, summed over the
                 requests (predicted_ms / (prompt_ms + predicted_ms)): above 50 the load is
                 decode-bound, where a per-token cost of tracing shows
  requests, failed, content_sha256 (of every answer in request order: equal across runs when
  nothing changed what the model wrote)

Under `profinfer record -- serve_peer.py …` the recorder follows the launched tree to the
server (the process that loads libllama) and records it from its start to its exit.
"""
import argparse
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from server_load import SYNTHETIC_VOCAB, run_load  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, server, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if server.poll() is not None:
            raise SystemExit(f"serve_peer: llama-server exited with status {server.returncode} before listening")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"serve_peer: llama-server did not answer /health within {timeout} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("server")
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=16)
    # Short prompts, long answers: a decode-bound load (with prompts of 8-64 words and 8-32
    # tokens generated, the prompts took most of the server's time: TTFT 2.3 s at 4 clients).
    ap.add_argument("--prompt-words", default="4,16", help="MIN,MAX words per prompt")
    ap.add_argument("--predict", default="64,128", help="MIN,MAX tokens generated per request")
    ap.add_argument("--ctx", type=int, default=4096, help="the server's context, shared by its slots")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([a.server, "-m", a.model, "--parallel", str(a.clients), "-c", str(a.ctx),
                               "-t", str(a.threads), "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(url, server, 300)
        rows = run_load(url, a.clients, a.requests, [int(x) for x in a.prompt_words.split(",")],
                        [int(x) for x in a.predict.split(",")], a.seed, extra=SYNTHETIC_VOCAB)  # the models are synthesised
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    ok = [r for r in rows if not r["error"] and r["timings"]]
    span_s = (max(r["received_ns"] for r in rows) - min(r["sent_ns"] for r in rows)) / 1e9 if rows else 0
    content = hashlib.sha256("\0".join(r["content"] or "" for r in sorted(rows, key=lambda r: r["request"])).encode())
    out = {
        "serve_tps": sum(r["timings"]["predicted_n"] for r in ok) / span_s if span_s > 0 else None,
        "ttft_ms": statistics.median(r["timings"]["prompt_ms"] for r in ok) if ok else None,
        "tpot_ms": statistics.median(r["timings"]["predicted_ms"] / r["timings"]["predicted_n"]
                                     for r in ok if r["timings"]["predicted_n"]) if ok else None,
        "decode_share_pct": 100 * sum(r["timings"]["predicted_ms"] for r in ok) /
        sum(r["timings"]["prompt_ms"] + r["timings"]["predicted_ms"] for r in ok) if ok else None,
        "requests": len(rows),
        "failed": len(rows) - len(ok),
        "content_sha256": content.hexdigest(),
    }
    print(json.dumps(out))
    for r in rows:  # the last line of stderr is what the runner records as the reason
        if r["error"] or not r["timings"]:
            print(f"serve_peer: request {r['request']} failed: {r['error'] or 'no timings in the answer'}", file=sys.stderr)
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
