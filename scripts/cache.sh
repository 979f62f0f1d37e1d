# Sourced by the shell scripts: profinfer's cache, the rule of common/src/cache.cpp
# ($PROFINFER_CACHE, else ~/.cache/profinfer).
CACHE=${PROFINFER_CACHE:-${HOME:-/tmp}/.cache/profinfer}
