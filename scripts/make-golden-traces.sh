#!/usr/bin/env bash
# Regenerates tests/golden/*-full.db: small real recordings (tiny synthetic models, the pinned
# debug llama.cpp, --level full) that the analysis tests read where eBPF is not
# available. Run as root after a change to the trace schema or the event format. (The
# golden of the current schema, tests/golden/synthetic-decode.db, is written without BPF:
# build/tests/synthetic_golden tests/golden/synthetic-decode.db.)
#   scripts/make-golden-traces.sh [BUILD_DIR]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
profinfer=$build/profinfer
simple=$("$top/scripts/llama.sh" program debug llama-simple)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for card in llama3.2-1b qwen2.5-1.5b gemma2-2b qwen1.5-moe-a2.7b; do
  "$profinfer" model synth --card "$card" --scale tiny -o "$work/$card.gguf" 2>/dev/null
  # A golden trace is a complete run, and says which machine it came from only vaguely: it is
  # recorded under the host name "golden" (a UTS namespace of its own).
  unshare --uts sh -c 'hostname golden && exec "$@"' sh \
    "$profinfer" record -q --level full -o "$work/$card-full.db" -- "$simple" -m "$work/$card.gguf" -n 8 "Hello world" >/dev/null 2>&1
  install -m 0644 "$work/$card-full.db" "$top/tests/golden/$card-full.db"
  echo "tests/golden/$card-full.db: $("$profinfer" info "$top/tests/golden/$card-full.db" | grep '^operators')"
done
