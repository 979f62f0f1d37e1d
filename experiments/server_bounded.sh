#!/usr/bin/env bash
# A bounded attach to a loaded server (record --max-db-mb): llama-server of the pinned commit
# on MODEL with 4 slots, experiments/server_load.py's 4 clients for SECONDS, and
# `profinfer record --level op --pid … --max-db-mb MB --duration SECONDS` attached once the
# load runs. The trace's size on disk (database and log) is sampled every 0.2 s; the largest
# and the final size, the calls kept and dropped and the failed requests are printed.
#
#   experiments/server_bounded.sh MODEL [SECONDS=600] [MB=50] [OUT_DIR=a new temporary one]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:?usage: server_bounded.sh MODEL [SECONDS] [MB] [OUT_DIR]}
seconds=${2:-600}
mb=${3:-50}
out=${4:-$(mktemp -d)}
mkdir -p "$out"
profinfer=${PROFINFER:-$here/build/profinfer}
server=$("$here/scripts/llama.sh" program debug llama-server)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

"$server" -m "$model" --parallel 4 -c 4096 -t 2 --host 127.0.0.1 --port "$port" >"$out/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true; kill ${lpid:-} ${wpid:-} 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
# A model profinfer synthesised (its general.name, near the file's start, says so): its lone
# bytes are never sampled (server_load.py --synthetic-vocab), or the server fails requests.
vocab=(); head -c 65536 "$model" | grep -aqF "(profinfer synthetic)" && vocab=(--synthetic-vocab)
python3 "$here/experiments/server_load.py" --url "http://127.0.0.1:$port" --clients 4 --requests 1000000 \
  --predict 8,64 --duration "$((seconds + 10))" "${vocab[@]}" -o "$out/load.jsonl" 2>/dev/null &
lpid=$!
sleep 2
(while :; do
   s=0; for f in "$out/run.db" "$out/run.db-wal" "$out/run.db-journal"; do [[ -f $f ]] && s=$((s + $(stat -c %s "$f"))); done
   echo "$(date +%s.%N) $s"; sleep 0.2
 done) >"$out/sizes.txt" &
wpid=$!
"$profinfer" record --level op --pid "$spid" --max-db-mb "$mb" --duration "$seconds" -o "$out/run.db" 2>"$out/record.err"
kill $wpid 2>/dev/null || true
wait $lpid || true
largest=$(sort -k2 -n "$out/sizes.txt" | tail -1 | cut -d' ' -f2)
echo "recording: $(tail -2 "$out/record.err" | tr '\n' ' ')"
echo "largest on disk while recording: $largest bytes (bound $((mb * 1000000))); final: $(stat -c %s "$out/run.db") bytes"
"$profinfer" info --json "$out/run.db" |
  python3 -c "import json,sys; j = json.load(sys.stdin); print('calls kept:', j['calls_recorded'], end=', '); print('dropped:', j['meta'].get('calls_dropped', ''))"
echo "requests answered: $(wc -l <"$out/load.jsonl"), failed: $(grep -vc '"error": null' "$out/load.jsonl" || true)"
echo "in $out"
