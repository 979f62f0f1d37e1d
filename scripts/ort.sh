#!/usr/bin/env bash
# ONNX Runtime, the overhead study's peer with a profiler of its own (paper Table 7).
#
#   scripts/ort.sh node-path            unpack onnxruntime-node (CPU libraries in its npm
#                                       tarball) into the cache; print the NODE_PATH to use
#   scripts/ort.sh model CARD [LAYERS|tiny]  build the card's LLaMA-shaped 4-bit ONNX model
#                                       into the cache if missing (experiments/peers/ort_model.py),
#                                       with fewer layers or as the card's tiny variant (the
#                                       scale a board's studies run at); print its path
set -euo pipefail
ORT_VERSION=1.30.0
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
ROOT=$CACHE/onnxruntime-$ORT_VERSION
mkdir -p "$CACHE"
HERE=$(cd "$(dirname "$0")" && pwd)
say() { echo "profinfer[ort]: $*" >&2; }
die() { say "error: $*"; exit 1; }

npm_unpack() { "$(dirname "${BASH_SOURCE[0]}")/npm-unpack.sh" "$@" || die "could not fetch $1"; }

case ${1:-} in
  node-path)
    exec 9>"$CACHE/.ort.lock"; flock 9
    npm_unpack "onnxruntime-node@$ORT_VERSION" "$ROOT/node_modules/onnxruntime-node"
    npm_unpack "onnxruntime-common@$ORT_VERSION" "$ROOT/node_modules/onnxruntime-common"
    echo "$ROOT/node_modules";;
  model)
    card=${2:?usage: scripts/ort.sh model CARD [LAYERS|tiny]}; layers=${3:-}; tiny=
    if [[ $layers == tiny ]]; then layers=; tiny=--tiny; fi
    name=$(basename "$card" .toml)${layers:+-${layers}l}${tiny:+-tiny}
    out=$CACHE/models/$name-ort-q4.onnx
    if [[ ! -f $out ]]; then
      # Only what the script imports: a virtual board has them in its image but no apt.
      /usr/bin/python3 -c 'import onnx, numpy' 2>/dev/null || "$HERE/install-deps.sh"
      mkdir -p "$(dirname "$out")"
      # Its own partial file: boards sharing the cache may build the same model at once.
      tmp=$out.tmp.$$.$RANDOM
      /usr/bin/python3 "$HERE/../experiments/peers/ort_model.py" --card "$card" ${layers:+--layers "$layers"} $tiny -o "$tmp" \
        && mv "$tmp" "$out" || { rm -f "$tmp"; die "building $out failed"; }
    fi
    echo "$out";;
  *) die "usage: scripts/ort.sh node-path | model CARD [LAYERS|tiny]";;
esac
