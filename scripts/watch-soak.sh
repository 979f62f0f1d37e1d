#!/usr/bin/env bash
# profinfer watch left on a loaded llama-server (issue 54's soak): the watcher's and its
# recorders' RSS, the segment directory's size against --max-db-mb, lost records and the
# requests counted, sampled every 30 s, into OUT/README.md and OUT/samples.csv. The decode
# slowdown of the watcher is not measured here (duets: experiments/specs/watch-duet.toml).
#
#   scripts/watch-soak.sh [--minutes M] [--out DIR] [--max-db-mb MB] [--level L]
#
#   --minutes M     how long (default 60)
#   --out DIR       default results/host/watch-soak
#   --max-db-mb MB  the watcher's bound (default 8: graph level fills ~12 MB an hour here, so 40 is never reached in 60 minutes)
#   --level L       watch level (default graph, the watcher's default)
# Needs root and a built profinfer (make build) and llama.cpp (scripts/llama.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=60 out=results/host/watch-soak bound=8 level=graph
while [[ $# -gt 0 ]]; do
  case $1 in
    --minutes) minutes=$2; shift 2;;
    --out) out=$2; shift 2;;
    --max-db-mb) bound=$2; shift 2;;
    --level) level=$2; shift 2;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
    *) echo "watch-soak.sh: unknown argument '$1' (--help)" >&2; exit 2;;
  esac
