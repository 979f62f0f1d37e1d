#!/usr/bin/env bash
# Decode slowdown of tracing (paper Table 5): llama-bench decode speed untraced vs traced
# at each level, runs interleaved so that drift on a shared machine hits all alike.
#   experiments/overhead.sh [RUNS] [MODEL] [THREADS]
# Writes results/$BOARD/overhead/runs.csv and summary.csv (median t/s, slowdown vs
# untraced, events per second at each level).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20}
BOARD=${BOARD:-host}
CACHE=${PROFINFER_CACHE:-$HOME/.cache/profinfer}
MODEL=${2:-$CACHE/models/llama3.2-1b-q4_0.gguf}
THREADS=${3:-2}
OUT=results/$BOARD/overhead
PROFINFER=build/profinfer
BENCH=$(scripts/llama.sh program debug llama-bench)
[[ -f $MODEL ]] || $PROFINFER model synth --card llama3.2-1b --type q4_0 -o "$MODEL"
mkdir -p "$OUT"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "run,level,tokens_per_s,events,lost,seconds" > "$OUT/runs.csv"
levels=(none token graph op full)
for ((r = 1; r <= RUNS; r++)); do
  for level in "${levels[@]}"; do
    bench=("$BENCH" -m "$MODEL" -t "$THREADS" -p 0 -n 64 -r 1 -o csv)
    start=$(date +%s.%N)
    if [[ $level == none ]]; then
      "${bench[@]}" > "$tmp/out.csv" 2>/dev/null
      events=0; lost=0
    else
      rm -f "$tmp/run.db"*
      $PROFINFER record -q --level "$level" -o "$tmp/run.db" -- "${bench[@]}" > "$tmp/out.csv" 2>/dev/null
      read -r events lost < <(sqlite3 -separator ' ' "$tmp/run.db" \
        "SELECT (SELECT count(*) FROM tokens)+(SELECT count(*) FROM graphs)+(SELECT count(*) FROM ops)+(SELECT count(*) FROM nodes)+(SELECT count(*) FROM sched_switch)+(SELECT count(*) FROM sched_wakeup)+(SELECT count(*) FROM experts), (SELECT coalesce(sum(count),0) FROM lost_events)")
    fi
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    # llama-bench csv: the avg_ts column
    tps=$(awk -F, 'NR==1{for(i=1;i<=NF;i++){gsub(/"/,"",$i); if($i=="avg_ts") c=i}} NR==2{gsub(/"/,"",$c); print $c}' "$tmp/out.csv")
    echo "$r,$level,$tps,$events,$lost,$secs" >> "$OUT/runs.csv"
    printf '\rrun %d/%d %-5s %6.2f t/s' "$r" "$RUNS" "$level" "$tps" >&2
  done
done
echo >&2
sqlite3 -csv -header :memory: <<SQL > "$OUT/summary.csv"
.import --csv $OUT/runs.csv runs
WITH ranked AS (
  SELECT level, CAST(tokens_per_s AS REAL) AS t, CAST(events AS REAL) / CAST(seconds AS REAL) AS eps, CAST(lost AS INTEGER) AS lost,
         row_number() OVER (PARTITION BY level ORDER BY CAST(tokens_per_s AS REAL)) AS k, count(*) OVER (PARTITION BY level) AS n
  FROM runs),
med AS (SELECT level, avg(t) AS median_tps FROM ranked WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY level),
ev AS (SELECT level, avg(eps) AS events_per_s, sum(lost) AS lost FROM ranked GROUP BY level)
SELECT m.level, round(m.median_tps, 3) AS median_tps,
       round(100.0 * (1 - m.median_tps / (SELECT median_tps FROM med WHERE level = 'none')), 2) AS slowdown_pct,
       round(e.events_per_s) AS events_per_s, e.lost
FROM med m JOIN ev e USING (level)
ORDER BY CASE m.level WHEN 'none' THEN 0 WHEN 'token' THEN 1 WHEN 'graph' THEN 2 WHEN 'op' THEN 3 ELSE 4 END;
SQL
column -s, -t < "$OUT/summary.csv"
