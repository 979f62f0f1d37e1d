#!/usr/bin/env bash
# What each BPF handler costs per hit, measured by the kernel (kernel.bpf_stats_enabled:
# run_cnt and run_time_ns per program, the handler alone, without the uprobe trap).
#   [RECORD_ARGS="--counters …"] experiments/handler_cost.sh LEVEL [TOKENS] [MODEL] [THREADS] [PROFINFER]
# Prints one line per program: name, hits, mean ns per hit, total ms, and hits per token.
# LEVEL bpftrace: the overhead studies' floor instead of profinfer — bpftrace counting hits of
# the same operator hooks (`@[tid] = count()`, as experiments/src/workload.cpp writes it), the
# same workload untraced otherwise: its handler beside op's, measured alike.
set -euo pipefail
cd "$(dirname "$0")/.."
LEVEL=${1:?level: token, graph, op, full or bpftrace}
TOKENS=${2:-64}
source scripts/cache.sh
MODEL=${3:-$CACHE/models/llama3.2-1b-q4_0.gguf}
THREADS=${4:-2}
PROFINFER=${5:-build/profinfer}
BENCH=$(scripts/llama.sh program debug llama-bench)
[[ -f $MODEL ]] || { mkdir -p "$(dirname "$MODEL")"; "$PROFINFER" model synth --card llama3.2-1b --type q4_0 -o "$MODEL" 2>/dev/null; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; sysctl -qw kernel.bpf_stats_enabled=0' EXIT
sysctl -qw kernel.bpf_stats_enabled=1
if [[ $LEVEL == bpftrace ]]; then
  lib=$(readlink -f "$(dirname "$BENCH")/libggml-cpu.so")
  bpftrace -B none -e "uprobe:$lib:ggml_cpu_extra_compute_forward, uprobe:$lib:ggml_compute_forward_rms_norm_mul_fused { @[tid] = count(); }" \
    > "$tmp/bpftrace.out" 2>&1 &
  bt=$!
  for _ in $(seq 600); do grep -q '^Attaching' "$tmp/bpftrace.out" && break; kill -0 $bt 2>/dev/null || break; sleep 0.1; done
  sleep 1  # "Attaching" is printed before the probes are in
  kill -0 $bt 2>/dev/null || { echo "handler_cost.sh: bpftrace did not start: $(tail -3 "$tmp/bpftrace.out")" >&2; exit 1; }
  "$BENCH" -m "$MODEL" -t "$THREADS" -p 0 -n "$TOKENS" -r 1 -mmp 0 >/dev/null 2>&1
  bpftool prog show -j > "$tmp/last.json"
  kill -INT $bt; wait $bt || true
else
"$PROFINFER" record -q --level "$LEVEL" ${RECORD_ARGS:-} -o "$tmp/run.db" -- "$BENCH" -m "$MODEL" -t "$THREADS" -p 0 -n "$TOKENS" -r 1 \
  -mmp 0 >/dev/null 2>&1 &
rec=$!
# The programs go when the recorder exits: keep the last reading that still has them (the
# final readings, after the recorder unloaded them, do not).
while kill -0 $rec 2>/dev/null; do
  bpftool prog show -j 2>/dev/null > "$tmp/now.json" && grep -q '"llama_decode_enter"' "$tmp/now.json" &&
    cp "$tmp/now.json" "$tmp/last.json"
  sleep 0.5
done
[[ -s $tmp/last.json ]] || { echo "handler_cost.sh: no reading of the recorder's programs" >&2; exit 1; }
wait $rec
fi
python3 - "$tmp/last.json" "$TOKENS" <<'PY'
import json, sys
progs = json.load(open(sys.argv[1]))
tokens = int(sys.argv[2])
ours = [p for p in progs if p.get("run_cnt") and p.get("type") in ("kprobe", "tracing")]
print(f"{'program':28} {'hits':>10} {'ns/hit':>8} {'total ms':>9} {'hits/token':>10}")
for p in sorted(ours, key=lambda p: -p["run_time_ns"]):
    print(f"{p['name']:28} {p['run_cnt']:>10} {p['run_time_ns'] / p['run_cnt']:>8.0f} {p['run_time_ns'] / 1e6:>9.1f} "
          f"{p['run_cnt'] / tokens:>10.1f}")
PY