done
P=$(realpath "${PROFINFER:-build/profinfer}")
[[ -x $P ]] || { echo "watch-soak.sh: no build/profinfer: run make build first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/watch-soak.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$out"
model=$($P model path --card llama3.2-1b --type q4_0)
[[ -f $model ]] || $P model synth --card llama3.2-1b --type q4_0 -o "$model" >/dev/null
server=$(scripts/llama.sh program debug llama-server)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
sport=$(free_port) mport=$(free_port)
"$server" -m "$model" --parallel 2 -c 4096 -t 2 --host 127.0.0.1 --port "$sport" >"$work/server.out" 2>"$work/server.err" &
spid=$!; pids+=("$spid")
for _ in $(seq 600); do grep -q "listening on" "$work/server.err" && break; sleep 0.2; done
"$P" watch --pid "$spid" --dir "$work/segs" --level "$level" --max-db-mb "$bound" --segment-s 120 --poll-s 5 \
  --listen "127.0.0.1:$mport" 2>"$work/watch.err" &
wpid=$!; pids+=("$wpid")
sleep 5
python3 experiments/server_load.py --url "http://127.0.0.1:$sport" --clients 2 --requests 100000000 --think-ms 500 \
  --predict 16,64 --synthetic-vocab --duration $((minutes * 60)) -o "$work/load.jsonl" 2>"$work/load.err" &
lpid=$!; pids+=("$lpid")
metric() { python3 -c 'import sys, urllib.request
try: t = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
except Exception: sys.exit(0)
for l in t.splitlines():
    if l.startswith(sys.argv[2] + " "): print(l.split()[-1])' "http://127.0.0.1:$mport/metrics" "$1"; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
csv=$out/samples.csv
echo "elapsed_s,watcher_rss_kb,recorder_rss_kb,dir_bytes,segments,ttft_count,lost_records,recorder_cpu_s" > "$csv"
start=$(date +%s)
echo "watch-soak: $minutes minutes of llama-server under 2 clients, watched at --level $level under --max-db-mb $bound" >&2
while kill -0 "$lpid" 2>/dev/null; do
  sleep 30
  rec=$(pgrep -f "record --pid $spid" | head -1 || true)
  printf '%s,%s,%s,%s,%s,%s,%s,%s\n' $(( $(date +%s) - start )) "$(rss_kb "$wpid")" "$( [[ -n $rec ]] && rss_kb "$rec" || echo 0)" \
    "$(du -sb "$work/segs" | cut -f1)" "$(ls "$work/segs"/*.db 2>/dev/null | wc -l)" "$(metric profinfer_request_ttft_seconds_count)" \
    "$(metric profinfer_lost_records_total)" "$(metric profinfer_recorder_cpu_seconds_total)" >> "$csv"
done
sleep 8  # the last poll
final_ttft=$(metric profinfer_request_ttft_seconds_count) final_lost=$(metric profinfer_lost_records_total)
final_cpu=$(metric profinfer_recorder_cpu_seconds_total) deleted=$(metric profinfer_segments_deleted_total)
kill -TERM "$wpid"; wait "$wpid" 2>/dev/null || true
completed=$(python3 -c 'import json, sys
print(sum(1 for l in open(sys.argv[1]) if json.loads(l).get("error") is None))' "$work/load.jsonl")
segs_ok=0 segs=0
for s in "$work/segs"/*.db; do
  segs=$((segs + 1))
  "$P" info "$s" --json >/dev/null 2>&1 && segs_ok=$((segs_ok + 1))
done
# First and last 10 minutes of the samples (a run under 30 minutes: its first and last tenth).
python3 - "$csv" "$out/README.md" "$minutes" "$level" "$bound" "$completed" "$final_ttft" "$final_lost" "$final_cpu" \
  "$deleted" "$segs" "$segs_ok" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" "$(uname -r)" <<'EOF'
import csv, statistics, sys, datetime
(path, readme, minutes, level, bound, completed, ttft, lost, cpu, deleted, segs, segs_ok, cpu_model, kernel) = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
k = 20 if len(rows) >= 60 else max(1, len(rows) // 10)
span = "10 minutes" if k == 20 else "tenth"
med = lambda rs, c: statistics.median(float(r[c]) for r in rs)
w0, w1 = med(rows[:k], "watcher_rss_kb"), med(rows[-k:], "watcher_rss_kb")
r0, r1 = med(rows[:k], "recorder_rss_kb"), med(rows[-k:], "recorder_rss_kb")
top = max(int(r["dir_bytes"]) for r in rows)
with open(readme, "w") as f:
    f.write(f"# profinfer watch on a loaded llama-server for {minutes} minutes\n\n")
    f.write(f"Written by `scripts/watch-soak.sh --minutes {minutes}` on {datetime.date.today()}: {cpu_model}, Linux {kernel}. "
            f"llama-server (pinned debug build) on llama3.2-1b q4_0, 2 threads, 2 slots; 2 clients, 16-64 generated tokens "
            f"a request, 500 ms between a client's requests; `profinfer watch --level {level} --max-db-mb {bound} "
            f"--segment-s 120`. A sample every 30 s ({len(rows)} in all): samples.csv.\n\n")
    f.write(f"| what | first {span} | last {span} |\n|---|---|---|\n")
    f.write(f"| watcher RSS (median) | {w0/1024:.1f} MB | {w1/1024:.1f} MB ({100*(w1-w0)/w0:+.1f} %) |\n")
    f.write(f"| recorder RSS (median, the segment's child) | {r0/1024:.1f} MB | {r1/1024:.1f} MB ({100*(r1-r0)/r0:+.1f} %) |\n\n")
    f.write(f"- Segment directory at most {top/1e6:.1f} MB against a bound of {bound} MB (closed segments; the one under way on top); "
            f"{deleted} segments deleted, {segs} left, {segs_ok} of them read by `profinfer info`.\n")
    f.write(f"- Requests the load completed: {completed}; time-to-first-token observations: {ttft} (a request whose start fell "
            f"between two segments is not observed: docs/watch.md).\n")
    f.write(f"- Lost records: {lost}. Recorder CPU: {float(cpu):.1f} s over {minutes} minutes.\n")
    f.write("- Not measured here: the watcher's decode slowdown (duets: results/host/watch-duet).\n")
EOF
cat "$out/README.md" >&2
