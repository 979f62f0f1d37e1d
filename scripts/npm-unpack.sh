#!/usr/bin/env bash
# scripts/npm-unpack.sh PACKAGE@VERSION DEST: the package's tarball from the npm registry,
# unpacked into DEST (npm pack: no install scripts run). Nothing done if DEST exists.
set -euo pipefail
pkg=${1:?usage: npm-unpack.sh PACKAGE@VERSION DEST} dest=${2:?usage: npm-unpack.sh PACKAGE@VERSION DEST}
[[ -d $dest ]] && exit 0
command -v npm >/dev/null || { echo "profinfer: npm is not installed (needed to fetch $pkg)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "profinfer: fetching $pkg from the npm registry" >&2
(cd "$tmp" && npm pack --silent "$pkg" >/dev/null) || { echo "profinfer: npm pack $pkg failed" >&2; exit 1; }
mkdir -p "$tmp/x" && tar -xzf "$tmp"/*.tgz -C "$tmp/x"
mkdir -p "$(dirname "$dest")" && mv "$tmp/x/package" "$dest"
