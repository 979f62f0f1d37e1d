#!/usr/bin/env bash
# Renders an HTML report in headless Chromium (Debian's `chromium`) to a PNG, to look at.
#   scripts/screenshot-report.sh report.html [out.png] [height]
set -euo pipefail
in=$(realpath "$1"); out=${2:-${1%.html}.png}; height=${3:-5000}
command -v chromium >/dev/null || { echo "installing chromium" >&2; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,"$height" \
  --screenshot="$(realpath -m "$out")" "file://$in" 2>/dev/null
echo "$out"
