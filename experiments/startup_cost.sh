#!/usr/bin/env bash
# What being recorded costs before the first token: llama-bench -p 0 -n 1 untraced, recorded
# at LEVEL, and recorded at LEVEL with PROFINFER_KERNEL_FEATURES=old (every older kernel's
# fallback: the unrolled batch loop the verifier walked for 0.7 s before bpf_loop), in
# ROUNDS interleaved rounds; medians of each round's extra CPU (user + system) and wall time.
#   experiments/startup_cost.sh [ROUNDS] [LEVEL] [MODEL] [PROFINFER]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-8}
LEVEL=${2:-token}
source scripts/cache.sh
MODEL=${3:-$CACHE/models/llama3.2-1b-q4_0.gguf}
PROFINFER=${4:-build/profinfer}
BENCH=$(scripts/llama.sh program debug llama-bench)
[[ -f $MODEL ]] || { mkdir -p "$(dirname "$MODEL")"; "$PROFINFER" model synth --card llama3.2-1b --type q4_0 -o "$MODEL" 2>/dev/null; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run=("$BENCH" -m "$MODEL" -t 1 -p 0 -n 1 -r 1 -o json -mmp 0)
for r in $(seq 1 "$ROUNDS"); do
  for c in untraced recorded recorded-old; do
    rm -f "$tmp"/s.db*
    case $c in
      untraced) cmd=("${run[@]}") ;;
      *) cmd=("$PROFINFER" record -q --level "$LEVEL" -o "$tmp/s.db" -- "${run[@]}") ;;
    esac
    features=probe; [[ $c == recorded-old ]] && features=old
    PROFINFER_KERNEL_FEATURES=$features /usr/bin/time -f "$r $c %U %S %e" -o "$tmp/time" "${cmd[@]}" >/dev/null 2>&1
    cat "$tmp/time" >> "$tmp/all"
  done
done
python3 - "$tmp/all" <<'PY'
import statistics as st, sys
runs = {}
for line in open(sys.argv[1]):
    r, c, u, s, e = line.split()
    runs[(int(r), c)] = (float(u) + float(s), float(e))
rounds = sorted({r for r, _ in runs})
print(f"{'':14} {'extra CPU s':>12} {'extra wall s':>13}  (median over {len(rounds)} rounds of each round's difference)")
for c in ("recorded", "recorded-old"):
    cpu = [runs[(r, c)][0] - runs[(r, "untraced")][0] for r in rounds]
    wall = [runs[(r, c)][1] - runs[(r, "untraced")][1] for r in rounds]
    print(f"{c:14} {st.median(cpu):>12.2f} {st.median(wall):>13.2f}")
PY
