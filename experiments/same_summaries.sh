#!/usr/bin/env bash
# Whether two profinfer binaries summarise the same studies into the same files, byte for
# byte: the check a refactor of the summary code must pass (its outputs unchanged).
#
#   experiments/same_summaries.sh OLD NEW STUDY_DIR...
#
# Each STUDY_DIR (results/<board>/<study>, with its index.db and, for a traced study, its
# points' trace DBs) is copied twice beside a copy of its machine.json and summarised by each
# binary from STUDY_DIR/spec.toml, else experiments/specs/<study>.toml (the quick sweep if the
# study was run quick); every file either wrote is compared. Prints one
# line per study, naming each file that differs (with a diff of text files); exits 1 if any did.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 OLD NEW STUDY_DIR..." >&2; exit 2; }
old=$(realpath "$1") new=$(realpath "$2")
shift 2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for study in "$@"; do
  name=$(basename "$study")
  spec=$study/spec.toml
  [[ -f $spec ]] || spec=$here/specs/$name.toml
  [[ -f $spec ]] || { echo "$name: no spec ($study/spec.toml or experiments/specs/$name.toml)" >&2; exit 2; }
  board=$(basename "$(dirname "$(realpath "$study")")")
  for side in old new; do
    mkdir -p "$tmp/$side/$board"
    rm -rf "${tmp:?}/$side/$board/$name"
    # The index and what the points' runs recorded (DBs, the callback's node times, Vulkan
    # timings): every other file is what a summary writes.
    mkdir -p "$tmp/$side/$board/$name/points"
    cp "$study/index.db" "$tmp/$side/$board/$name/"
    find "$study/points" -maxdepth 1 \( -name '*.db' -o -name '*.db.nodes.csv' -o -name '*.vulkan-timings.txt' \) \
      -exec cp {} "$tmp/$side/$board/$name/points/" \; 2>/dev/null || true
    [[ -f $study/../machine.json ]] && cp "$study/../machine.json" "$tmp/$side/$board/"
    bin=$old; [[ $side == new ]] && bin=$new
    # Each copy's runs read the trace DBs in its own points/ (store::ExperimentIndex::done_runs).
    quick=(); [[ $(sqlite3 "$study/index.db" "SELECT value FROM experiment WHERE key = 'quick'") == 1 ]] && quick=(--quick)
    "$bin" experiment summarise "$spec" -o "$tmp/$side/$board/$name" "${quick[@]}" >"$tmp/$side.out" 2>&1 ||
      { echo "$name: $side binary failed: $(tail -3 "$tmp/$side.out")" >&2; exit 2; }
  done
  # index.db is an input (its DB paths rewritten for each copy), not an output.
  if diff -r -q -x index.db "$tmp/old/$board/$name" "$tmp/new/$board/$name" >"$tmp/diff" 2>&1; then
    echo "$name: $(find "$tmp/new/$board/$name" -type f ! -name "*.db" ! -name "*.db.nodes.csv" | wc -l) files identical"
  else
    echo "$name: DIFFERENT"
    cat "$tmp/diff"
    grep '^Files .* differ$' "$tmp/diff" | awk '{print $2, $4}' | while read -r a b; do
      case $a in *.png|*.gz) ;; *) diff "$a" "$b" | head -20 ;; esac
    done
    status=1
  fi
done
exit $status
