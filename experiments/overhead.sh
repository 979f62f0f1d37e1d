#!/usr/bin/env bash
# Cost of tracing (paper Tables 5 and 7) with the bpftrace floor and the peers in the same
# run: see experiments/overhead.py. Usage: experiments/overhead.sh [ROUNDS] [MODEL] [THREADS] [TOKENS] [overhead.py options…]
# (e.g. --configs op,full --out /tmp/o: those configurations, their baselines and the floor only)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${PROFINFER_CACHE:-$HOME/.cache/profinfer}
MODEL=${2:-$CACHE/models/llama3.2-1b-q4_0.gguf}
[[ -f $MODEL ]] || { mkdir -p "$(dirname "$MODEL")"; build/profinfer model synth --card llama3.2-1b --type q4_0 -o "$MODEL" 2>/dev/null; }
command -v bpftrace >/dev/null || { echo "profinfer: installing bpftrace (the overhead floor)" >&2; apt-get install -y -qq --no-install-recommends bpftrace >/dev/null; }
[[ -x build/experiments/evalcb_peer ]] || { echo "profinfer: build/experiments/evalcb_peer is missing (make build)" >&2; exit 1; }
ORT_NODE_PATH=$(scripts/ort.sh node-path)
ORT_MODEL=$(scripts/ort.sh model models/cards/llama3.2-1b.toml)
exec python3 experiments/overhead.py --rounds "${1:-7}" --model "$MODEL" --threads "${3:-2}" --tokens "${4:-48}" \
  --bench "$(scripts/llama.sh program debug llama-bench)" --evalcb build/experiments/evalcb_peer \
  --ort-model "$ORT_MODEL" --ort-node-path "$ORT_NODE_PATH" --out "results/${BOARD:-host}/overhead" "${@:5}"
