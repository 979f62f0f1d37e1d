#!/usr/bin/env bash
# What a recording costs a user, two profinfer builds side by side: llama-bench untraced and
# under each build at each level, in interleaved rounds (every round runs every
# configuration once, in a new random order), the median over the rounds of each round's ratio, with 95 % bootstrap intervals, of the
# slowdown against the untraced runs of the same rounds. For a change to the recorder: the
# before and after of docs/recording.md's "What a recording costs the target".
#   experiments/compare_builds.sh OLD_PROFINFER NEW_PROFINFER [ROUNDS] [LEVELS] [THREADS]
# Environment: TOKENS (64 generated per repetition), PROMPT (0: no prompt test), REPS (2), MODEL (llama3.2-1b q4_0),
# BENCH_ARGS (more llama-bench options: `-mmp 0` loads the weights into anonymous memory,
# which a host's proactive reclaim of cold file pages — DAMON pageout — cannot take away),
# OUT (a CSV of every run, default /tmp/compare-builds.csv), ADJACENT=1 (each configuration
# against an untraced run of its own beside it, in a random order, instead of one per round).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?the old profinfer}
NEW=${2:?the new profinfer}
ROUNDS=${3:-12}
LEVELS=${4:-token graph op full}
THREADS=${5:-2}
TOKENS=${TOKENS:-64}
PROMPT=${PROMPT:-0}
REPS=${REPS:-2}
OUT=${OUT:-/tmp/compare-builds.csv}
MODEL=${MODEL:-$("$NEW" model path --card llama3.2-1b --type q4_0)}
[[ -f $MODEL ]] || "$NEW" model synth --card llama3.2-1b --type q4_0 -o "$MODEL" >/dev/null
BENCH=$(scripts/llama.sh program debug llama-bench)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
configs=()
for l in $LEVELS; do configs+=("old-$l" "new-$l"); done
# One run of CONFIG, stored as LABEL.
run_one() {
  local c=$1 label=$2 r=$3
  rm -f "$tmp"/run.db*
  local pre=()
  case $c in
    old-*) pre=("$OLD" record -q --level "${c#old-}" -o "$tmp/run.db" --) ;;
    new-*) pre=("$NEW" record -q --level "${c#new-}" -o "$tmp/run.db" --) ;;
  esac
  /usr/bin/time -f "%U,%S,%e" -o "$tmp/time" "${pre[@]}" "$BENCH" -m "$MODEL" -t "$THREADS" -p "$PROMPT" -n "$TOKENS" -r "$REPS" \
    ${BENCH_ARGS:-} -o csv > "$tmp/bench.csv" 2>/dev/null
  local tps own=","
  tps=$(python3 -c "import csv,sys; print(next(r for r in csv.DictReader(open(sys.argv[1])) if r['n_gen'] != '0')['avg_ts'])" "$tmp/bench.csv")
  if [[ -f $tmp/run.db ]]; then
    own=$("$NEW" info --json "$tmp/run.db" |
          python3 -c "import json,sys; m = json.load(sys.stdin)['meta']; print(m.get('recorder_wakeups', '') + ',' + m.get('recorder_cpu_ms', ''))")
  fi
  echo "$r,$label,$tps,$(cat "$tmp/time"),$own" >> "$OUT"
  echo "round $r/$ROUNDS $label: $tps t/s" >&2
}
echo "round,config,tg_tps,user_s,sys_s,wall_s,recorder_wakeups,recorder_cpu_ms" > "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  if [[ ${ADJACENT:-0} == 1 ]]; then
    # Each configuration beside an untraced run of its own, the two in a random order.
    for c in $(printf '%s\n' "${configs[@]}" | shuf); do
      if ((RANDOM % 2)); then run_one none "none@$c" "$r"; run_one "$c" "$c" "$r"
      else run_one "$c" "$c" "$r"; run_one none "none@$c" "$r"; fi
    done
  else
    for c in $(printf '%s\n' none "${configs[@]}" | shuf); do run_one "$c" "$c" "$r"; done
  fi
done
python3 - "$OUT" <<'PY'
import csv, random, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(r["config"], {})[int(r["round"])] = r
# ADJACENT=1: each configuration against the untraced run beside it (none@CONFIG).
base = lambda cfg: by.get("none@" + cfg, by.get("none"))
rounds = sorted(next(iter(by.values())))
# Each round's own ratio against that round's untraced run, then the median over the rounds
# (as profinfer's ratio_interval): drift between rounds is on both sides of a round's ratio.
def slowdown(cfg, key, sample):
    return 100 * (1 - statistics.median(float(by[cfg][k][key]) / float(base(cfg)[k][key]) for k in sample))
def cpu(cfg, sample):
    f = lambda c, k: float(by[c][k]["user_s"]) + float(by[c][k]["sys_s"])
    g = lambda k: float(base(cfg)[k]["user_s"]) + float(base(cfg)[k]["sys_s"])
    return 100 * (statistics.median(f(cfg, k) / g(k) for k in sample) - 1)
random.seed(1)
print(f"{'config':<12} {'n':>3} {'t/s':>7} {'slowdown %':>24} {'CPU time %':>24} {'wake-ups':>9} {'own CPU ms':>10}")
for cfg in by:
    if cfg == "none" or cfg.startswith("none@"):
        print(f"{cfg:<12} {len(rounds):>3} {statistics.median(float(by[cfg][k]['tg_tps']) for k in rounds):>7.2f}")
        continue
    boots = [[rounds[random.randrange(len(rounds))] for _ in rounds] for _ in range(2000)]
    s = sorted(slowdown(cfg, "tg_tps", b) for b in boots)
    c = sorted(cpu(cfg, b) for b in boots)
    lo, hi = int(0.025 * len(s)), int(0.975 * len(s)) - 1
    w = [by[cfg][k]["recorder_wakeups"] for k in rounds if by[cfg][k]["recorder_wakeups"]]
    m = [by[cfg][k]["recorder_cpu_ms"] for k in rounds if by[cfg][k]["recorder_cpu_ms"]]
    print(f"{cfg:<12} {len(rounds):>3} {statistics.median(float(by[cfg][k]['tg_tps']) for k in rounds):>7.2f} "
          f"{slowdown(cfg, 'tg_tps', rounds):>7.2f} [{s[lo]:6.2f}, {s[hi]:6.2f}] "
          f"{cpu(cfg, rounds):>7.2f} [{c[lo]:6.2f}, {c[hi]:6.2f}] "
          f"{statistics.median(map(float, w)) if w else float('nan'):>9.0f} {statistics.median(map(float, m)) if m else float('nan'):>10.1f}")
PY
