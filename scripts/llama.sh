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
#          vulkan   the stock Vulkan libraries of @node-llama-cpp/linux-x64-vulkan (no DWARF),
#                   on Mesa's lavapipe (Debian mesa-vulkan-drivers); run with
#                   GGML_VK_VISIBLE_DEVICES=0 (ggml-vulkan hides CPU-type devices otherwise)
# The stock packages ship no programs: for vulkan, llama-bench is built from the same
# commit's source against its libraries (the stock libllama-common.so included) and placed
# beside them, where ggml_backend_load_all finds the backends.
#
# arm64 (PROFINFER_ARCH=arm64, or an aarch64 machine): the same flavours for arm64 in a cache
# of their own, nlc-VERSION-arm64, whichever machine built it — so that a virtual board that
# shares this machine's cache (scripts/vboard.sh) finds the arm64 build, not this one's.
# On an x86-64 machine (make cross-arm64) debug is cross-compiled with
# cmake/toolchain-aarch64.cmake for the RK3588's Cortex-A76 (armv8.2-a) and its programs run
# under qemu-user; release is the stock @node-llama-cpp/linux-arm64 libraries.
#
# Each flavour directory carries manifest.json; the C++ side (profinfer::LlamaInstall)
# reads only that file, so paths are decided here and nowhere else.
set -euo pipefail

NLC_VERSION=3.21.1
source "$(dirname "${BASH_SOURCE[0]}")/cache.sh"
# TARGET: the npm platform (x64, arm64); ARCH: arm64 when cross-compiling for it, else empty.
case ${PROFINFER_ARCH:-$(uname -m)} in
  arm64|aarch64) TARGET=arm64 ;;
  x64|x86_64) TARGET=x64 ;;
  *) echo "profinfer[llama]: error: no llama.cpp flavours for ${PROFINFER_ARCH:-$(uname -m)}" >&2; exit 1 ;;
esac
ARCH=""
[[ $TARGET == arm64 && $(uname -m) != aarch64 ]] && ARCH=arm64
SUFFIX=""
[[ $TARGET == arm64 ]] && SUFFIX=-arm64
ROOT=$CACHE/llama.cpp/nlc-$NLC_VERSION$SUFFIX
TARGETS=(llama-simple llama-bench llama-completion llama-quantize llama-eval-callback llama-parallel)
# The debug flavour also builds the server (tools/server): what a deployment runs.
SERVER_TARGETS=(llama-server)

say() { echo "profinfer[llama]: $*" >&2; }
die() { say "error: $*"; exit 1; }

npm_unpack() { "$(dirname "${BASH_SOURCE[0]}")/npm-unpack.sh" "$@" || die "could not fetch $1"; }

