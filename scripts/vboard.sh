#!/usr/bin/env bash
# Virtual arm64 boards (docs/boards.md "Virtual boards"): whole Debian arm64 systems, kernel
# included — so that eBPF runs, which qemu-user cannot give — under qemu-system-aarch64
# (-M virt -cpu cortex-a76, TCG), reached over SSH on a loopback port, with no route out.
#   scripts/vboard.sh image              build the root filesystem once (cached): Debian 12
#                                        arm64 with Debian's 6.1 kernel and bullseye's 5.10
#   scripts/vboard.sh start NAME KERNEL [PORT]   boot board NAME on kernel 6.1 or 5.10 (a
#                                        qcow2 overlay of the image), its sshd on loopback PORT
#                                        (default: a free one); waits for SSH; prints the port
#   scripts/vboard.sh ssh NAME [CMD…]    run CMD on it (a login shell without CMD)
#   scripts/vboard.sh stop NAME          power it off cleanly (killed after 60 s)
#   scripts/vboard.sh status             the boards running
#   scripts/vboard.sh pid NAME           the pid of board NAME's qemu (fails if it is not running)
#   scripts/vboard.sh key                the private key the boards accept (for ssh -i, Ansible)
#   scripts/vboard.sh suite KERNEL…      the arm64 suite (build-arm64, CI=true: a skipped eBPF
#                                        test fails) in a board per kernel, one after the other;
#                                        each line shown with its kernel, the whole output kept in
#                                        build-arm64/Testing/vboard-KERNEL.log; fails if any did
# The repository and profinfer's cache are shared into every board at the same paths as
# here (9p), so build-arm64/ and the arm64 llama.cpp run there as built.
# Environment: PROFINFER_CACHE; VBOARD_SMP (4), VBOARD_MEM (4096, MiB); VBOARD_CTEST: more
# arguments for the suite's ctest (e.g. -R 'RecordQos' to run some tests).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
source scripts/cache.sh
DIR=$CACHE/vboard
IMAGE=$DIR/rootfs.ext4
KEY=$DIR/id_ed25519
SMP=${VBOARD_SMP:-4}
MEM=${VBOARD_MEM:-4096}
# Debian's own arm64 kernels: bookworm's 6.1, and bullseye's 5.10 (the generation of the
# Rockchip and Qualcomm vendor kernels; BTF, uprobes and the ARM PMU driver on).
KERNEL_5_10=linux-image-5.10.0-32-arm64
KERNEL_6_1=linux-image-arm64

say() { echo "vboard: $*" >&2; }
die() { say "$*"; exit 1; }

need_host_tools() {
  scripts/install-deps.sh --vboard
  scripts/qemu-binfmt.sh
}

# The root filesystem: Debian 12 arm64 with what profinfer's arm64 build and its tests
# need at run time, sshd with this machine's key, systemd-networkd on DHCP, and both
# kernels with initramfs images holding only the drivers a virt machine boots from.
cmd_image() {
  [[ -f $IMAGE ]] && { say "image cached: $IMAGE"; return; }
  need_host_tools
  mkdir -p "$DIR"
  [[ -f $KEY ]] || ssh-keygen -q -t ed25519 -N '' -C profinfer-vboard -f "$KEY"
  local root=$DIR/rootfs.tmp started=$SECONDS
  rm -rf "$root" "$IMAGE.tmp"
  # What profinfer runs with, its tests' tools (bpftrace: the overhead floor; ansible: the
  # farm tests, the board its own controller; go: pprof reading the exported profiles;
  # nodejs, python3-onnx, numpy: the ONNX Runtime peer), and perf/bpftool for looking by hand.
  local packages=(systemd-sysv udev kmod iproute2 procps openssh-server ca-certificates busybox initramfs-tools
                  libbpf1 libelf1 libdw1 zlib1g libsqlite3-0 libpfm4 libprotobuf32 libgomp1 libstdc++6
                  libboost-iostreams1.74.0 libboost-filesystem1.74.0 libtomlplusplus3 libbenchmark1debian
                  cmake make python3 sqlite3 bpftool bpftrace gnuplot-nox graphviz linux-perf rsync util-linux
                  ansible golang-go nodejs python3-onnx python3-numpy)
  say "building the arm64 root filesystem (mmdebstrap through qemu-user: ~15 minutes)"
  # The initramfs holds the virt machine's boot drivers only: a full one takes over ten
  # minutes per kernel under qemu-user, this one a few.
  mmdebstrap --arch=arm64 --variant=apt --include="$(IFS=,; echo "${packages[*]}")" \
    --setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d"' \
    --setup-hook='echo MODULES=list > "$1/etc/initramfs-tools/conf.d/profinfer"' \
    --setup-hook='printf "%s\n" virtio_pci virtio_mmio virtio_blk virtio_net ext4 > "$1/etc/initramfs-tools/modules"' \
    --customize-hook='echo "deb http://deb.debian.org/debian bullseye main" > "$1/etc/apt/sources.list.d/bullseye.list"' \
    --customize-hook='chroot "$1" apt-get update -qq' \
    --customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $KERNEL_6_1 $KERNEL_5_10" \
    --customize-hook='rm "$1/etc/apt/sources.list.d/bullseye.list"' \
    --customize-hook='echo vboard > "$1/etc/hostname"' \
    --customize-hook='echo "/dev/vda / ext4 rw,relatime 0 1" > "$1/etc/fstab"' \
    --customize-hook='mkdir -p "$1/root/.ssh"' \
    --customize-hook='echo 9pnet_virtio > "$1/etc/modules-load.d/9p.conf"' \
    --customize-hook='printf "#!/bin/sh\n# build-arm64 names qemu-aarch64-static as its tests emulator: here they run as they are.\nexec \"\$@\"\n" > "$1/usr/local/bin/qemu-aarch64-static"' \
    --customize-hook='chmod +x "$1/usr/local/bin/qemu-aarch64-static"' \
    --customize-hook='cp '"$KEY.pub"' "$1/root/.ssh/authorized_keys"' \
    --customize-hook='printf "[Match]\nName=eth0 en*\n[Network]\nDHCP=yes\n" > "$1/etc/systemd/network/10-dhcp.network"' \
    --customize-hook='chroot "$1" systemctl enable systemd-networkd ssh' \
    --customize-hook='echo "PermitRootLogin prohibit-password" > "$1/etc/ssh/sshd_config.d/profinfer.conf"' \
    bookworm "$root" >"$DIR/mmdebstrap.log" 2>&1 || die "mmdebstrap failed: $DIR/mmdebstrap.log"
  for k in "$root"/boot/vmlinuz-*; do
    local v=${k#"$root"/boot/vmlinuz-}
    case $v in 5.10.*) cp "$k" "$DIR/vmlinuz-5.10"; cp "$root/boot/initrd.img-$v" "$DIR/initrd-5.10" ;;
               6.1.*) cp "$k" "$DIR/vmlinuz-6.1"; cp "$root/boot/initrd.img-$v" "$DIR/initrd-6.1" ;; esac
  done
  [[ -f $DIR/vmlinuz-5.10 && -f $DIR/vmlinuz-6.1 ]] || die "the kernels are missing from $root/boot"
  mke2fs -q -t ext4 -L vboard -d "$root" "$IMAGE.tmp" 6G
  mv "$IMAGE.tmp" "$IMAGE"
  rm -rf "$root"
  say "image built in $((SECONDS - started)) s: $IMAGE"
}

