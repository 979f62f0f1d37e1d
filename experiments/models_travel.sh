#!/usr/bin/env bash
# Does the decode model travel? On the machine this runs on — measured only by bench-machine —
# predict LLaMA3.2-1B, Qwen2.5-1.5B and Gemma2-2B at q4_0, 1 and 2 threads with
# `profinfer predict --machine`, then measure them with llama-bench (warm, untraced, weights
# read into memory: the decode-speed study's setting) in interleaved rounds, and say how far
# each prediction lands and whether its interval holds the measured speed (docs/models.md).
#
#   experiments/models_travel.sh MODELS_JSON OUT_DIR [--hog] [--rounds N] [--kernel-each-round]
#                                [--machine M --measured CSV]
#
# --hog: a memory-bandwidth hog (stress-ng --stream 1, Debian's stress-ng) pinned to the last
#        CPU beside everything (bench-machine, llama-bench) pinned to the first, at 1 thread
#        only: a machine whose memory bandwidth is taken, for when this machine is the one the
#        fit ran on.
# --kernel-each-round: besides (not instead of) the prediction from the one bench-machine run,
#        read llama.cpp's decode MatMul kernel (ggml_kernel_roof, q4_0) again at the start of
#        each round and predict that round from it: how far a prediction is off because the
#        machine moved between bench-machine and the measuring (a shared VM's memory bandwidth
#        drifts by ±10 % within minutes), not because the model is wrong. Its column is a
#        diagnosis, never the check.
# --machine M --measured CSV: no measuring here — another machine's roofs (its machine.json) and
#        its llama-bench speeds measured as above (CSV: card,threads,tps), e.g. a committed
#        study recorded there.
# Writes OUT_DIR/machine.json, OUT_DIR/travel.csv and OUT_DIR/travel.md.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
profinfer=${PROFINFER:-$here/build/profinfer}
usage() { sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
[[ ${1:-} == -h || ${1:-} == --help ]] && usage 0
[[ $# -ge 2 ]] || usage 2
models=$1 out=$2; shift 2
hog=0 rounds=3 given_machine="" measured="" each_round=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --hog) hog=1 ;;
    --rounds) rounds=$2; shift ;;
    --kernel-each-round) each_round=1 ;;
    --machine) given_machine=$2; shift ;;
    --measured) measured=$2; shift ;;
    *) echo "models_travel: unknown option $1" >&2; usage 2 ;;
  esac
  shift
done
[[ -f $models ]] || { echo "models_travel: no models file $models (profinfer fit RESULTS -o models.json)" >&2; exit 2; }
[[ -x $profinfer ]] || { echo "models_travel: $profinfer is not built (make build)" >&2; exit 2; }
mkdir -p "$out"
# One prediction as one JSON line: predict_json MACHINE CARD THREADS [ROUND]
predict_json() {
  "$profinfer" predict "$models" --card "$2" --threads "$3" --machine "$1" --json |
    python3 -c 'import json,sys; j=json.load(sys.stdin); r=sys.argv[1:]; j.update({"round": int(r[0])} if r else {}); print(json.dumps(j))' ${4:+"$4"}
}
cards=(llama3.2-1b qwen2.5-1.5b gemma2-2b)
threads=(1 2)
pin=()
hog_pid=""
cleanup() { [[ -n $hog_pid ]] && kill "$hog_pid" 2>/dev/null || true; }
trap cleanup EXIT
if [[ $hog == 1 ]]; then
  command -v stress-ng >/dev/null || { echo "models_travel: installing stress-ng (Debian) for the hog" >&2; apt-get install -y -qq stress-ng >/dev/null; }
  last=$(( $(nproc) - 1 ))
  [[ $last -ge 1 ]] || { echo "models_travel: --hog needs 2 CPUs or more" >&2; exit 2; }
  taskset -c "$last" stress-ng --stream 1 --stream-madvise hugepage --timeout 0 -q &
  hog_pid=$!
  sleep 2
  pin=(taskset -c 0)
  threads=(1)
  echo "models_travel: memory-bandwidth hog (stress-ng --stream 1) on CPU $last, the measured side on CPU 0" >&2