ensure_source() {
  local src=$ROOT/src
  [[ -f $src/CMakeLists.txt ]] && return 0
  if [[ -n $SUFFIX && -f $CACHE/llama.cpp/nlc-$NLC_VERSION/src/CMakeLists.txt ]]; then  # the same source
    git -c advice.detachedHead=false clone -q "$CACHE/llama.cpp/nlc-$NLC_VERSION/src" "$src" && return 0
  fi
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
  "libllama": "$(cd "$lib" && ls libllama.so libllama.*.so 2>/dev/null | head -1)",
  "libggml": "$(cd "$lib" && ls libggml.so libggml.*.so 2>/dev/null | head -1)",
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
  if [[ $ARCH == arm64 ]]; then
    extra+=(-DCMAKE_TOOLCHAIN_FILE="$(cd "$(dirname "$0")/.." && pwd)/cmake/toolchain-aarch64.cmake"
            -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16 -DLLAMA_BUILD_EXAMPLES=ON)
  fi
  local server=OFF targets=("${TARGETS[@]}")
  if [[ $flavour == debug ]]; then server=ON; targets+=("${SERVER_TARGETS[@]}"); fi
  ensure_source
  # Every flavour compiles through one ccache under $ROOT: the flavours share one source and
  # differ in a handful of files (GGML_USE_BLAS is read by ggml-backend-reg.cpp alone, and
  # ccache's preprocessor mode hashes what a -D does, not the -D), so after the first flavour
  # the next compiles the BLAS backend and little else. Paths are hashed relative to $ROOT and
  # without the build directory, so that debug/build and blis/build hash alike (their debug
  # info then names the first build's directory: only line tables read it).
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    export CCACHE_DIR=$ROOT/ccache CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=4G
  fi
  say "building llama.cpp ($flavour${ARCH:+, $ARCH}) in $dir/build — about 10 minutes on 2 cores for the first flavour, once"
  cmake -S "$ROOT/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server \
    -DGGML_CCACHE=OFF "${launcher[@]}" "${extra[@]}" >"$dir.cmake.log" 2>&1 || die "cmake configure failed, see $dir.cmake.log"
  cmake --build "$dir/build" -j"$(nproc)" --target "${targets[@]}" >"$dir.build.log" 2>&1 \
    || die "llama.cpp build failed, see $dir.build.log"
  if [[ ${#launcher[@]} -gt 0 ]]; then ccache --show-stats >>"$dir.build.log" 2>&1 || true; fi
  write_manifest "$dir" "$flavour" "$dir/build/bin" "$dir/build/bin" true
}

# llama-bench of the bundled source, linked against the stock libraries in LIB (beside them).
build_bench_against() { # lib_dir
  local lib=$1 src=$ROOT/src out=$1/llama-bench
  [[ -x $out ]] && return 0
  say "building llama-bench against the stock libraries in $lib"
  local llama ggml
  llama=$(cd "$lib" && ls libllama*.so | grep -v common | head -1)
  ggml=$(cd "$lib" && ls libggml.*so | head -1)
  g++ -std=c++17 -O2 -g -I"$src/common" -I"$src/include" -I"$src/ggml/include" -I"$src/tools/llama-bench" \
    "$src/tools/llama-bench/llama-bench.cpp" "$src/tools/llama-bench/main.cpp" -o "$out.tmp" \
    -L"$lib" -l:libllama-common.so -l:"$llama" -l:"$ggml" -l:libggml-base.so -pthread -Wl,-rpath,'$ORIGIN' \
    2>"$ROOT/bench-$(basename "$lib").log" || die "building llama-bench against $lib failed, see $ROOT/bench-$(basename "$lib").log"
  mv "$out.tmp" "$out"
}

unpack_stock() { # flavour npm-package-suffix
  local flavour=$1 pkg=$2 dir=$ROOT/$1
  ensure_source   # the headers of the same commit, to build programs against these libraries
  npm_unpack "@node-llama-cpp/$pkg@$NLC_VERSION" "$ROOT/npm/$pkg"
  if [[ $flavour == vulkan ]]; then
    "$(dirname "$0")/install-deps.sh" --with-vulkan   # Mesa's lavapipe and the Vulkan loader
  fi
  mkdir -p "$dir"
  local lib=$ROOT/npm/$pkg/bins/$pkg bin=""
  if [[ $flavour == vulkan ]]; then build_bench_against "$lib"; bin=$lib; fi
  write_manifest "$dir" "$flavour" "$bin" "$lib" false
}

cmd=${1:-}; flavour=${2:-}
case $flavour in debug|blis|openblas|release|vulkan) ;; *) die "unknown flavour '$flavour' (debug, blis, openblas, release, vulkan)";; esac
mkdir -p "$ROOT"
manifest=$ROOT/$flavour/manifest.json
case $cmd in
  ensure)
    # A cache built before a program joined TARGETS: its build tree gains it (incremental),
    # where this machine builds that cache (an x64 host, or the cross build; never a board).
    # A built flavour whose build tree was removed is built again, not left as a manifest
    # naming programs that are gone.
    if [[ -f $manifest && $flavour =~ ^(debug|blis|openblas)$ && ( $TARGET == x64 || -n $ARCH ) ]]; then
      wanted=("${TARGETS[@]}"); [[ $flavour == debug ]] && wanted+=("${SERVER_TARGETS[@]}")
      for t in "${wanted[@]}"; do
        if [[ ! -x $ROOT/$flavour/build/bin/$t ]]; then
          exec 9>"$ROOT/.lock"; flock 9
          [[ -x $ROOT/$flavour/build/bin/$t ]] || build_flavour "$flavour"
          break
        fi
      done
    fi
    if [[ ! -f $manifest ]]; then
      exec 9>"$ROOT/.lock"; flock 9   # two make jobs must not build the same tree
      if [[ ! -f $manifest ]]; then
        case $flavour in
          release) unpack_stock release "linux-$TARGET";;
          vulkan) unpack_stock vulkan linux-x64-vulkan;;
          *) mkdir -p "$ROOT/$flavour"; build_flavour "$flavour";;
        esac
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
  *) die "usage: scripts/llama.sh ensure|manifest|program debug|blis|openblas|release|vulkan [NAME]";;
esac
