#!/usr/bin/env bash
# Installs the Debian packages profinfer needs, only those missing.
# Called by the Makefile before any build; safe to run repeatedly.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ccache   # ccache: llama.cpp's flavours share their compiles (scripts/llama.sh)
  libbpf-dev bpftool clang llvm libelf-dev libdw-dev zlib1g-dev
  libsqlite3-dev sqlite3
  libeigen3-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  gnuplot-nox libgnuplot-iostream-dev libboost-iostreams-dev libboost-system-dev libboost-filesystem-dev
  libpfm4-dev libcapstone-dev graphviz
  libprotobuf-dev protobuf-compiler golang-github-google-pprof-dev golang-go  # export pprof, and go tool pprof for its test
  libgtest-dev libgmock-dev libbenchmark-dev
  bc bsdextrautils fonts-dejavu-core
  python3-onnx python3-numpy   # the ONNX Runtime peer's model (experiments/peers/ort_model.py)
  bpftrace nodejs              # the overhead study: its bpftrace floor, the ONNX Runtime peer (node)
  ansible rsync                # make farm (farm/playbook.yml) and its test
  prometheus                   # profinfer watch: its test scrapes the metrics with a Prometheus of its own
)
# Only the experiments' BLAS flavour needs BLIS; install it on request.
if [[ "${1:-}" == "--with-blis" ]]; then packages+=(libblis-dev); fi
if [[ "${1:-}" == "--with-openblas" ]]; then packages+=(libopenblas-dev); fi
# make cross-arm64: the aarch64 cross compiler, the arm64 -dev packages (multiarch) and
# qemu-user for running the arm64 builds here — on top of the base list, whose programs
# (bpftool, protoc) and header-only libraries (CLI11, nlohmann-json, Eigen) the cross build uses.
if [[ "${1:-}" == "--cross-arm64" ]]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || { [[ $(id -u) -eq 0 ]] && dpkg --add-architecture arm64; }
  packages+=(crossbuild-essential-arm64 qemu-user-static clang llvm bpftool
            libbpf-dev:arm64 libelf-dev:arm64 libdw-dev:arm64 zlib1g-dev:arm64 libsqlite3-dev:arm64 libpfm4-dev:arm64
            libboost-iostreams-dev:arm64 libboost-system-dev:arm64 libboost-filesystem-dev:arm64
            libgtest-dev:arm64 libgmock-dev:arm64 libtomlplusplus-dev:arm64 libbenchmark-dev:arm64
            libprotobuf-dev:arm64 protobuf-compiler golang-github-google-pprof-dev)
fi
# make farm: Ansible (with the ansible.posix collection) and rsync on the controller.
if [[ "${1:-}" == "--with-ansible" ]]; then packages+=(ansible rsync); fi
# Virtual boards (scripts/vboard.sh): qemu-system for arm64, mmdebstrap (with arch-test and
# qemu-user through binfmt) for their root filesystem, qemu-img for overlays, ssh, mke2fs.
if [[ "${1:-}" == "--vboard" ]]; then
  packages=(qemu-system-arm mmdebstrap arch-test qemu-utils openssh-client e2fsprogs binfmt-support qemu-user-static)
fi
# make test-under-load: stress-ng keeps every CPU busy beside the suite.
if [[ "${1:-}" == "--with-stress-ng" ]]; then packages+=(stress-ng); fi
# The Vulkan backend's device here: Mesa's lavapipe (Vulkan on the CPU) and the loader.
if [[ "${1:-}" == "--with-vulkan" ]]; then packages+=(mesa-vulkan-drivers libvulkan1); fi

# Installed for the architecture it is wanted for: the build machine's, or the one named
# (libbpf-dev:arm64). dpkg-query answers an unqualified name with another architecture's
# package when only that one is there, so a cross build's arm64 -dev packages hid the
# build machine's missing ones.
native=$(dpkg --print-architecture)
installed() {
  local name=${1%%:*} arch=$native
  [[ $1 == *:* ]] && arch=${1#*:}
  dpkg-query -W -f='${Status} ${Architecture}\n' "$name" 2>/dev/null | grep -Eq "^install ok installed ($arch|all)\$"
}
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then exit 0; fi

echo "profinfer: installing Debian packages: ${missing[*]}" >&2
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "profinfer: need root to install ${missing[*]} (run as root or install them yourself)" >&2; exit 1
  fi
else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
# Another apt (a second make target, the machine's own updates) may hold the locks: wait
# for it rather than fail (apt's own wait covers dpkg's lock; the lists lock fails at once).
apt() {
  local out tries=0
  until out=$($SUDO apt-get -o DPkg::Lock::Timeout=600 "$@" 2>&1 >/dev/null); do
    if grep -q 'Could not get lock' <<<"$out" && ((tries++ < 60)); then
      echo "profinfer: another apt holds its lock; waiting" >&2; sleep 10
    else echo "$out" >&2; return 1; fi
  done
}
apt update -qq
apt install -y -qq --no-install-recommends "${missing[@]}"