fi
if [[ -n $given_machine || -n $measured ]]; then
  [[ -f $given_machine && -f $measured ]] || { echo "models_travel: --machine and --measured go together, both files" >&2; exit 2; }
  cp "$given_machine" "$out/machine.json"
  python3 -c 'import csv,json,sys
for r in csv.DictReader(open(sys.argv[1])): print(json.dumps({"card": r["card"], "threads": int(r["threads"]), "round": 0, "tps": float(r["tps"])}))' "$measured" > "$out/measured.jsonl"
  : > "$out/predicted.jsonl"
  python3 -c 'import csv,sys
for r in csv.DictReader(open(sys.argv[1])): print(r["card"], r["threads"])' "$measured" | while read -r c t; do
    predict_json "$out/machine.json" "$c" "$t" >> "$out/predicted.jsonl"
  done
  rounds=0
else
echo "models_travel: bench-machine (threads ${threads[*]}) …" >&2
th_args=()
for t in "${threads[@]}"; do th_args+=(--threads "$t"); done
"${pin[@]}" "$profinfer" bench-machine -o "$out/machine.json" "${th_args[@]}" >&2
"$here/scripts/llama.sh" ensure debug >/dev/null  # the decode-speed study's llama.cpp (backend cpu)
bench=$("$here/scripts/llama.sh" program debug llama-bench)
declare -A pred
for c in "${cards[@]}"; do
  for t in "${threads[@]}"; do
    pred[$c,$t]=$(predict_json "$out/machine.json" "$c" "$t")
  done
done
# Interleaved rounds: every (card, threads) once per round, in an order that turns.
: > "$out/measured.jsonl"
: > "$out/predicted-each-round.jsonl"
kernel_tool=${PROFINFER_KERNEL_ROOF:-$here/build/boards/ggml_kernel_roof}
for r in $(seq 1 "$rounds"); do
  i=0
  if [[ $each_round == 1 ]]; then
    echo "models_travel: round $r/$rounds: llama.cpp's kernel read again (threads ${threads[*]}) …" >&2
    "${pin[@]}" "$kernel_tool" --types q4_0 --threads "$(IFS=,; echo "${threads[*]}")" > "$out/kernel-r$r.jsonl"
    python3 - "$out/machine.json" "$out/kernel-r$r.jsonl" "$out/machine-r$r.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for line in open(sys.argv[2]):
    k = json.loads(line)
    for roof in m["roofs"]:
        if roof["threads"] == k["threads"]:
            roof.setdefault("kernels", {})[k["type"]] = {key: v for key, v in k.items() if key not in ("type", "threads")}
