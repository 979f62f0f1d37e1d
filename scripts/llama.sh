#!/usr/bin/env bash
# The one place that knows where the pinned llama.cpp lives.
#
#   scripts/llama.sh ensure FLAVOUR   build or unpack FLAVOUR into the cache if missing,
#                                     then print the path of its manifest.json
#   scripts/llama.sh manifest FLAVOUR print the manifest path (fails if not built)
#   scripts/llama.sh program FLAVOUR NAME   print the path of a built program (llama-bench, ...)
#
# FLAVOUR: debug    RelWithDebInfo build of the bundled source, shared libs, CPU backend
#          blis     as debug, plus GGML_BLAS with Debian's BLIS (prefill experiments)
#          openblas as debug, plus GGML_BLAS with Debian's OpenBLAS
#          release  the stock release libraries of @node-llama-cpp/linux-x64 (no DWARF)
#
# Each flavour directory carries manifest.json; the C++ side (profinfer::LlamaInstall)
# reads only that file, so paths are decided here and nowhere else.
set -euo pipefail

NLC_VERSION=3.21.1
CACHE=${PROFINFER_CACHE:-$HOME/.cache/profinfer}
ROOT=$CACHE/llama.cpp/nlc-$NLC_VERSION
TARGETS=(llama-simple llama-bench llama-completion llama-quantize llama-eval-callback)

say() { echo "profinfer[llama]: $*" >&2; }
die() { say "error: $*"; exit 1; }

npm_unpack() { "$(dirname "${BASH_SOURCE[0]}")/npm-unpack.sh" "$@" || die "could not fetch $1"; }

ensure_source() {
  local src=$ROOT/src
  [[ -f $src/CMakeLists.txt ]] && return 0
  npm_unpack "node-llama-cpp@$NLC_VERSION" "$ROOT/npm/node-llama-cpp"
  local bundle=$ROOT/npm/node-llama-cpp/llama/gitRelease.bundle
  [[ -f $bundle ]] || die "node-llama-cpp@$NLC_VERSION has no llama/gitRelease.bundle"
  rm -rf "$src.tmp"
  git -c advice.detachedHead=false clone -q "$bundle" "$src.tmp" || die "cloning $bundle failed"
  mv "$src.tmp" "$src"
}

write_manifest() { # dir flavour bin_dir lib_dir debug_info
  local dir=$1 flavour=$2 bin=$3 lib=$4 dbg=$5 commit="unknown"
  [[ -d $ROOT/src/.git ]] && commit=$(git -C "$ROOT/src" rev-parse HEAD)
  local cpu_libs
  cpu_libs=$(cd "$lib" && ls libggml-cpu*.so 2>/dev/null | sed 's/.*/"&"/' | paste -sd, -)
  cat > "$dir/manifest.json.tmp" <<JSON
{
  "format": 1,
  "flavour": "$flavour",
  "node_llama_cpp": "$NLC_VERSION",
  "llama_cpp_commit": "$commit",
  "debug_info": $dbg,
  "bin_dir": "$bin",
  "lib_dir": "$lib",
  "libllama": "$(cd "$lib" && ls libllama.so libllama.v*.so 2>/dev/null | head -1)",
  "libggml": "$(cd "$lib" && ls libggml.so libggml.v*.so 2>/dev/null | head -1)",
  "libggml_base": "libggml-base.so",
  "libggml_cpu": [$cpu_libs],
  "include_dirs": ["$ROOT/src/include", "$ROOT/src/ggml/include"]
}
JSON
  mv "$dir/manifest.json.tmp" "$dir/manifest.json"
}

build_flavour() { # flavour
  local flavour=$1 dir=$ROOT/$1 extra=()
  if [[ $flavour == blis ]]; then
    "$(dirname "$0")/install-deps.sh" --with-blis   # Debian's libblis-dev: BLAS vendor FLAME
    extra=(-DGGML_BLAS=ON -DGGML_BLAS_VENDOR=FLAME)
  fi
  if [[ $flavour == openblas ]]; then
    "$(dirname "$0")/install-deps.sh" --with-openblas   # Debian's libopenblas-dev
    extra=(-DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS)
  fi
  ensure_source
  say "building llama.cpp ($flavour) in $dir/build — about 10 minutes on 2 cores, once"
  cmake -S "$ROOT/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DGGML_CCACHE=OFF "${extra[@]}" >"$dir.cmake.log" 2>&1 || die "cmake configure failed, see $dir.cmake.log"
  cmake --build "$dir/build" -j"$(nproc)" --target "${TARGETS[@]}" >"$dir.build.log" 2>&1 \
    || die "llama.cpp build failed, see $dir.build.log"
  write_manifest "$dir" "$flavour" "$dir/build/bin" "$dir/build/bin" true
}

unpack_release() {
  local dir=$ROOT/release
  ensure_source   # the headers of the same commit, to build programs against these libraries
  npm_unpack "@node-llama-cpp/linux-x64@$NLC_VERSION" "$ROOT/npm/linux-x64"
  mkdir -p "$dir"
  local lib=$ROOT/npm/linux-x64/bins/linux-x64
  # Soname links the libraries expect at load time (libggml.so → libggml.v0.4.0.so, …).
  write_manifest "$dir" release "" "$lib" false
}

cmd=${1:-}; flavour=${2:-}
case $flavour in debug|blis|openblas|release) ;; *) die "unknown flavour '$flavour' (debug, blis, openblas, release)";; esac
mkdir -p "$ROOT"
manifest=$ROOT/$flavour/manifest.json
case $cmd in
  ensure)
    if [[ ! -f $manifest ]]; then
      exec 9>"$ROOT/.lock"; flock 9   # two make jobs must not build the same tree
      if [[ ! -f $manifest ]]; then
        if [[ $flavour == release ]]; then unpack_release; else mkdir -p "$ROOT/$flavour"; build_flavour "$flavour"; fi
      fi
    fi
    echo "$manifest";;
  manifest)
    [[ -f $manifest ]] || die "llama.cpp flavour '$flavour' is not built: run scripts/llama.sh ensure $flavour"
    echo "$manifest";;
  program)
    [[ -f $manifest ]] || die "llama.cpp flavour '$flavour' is not built: run scripts/llama.sh ensure $flavour"
    bin=$(sed -n 's/^ *"bin_dir": "\(.*\)",$/\1/p' "$manifest")
    [[ -n $bin && -x $bin/${3:-} ]] || die "llama.cpp flavour '$flavour' has no program '${3:-}'"
    echo "$bin/$3";;
  *) die "usage: scripts/llama.sh ensure|manifest|program debug|blis|openblas|release [NAME]";;
esac
