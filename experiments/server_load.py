#!/usr/bin/env python3
"""A bounded load on a llama-server on loopback: CLIENTS concurrent clients send REQUESTS
completion requests in all, with prompt and output lengths varied by a seeded generator, and
each request's send/receive times and the server's own `timings` (prompt_n, prompt_ms,
predicted_n, predicted_ms, cache_n) are written as JSON lines — what `profinfer stat --by
request` is compared with.

  experiments/server_load.py --url http://127.0.0.1:8080 --clients 4 --requests 32 -o load.jsonl

Standard library only (urllib, threads). Nothing leaves loopback unless --url says so.
"""
import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request

WORDS = ("the model reads every token of a prompt and then writes one token at a time "
         "until it is told to stop or runs out of room in its context window").split()


def prompt_of(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


# profinfer's synthetic vocabulary (models/src/synth.cpp: <unk>, <s>, </s>, then the 256 byte
# tokens) lets random weights pick a lone byte >= 0x80, which is no UTF-8: llama-server then
# fails the request (HTTP 500, "output that does not match the expected Content-only format").
# This request field never samples those 128 tokens; the work per token is unchanged.
SYNTHETIC_VOCAB = {"logit_bias": [[3 + b, False] for b in range(0x80, 0x100)]}


def complete(url, body, timeout):
    req = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def run_load(url, clients=4, requests=32, prompt_words=(8, 64), predict=(4, 24), seed=1, think_ms=0,
             timeout=600, cache_prompt=False, out=None, duration_s=0, extra=None, stop_file=None):
    """Runs the load; returns one row per request (the JSON lines written to OUT, if given).
    DURATION_S > 0: no request is sent after that many seconds (those left are not sent).
    EXTRA: more fields of every request's body. STOP_FILE: no request is sent once it exists
    (a load that lasts until its caller has what it needs)."""
    rng = random.Random(seed)

    # Made as they are sent: a large REQUESTS with a DURATION (a load of fixed length) made a
    # million prompts first, seconds of work, and a short duration passed before any was sent.
    def make_jobs():
        for i in range(requests):
            yield {"id": i, "prompt": prompt_of(rng, rng.randint(*prompt_words)), "n_predict": rng.randint(*predict)}

    jobs = make_jobs()
    t_end = time.monotonic() + duration_s if duration_s > 0 else None
    lock = threading.Lock()
    rows = []

    def client(c):
        while True:
            with lock:
                if (t_end and time.monotonic() >= t_end) or (stop_file and os.path.exists(stop_file)):
                    return
                job = next(jobs, None)
                if job is None:
                    return
            body = {"prompt": job["prompt"], "n_predict": job["n_predict"], "cache_prompt": cache_prompt,
                    "temperature": 0, "seed": seed, "ignore_eos": True, **(extra or {})}
            t0 = time.monotonic_ns()
            try:
                r = complete(url, body, timeout)
                err = None
            except (urllib.error.URLError, OSError, ValueError) as e:
                r, err = {}, str(e)
                if isinstance(e, urllib.error.HTTPError):  # the server's own words
                    try:
                        err += ": " + json.load(e)["error"]["message"]
                    except (OSError, ValueError, KeyError, TypeError):
                        pass
            t1 = time.monotonic_ns()
            row = {"request": job["id"], "client": c, "sent_ns": t0, "received_ns": t1,
                   "n_predict": job["n_predict"], "timings": r.get("timings"), "content": r.get("content"),
                   "error": err}
            with lock:
                rows.append(row)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                print(f"server_load: {len(rows)}/{requests} requests done"
                      + (f" (failed: {err})" if err else ""), file=sys.stderr)
            if think_ms:
                time.sleep(think_ms / 1000)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt-words", default="8,64", help="min,max words per prompt")
    ap.add_argument("--predict", default="4,24", help="min,max tokens to generate (n_predict)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--think-ms", type=float, default=0,
                    help="each client waits this long after an answer before its next request (a paced load)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--cache-prompt", action="store_true",
                    help="let the server reuse a slot's cached prefix (default off: each prompt processed whole)")
    ap.add_argument("--stop-file", help="send no request once this file exists (those in flight are answered)")
    ap.add_argument("--duration", type=float, default=0,
                    help="send no request after this many seconds (with a large --requests: a load of fixed length)")
    ap.add_argument("--synthetic-vocab", action="store_true",
                    help="the model is one profinfer synthesised: never sample its lone bytes (no UTF-8)")
    ap.add_argument("-o", "--output", default="-")
    a = ap.parse_args()
    out = sys.stdout if a.output == "-" else open(a.output, "w")
    rows = run_load(a.url, a.clients, a.requests, [int(x) for x in a.prompt_words.split(",")],
                    [int(x) for x in a.predict.split(",")], a.seed, a.think_ms, a.timeout, a.cache_prompt, out,
                    a.duration, SYNTHETIC_VOCAB if a.synthetic_vocab else None, a.stop_file)
    failed = [r for r in rows if r["error"]]
    if failed:
        print(f"server_load: {len(failed)} of {a.requests} requests failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
