#!/usr/bin/env bash
# Lets this machine exec arm64 programs (make test-arm64): qemu-aarch64 registered with
# binfmt_misc from Debian's qemu-user-static definition, mounting binfmt_misc if needed.
# The arm64 libraries come from the multiarch packages (libc6:arm64 gives
# /lib/ld-linux-aarch64.so.1), so no sysroot prefix is needed.
set -euo pipefail
reg=/proc/sys/fs/binfmt_misc
[[ -e $reg/qemu-aarch64 ]] && exit 0
[[ -e $reg/register ]] || mount -t binfmt_misc binfmt_misc "$reg"
conf=/usr/lib/binfmt.d/qemu-aarch64.conf
[[ -f $conf ]] || { echo "profinfer: $conf is missing: install qemu-user-static" >&2; exit 1; }
cat "$conf" > "$reg/register"
echo "profinfer: qemu-aarch64 registered with binfmt_misc" >&2
