#!/usr/bin/env bash
# Runs every fuzz target in every module of the tree for a short time (first
# argument, default 10s). Finds targets with `go test -list`, so a new
# FuzzXxx is picked up without editing this file.
set -euo pipefail
fuzztime="${1:-10s}"
root=$(cd "$(dirname "$0")/.." && pwd)
count=0
while IFS= read -r mod; do
  cd "$root/$mod"
  while IFS= read -r pkg; do
    while IFS= read -r target; do
      [[ "$target" == Fuzz* ]] || continue
      echo "== $pkg $target ($fuzztime)"
      go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime=2s -parallel=1 "$pkg"
      count=$((count + 1))
    done < <(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
  done < <(go list ./...)
done < <(cd "$root" && find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)
echo "fuzz-smoke: $count targets, $fuzztime each"