run_dir() { echo "$DIR/run/$1"; }
# Whether the board of run directory $1 has a qemu alive.
alive() { [[ -f $1/pid ]] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

# The shares, mounted once the board answers, at the paths of the checkout and the cache
# that started it (not baked into the image: a board started from another clone, or with
# another PROFINFER_CACHE, sees that one), and PROFINFER_CACHE for every login (pam_env),
# Ansible's included. The cache share (llama.cpp builds, models: read-mostly, written only
# by the board) is mounted cache=loose, so the page cache keeps what was read: without it
# every run read the debug libraries' DWARF through 9p again, ~1,300 major faults a
# recording (docs/boards.md). The repository share keeps 9p's default (no cache): the host
# writes there too. (Images built before 2026-12-03 also mount them by fstab, at the paths
# of the checkout that built them.)
mount_shares() {
  local name=$1 opts=trans=virtio,version=9p2000.L,msize=524288
  # A tag mounts once: where an older image's fstab mounted it elsewhere, a bind mount.
  ssh_to "$name" "set -e; modprobe 9pnet_virtio 2>/dev/null || true
    share() { at=\$(awk -v t=\$1 '\$1 == t && \$3 == \"9p\" { print \$2; exit }' /proc/mounts); mkdir -p \"\$2\"
      if [ -z \"\$at\" ]; then mount -t 9p -o \$3 \$1 \"\$2\"; elif [ \"\$at\" != \"\$2\" ]; then mount --bind \"\$at\" \"\$2\"; fi; }
    share repo $(printf %q "$REPO") $opts
    share cache $(printf %q "$CACHE") $opts,cache=loose
    echo PROFINFER_CACHE=$(printf %q "$CACHE") > /etc/environment" \
    || die "$name: could not mount $REPO and $CACHE (9p): $(run_dir "$name")/console.log"
}

cmd_start() {
  local name=${1:?board name} kernel=${2:?kernel: 6.1 or 5.10} port=${3:-}
  [[ $kernel == 6.1 || $kernel == 5.10 ]] || die "kernel must be 6.1 or 5.10, not '$kernel'"
  cmd_image
  local run; run=$(run_dir "$name")
  if alive "$run"; then
    say "$name is running (port $(cat "$run/port"))"; cat "$run/port"; return
  fi
  mkdir -p "$run"
  rm -f "$run/overlay.qcow2"
  qemu-img create -q -f qcow2 -F raw -b "$IMAGE" "$run/overlay.qcow2"
  # A free loopback port for the guest's sshd, unless one was asked for.
  [[ -n $port ]] || port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo "$port" > "$run/port"
  echo "$kernel" > "$run/kernel"
  local started=$SECONDS
  # restrict=on: the guest reaches nothing outside; only the forwarded port reaches it.
  # romfile=: no network boot ROM (the kernel is given directly; Debian ships the ROMs in
  # ipxe-qemu, a recommendation of qemu-system-arm that install-deps does not install).
  qemu-system-aarch64 -M virt -cpu cortex-a76 -smp "$SMP" -m "$MEM" \
    -kernel "$DIR/vmlinuz-$kernel" -initrd "$DIR/initrd-$kernel" \
    -append "root=/dev/vda rw console=ttyAMA0 net.ifnames=0" \
    -drive "file=$run/overlay.qcow2,if=virtio,format=qcow2" \
    -netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$port-:22" -device virtio-net-pci,netdev=n0,romfile= \
    -virtfs "local,path=$REPO,mount_tag=repo,security_model=none,id=repo" \
    -virtfs "local,path=$CACHE,mount_tag=cache,security_model=none,id=cache" \
    -display none -serial "file:$run/console.log" -monitor none \
    -daemonize -pidfile "$run/pid"
  for _ in $(seq 1 120); do
    if ssh_to "$name" true 2>/dev/null; then
      mount_shares "$name"
      echo "$((SECONDS - started))" > "$run/boot_seconds"
      say "$name up on kernel $kernel in $((SECONDS - started)) s (ssh port $port)"
      echo "$port"
      return
    fi
    kill -0 "$(cat "$run/pid")" 2>/dev/null || die "$name died while booting: $run/console.log"
    sleep 2
  done
  die "$name: no SSH after $((SECONDS - started)) s: $run/console.log"
}

ssh_to() {
  local name=$1; shift
  local run; run=$(run_dir "$name")
  [[ -f $run/port ]] || die "$name is not running"
  ssh -q -i "$KEY" -p "$(cat "$run/port")" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o ConnectTimeout=5 -o ServerAliveInterval=30 -o ServerAliveCountMax=10 -o BatchMode=yes root@127.0.0.1 "$@"
}

cmd_stop() {
  local name=${1:?board name} run
  run=$(run_dir "$name")
  [[ -f $run/pid ]] || { say "$name is not running"; return; }
  local pid; pid=$(cat "$run/pid")
  ssh_to "$name" systemctl poweroff 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && { say "$name did not power off: killed"; kill "$pid"; }
  rm -f "$run/pid" "$run/overlay.qcow2"
  say "$name stopped"
}

cmd_pid() {
  local name=${1:?board name} run
  run=$(run_dir "$name")
  alive "$run" || die "$name is not running"
  cat "$run/pid"
}

cmd_status() {
  for run in "$DIR"/run/*/; do
    alive "$run" || continue
    echo "$(basename "$run") kernel $(cat "$run/kernel") port $(cat "$run/port")"
  done
}

# One kernel's suite in its own board (test-KERNEL), started already; its output prefixed;
# the board stopped after.
suite_on() {
  local k=$1 log=$2 started=$SECONDS rc=0
  ssh_to "test-$k" "cd $(printf %q "$REPO/build-arm64") && uname -r && CI=true PROFINFER_ARCH=arm64 ctest --output-on-failure -j1 -LE vboard --timeout 3600 ${VBOARD_CTEST:-}" \
    2>&1 | tee "$log" | sed -u "s/^/[$k] /" || rc=$?
  say "kernel $k: suite $((SECONDS - started)) s, exit $rc (boot $(cat "$(run_dir "test-$k")/boot_seconds") s; $log)"
  # A guest that stopped answering (ssh gives up after 5 minutes of silence) may have crashed.
  grep -m1 -E "Kernel panic|Internal error:" "$(run_dir "test-$k")/console.log" >/dev/null 2>&1 &&
    say "kernel $k: the guest kernel crashed: $(run_dir "test-$k")/console.log"
  cmd_stop "test-$k"
  return "$rc"
}

# One board at a time. Two at once (tried 2026-12-04) was slower in all: on this 2-vCPU host
# their eight vCPUs made llama.cpp's threads, which spin at barriers, wait for each other —
# a test that decodes took 1.3 to 2.9 times as long (docs/boards.md).
cmd_suite() {
  (($#)) || die "suite: which kernels? (6.1, 5.10)"
  [[ -x $REPO/build-arm64/profinfer ]] || die "no build-arm64/profinfer: make cross-arm64 first"
  cmd_image
  mkdir -p "$REPO/build-arm64/Testing"
  local k failed=
  for k in "$@"; do
    if ! (cmd_start "test-$k" "$k" >/dev/null); then failed+=" $k(boot)"; continue; fi
    suite_on "$k" "$REPO/build-arm64/Testing/vboard-$k.log" || failed+=" $k"
  done
  [[ -z $failed ]] || die "suite failed on kernel(s):$failed"
}

case ${1:-} in
  image) cmd_image ;;
  suite) shift; cmd_suite "$@" ;;
  start) shift; cmd_start "$@" ;;
  ssh) shift; ssh_to "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  status) cmd_status ;;
  pid) shift; cmd_pid "$@" ;;
  key) [[ -f $KEY ]] || die "no key yet: scripts/vboard.sh image makes it"; echo "$KEY" ;;
  *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2 ;;
esac