json.dump(m, open(sys.argv[3], "w"))
PY
    for c in "${cards[@]}"; do
      for t in "${threads[@]}"; do
        predict_json "$out/machine-r$r.json" "$c" "$t" "$r" >> "$out/predicted-each-round.jsonl"
      done
    done
  fi
  for c in "${cards[@]}"; do
    for t in "${threads[@]}"; do
      model=$("$profinfer" model path --card "$c" --type q4_0 --scale full)
      [[ -f $model ]] || "$profinfer" model synth --card "$c" --type q4_0 -o "$model" >&2
      echo "models_travel: round $r/$rounds: $c, $t thread(s) …" >&2
      tps=$("${pin[@]}" "$bench" -m "$model" -p 0 -n 64 -r 3 -t "$t" -mmp 0 -o json 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
      echo "{\"card\": \"$c\", \"threads\": $t, \"round\": $r, \"tps\": $tps}" >> "$out/measured.jsonl"
      i=$((i + 1))
    done
  done
  cards=("${cards[@]:1}" "${cards[0]}")
done
for c in "${cards[@]}"; do for t in "${threads[@]}"; do echo "${pred[$c,$t]}"; done; done > "$out/predicted.jsonl"
fi
python3 - "$out" "$hog" "$models" "$measured" <<'EOF'
import json, statistics, sys
out, hog, models, given = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
machine = json.load(open(f"{out}/machine.json"))
fitted = json.load(open(models))
fit_on = next((e["fitted_on"] for e in fitted.get("decode_roofs", []) if e["type"] == "q4_0"), {})
fit_cpu = f"{fit_on.get('cpu', '?')} ({fit_on.get('isa', '?')})"
meas = {}
for line in open(f"{out}/measured.jsonl"):
    m = json.loads(line)
    meas.setdefault((m["card"], m["threads"]), []).append(m["tps"])
each = {}
try:
    for line in open(f"{out}/predicted-each-round.jsonl"):
        p = json.loads(line)
        each.setdefault((p["card"], p["threads"]), []).append(p["decode_tps"])
except FileNotFoundError:
    pass
rows = []
for line in open(f"{out}/predicted.jsonl"):
    p = json.loads(line)
    key = (p["card"], p["threads"])
    m = statistics.median(meas[key])
    err = 100 * (p["decode_tps"] - m) / m
    inside = p["decode_tps_lo"] <= m <= p["decode_tps_hi"]
    rows.append((p["card"], p["threads"], p["decode_tps"], p["decode_tps_lo"], p["decode_tps_hi"], m, "given" if given else len(meas[key]), err, inside))
rows.sort(key=lambda r: (r[1], r[0]))
with open(f"{out}/travel.csv", "w") as f:
    f.write("card,threads,predicted_tps,lo_tps,hi_tps,measured_tps,rounds,err_pct,inside\n")
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
def roof_text(r):
    k = r.get("kernels", {}).get("q4_0")
    return (f"{r['threads']} thread(s): triad {r['triad_gbs']:.1f} GB/s, int8 peak {r['peak_gops'].get('int8', 0):.0f} Gops/s"
            + (f", llama.cpp's q4_0 decode MatMul {k['stream_gbs']:.1f} GB/s streamed" if k else ""))
roofs = "; ".join(roof_text(r) for r in machine["roofs"])
within = sum(abs(r[7]) <= 15 for r in rows)
inside = sum(r[8] for r in rows)
with open(f"{out}/travel.md", "w") as f:
    f.write(f"# Does the decode model travel?\n\nFitted on: {fit_cpu} ({models}). Predicted for: {machine.get('cpu', '?')} ({machine.get('isa', '?')})"
            f"{' with a memory-bandwidth hog (stress-ng --stream 1) on the other CPU, everything measured pinned to CPU 0' if hog else ''}"
            f", from its bench-machine roofs only ({roofs}).\n\n"
            + (f"Measured there (not here): {given}.\n\n" if given else
               "Measured: llama-bench -p 0 -n 64 -r 3 -mmp 0 (warm, untraced, weights in memory), median over the interleaved rounds.\n\n")
            + 
            "| card | threads | predicted tok/s | 95 % interval | measured tok/s | rounds | error % | inside |\n|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        f.write(f"| {r[0]} | {r[1]} | {r[2]:.2f} | [{r[3]:.2f}, {r[4]:.2f}] | {r[5]:.2f} | {r[6]} | {r[7]:+.1f} | {'yes' if r[8] else 'no'} |\n")
    f.write(f"\nWithin 15 %: {within} of {len(rows)}; measured inside the printed interval: {inside} of {len(rows)}.\n")
    if each:
        f.write("\nDiagnosis, not the check: the same predictions from llama.cpp's kernel read again at the start of each "
                "round (ggml_kernel_roof, q4_0: the machine as the round found it), median over the rounds:\n\n"
                "| card | threads | kernel read each round: predicted tok/s | error % | the one bench-machine run's error % |\n|---|---|---|---|---|\n")
        for r in rows:
            e = statistics.median(each[(r[0], r[1])])
            f.write(f"| {r[0]} | {r[1]} | {e:.2f} | {100 * (e - r[5]) / r[5]:+.1f} | {r[7]:+.1f} |\n")
print(open(f"{out}/travel.md").read())
EOF
