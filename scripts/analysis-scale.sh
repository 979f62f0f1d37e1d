#!/usr/bin/env bash
# Every analysis command on a long full-level trace: wall seconds and peak RSS of each, with
# the trace's size, into OUT/README.md (issue 54: each ≤ 60 s and ≤ 500 MB on a 10-minute
# trace of the 1B). The trace itself is not kept in OUT (it is GBs): under $TMPDIR, removed
# at the end unless --keep.
#
#   scripts/analysis-scale.sh [--out DIR] [--reps R] [--keep] [--trace DB]
#
#   --out DIR    where README.md and times.csv go (default results/host/analysis-scale)
#   --reps R     llama-bench repetitions of 256 decode tokens, 2 threads (default 90: ~10 minutes
#                recorded at --level full on a 2-CPU Zen 4 VM; 80 took 9 minutes)
#   --trace DB   time an existing trace instead of recording one
#   --keep       keep the recorded trace (its path is printed)
# Needs root (the recording) and a built profinfer (make build) and llama.cpp (scripts/llama.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/host/analysis-scale reps=90 keep=0 trace=
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2;;
    --reps) reps=$2; shift 2;;
    --keep) keep=1; shift;;
    --trace) trace=$2; shift 2;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0;;
    *) echo "analysis-scale.sh: unknown argument '$1' (--help)" >&2; exit 2;;
  esac
done
P=${PROFINFER:-build/profinfer}
[[ -x $P ]] || { echo "analysis-scale.sh: no $P: run make build first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/analysis-scale.XXXXXX")
cleanup() { [[ $keep == 1 ]] || rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$out"
model=$($P model path --card llama3.2-1b --type q4_0)
[[ -f $model ]] || $P model synth --card llama3.2-1b --type q4_0 -o "$model" >/dev/null
bench=$(scripts/llama.sh program debug llama-bench)
recorded=
if [[ -z $trace ]]; then
  trace=$work/run.db
  echo "analysis-scale: recording $reps × 256 decode tokens of llama3.2-1b-q4_0 at --level full (about $((reps * 6 / 60 + 1)) minutes) → $trace" >&2
  start=$(date +%s)
  $P record --level full -q -o "$trace" -- "$bench" -m "$model" -p 0 -n 256 -r "$reps" -t 2 >/dev/null
  recorded="recorded in $(( $(date +%s) - start )) s with \`profinfer record --level full -- llama-bench -m llama3.2-1b-q4_0 -p 0 -n 256 -r $reps -t 2\`"
  [[ $keep == 1 ]] && echo "analysis-scale: the trace stays at $trace" >&2
fi
# A second trace for diff: the first 1024 tokens' worth of the same kind.
small=$work/small.db
$P record --level full -q -o "$small" -- "$bench" -m "$model" -p 0 -n 256 -r 4 -t 2 >/dev/null
q() { sqlite3 -readonly "$trace" "$1"; }
calls=$(q "SELECT count(*) FROM tokens") ops=$(q "SELECT count(*) FROM ops") nodes=$(q "SELECT count(*) FROM graph_nodes")
span=$(q "SELECT (max(end_ns) - min(start_ns)) / 1e9 FROM tokens")
kept=$(q "SELECT count(*) FROM sqlite_master WHERE name = 'node_spans'")
bytes=$(stat -c %s "$trace")
csv=$out/times.csv
echo "command,wall_s,max_rss_mb,status" > "$csv"
timed() {  # NAME ARGS...: one run, its wall time and peak RSS
  local name=$1; shift
  local t=$work/time.txt status=ok
  /usr/bin/time -f "%e %M" -o "$t" "$P" "$@" >/dev/null 2>"$work/err.txt" || status="failed: $(tail -1 "$work/err.txt")"
  read -r wall rss < "$t"
  printf '%s,%s,%.1f,%s\n' "$name" "$wall" "$(echo "$rss / 1024" | bc -l)" "$status" >> "$csv"
  echo "analysis-scale: $name $wall s, $((rss / 1024)) MB ($status)" >&2
}
for by in op-type op token thread block matmul; do timed "stat --by $by" stat "$trace" --by "$by"; done
timed "dag" dag "$trace" -o "$work/dag.svg"
timed "timeline (default window)" timeline "$trace" -o "$work/t.json"
timed "report" report "$trace" -o "$work/r.html"
timed "export pprof" export pprof "$trace" -o "$work/t.pb"
timed "diff (against a 1024-token trace)" diff "$small" "$trace"
timed "info" info "$trace"
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
fam=$(grep -m1 "cpu family" /proc/cpuinfo | cut -d: -f2 | tr -d ' ') mod=$(grep -m1 "^model\s" /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
worst=$(tail -n +2 "$csv" | sort -t, -k2 -g | tail -1)
rss=$(tail -n +2 "$csv" | sort -t, -k3 -g | tail -1)
failed=$(grep -c ",failed" "$csv" || true)
{
  echo "# Every analysis command on a long full-level trace"
  echo
  echo "Written by \`scripts/analysis-scale.sh\` on $(date -u +%Y-%m-%d): $cpu (family $fam model $mod), $(nproc) CPUs, Linux $(uname -r)."
  echo
  echo "The trace: $calls llama_decode calls over ${span%.*} s, $nodes nodes, $ops operator records (one per thread and node), $((bytes / 1048576)) MB$( [[ $kept == 1 ]] && echo ", with the node_spans the recording keeps at its end" || echo ", without node_spans (read through its fallback view)")${recorded:+; $recorded}."
  echo
  echo "| command | wall s | peak RSS MB | |"
  echo "|---|---|---|---|"
  tail -n +2 "$csv" | while IFS=, read -r c w r s; do echo "| \`$c\` | $w | $r | $s |"; done
  echo
  echo "Slowest: \`${worst%%,*}\` ($(echo "$worst" | cut -d, -f2) s); most memory: \`${rss%%,*}\` ($(echo "$rss" | cut -d, -f3) MB); $failed failed. One run each, on a shared 2-CPU VM: a single reading, not an interval (what docs/trace-store.md explains is where the time goes)."
} > "$out/README.md"
echo "analysis-scale: → $out/README.md" >&2
