#!/usr/bin/env bash
# What an idle recording costs: wake-ups and CPU time per second of each of profinfer's
# threads (the recorder's loop, its priority keeper, the guardian process) while the target
# waits with its model loaded (llama_graph_dump --idle-ms: a server between requests).
#   experiments/idle_wakeups.sh [PROFINFER] [LEVEL] [SECONDS]
# From /proc/PID/task/TID/status (voluntary + involuntary context switches) and
# /proc/PID/task/TID/schedstat (ns on a CPU), read before and after SECONDS (3) of waiting.
set -euo pipefail
cd "$(dirname "$0")/.."
PROFINFER=${1:-build/profinfer}
LEVEL=${2:-op}
SECONDS_IDLE=${3:-3}
source scripts/cache.sh
DUMP=${DUMP:-build-dev/tests/llama_graph_dump}
[[ -x $DUMP ]] || DUMP=build/tests/llama_graph_dump
MODEL=${MODEL:-$CACHE/models/llama3.2-1b-f16-tiny.gguf}
[[ -x $DUMP && -f $MODEL ]] || { echo "needs $DUMP and $MODEL (build the tests: make test)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
idle_ms=$(( (SECONDS_IDLE + 4) * 1000 ))
"$PROFINFER" record -q --level "$LEVEL" -o "$tmp/run.db" -- "$DUMP" "$MODEL" "Hello world" 4 2 --idle-ms "$idle_ms" \
  >/dev/null 2>&1 &
rec=$!
sleep 2.5  # loaded, attached, idle
snap() {
  for pid in $(pgrep -x profinfer); do
    for t in /proc/$pid/task/*; do
      echo "$pid/${t##*/} $(grep -h ctxt_switches "$t/status" | awk '{s += $2} END {print s}') $(awk '{print $1}' "$t/schedstat")"
    done
  done | sort
}
snap > "$tmp/a"
sleep "$SECONDS_IDLE"
snap > "$tmp/b"
join "$tmp/a" "$tmp/b" | awk -v rec=$rec -v s="$SECONDS_IDLE" '{
  split($1, id, "/")
  who = id[1] != rec ? "guardian" : id[1] == id[2] ? "recorder loop" : "recorder thread"
  printf "%-16s %-14s %6.1f wake-ups/s %6.2f ms CPU/s\n", who, $1, ($4 - $2) / s, ($5 - $3) / s / 1e6
}'
wait $rec
