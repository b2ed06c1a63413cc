#!/usr/bin/env bash
# Runs govulncheck against the offline database hack/vulndb.sh builds, and
# fails on any reachable vulnerability that hack/vulncheck-allow.txt does
# not allow (or allows past its expiry date). `make vulncheck` runs it.
#
#   hack/vulncheck.sh [BINARY...]
#
#   - source mode over every Go module of the repository, with
#     GOTOOLCHAIN=$VULNCHECK_GOTOOLCHAIN, so the standard library findings
#     are those of the toolchain the shipped binaries are built with;
#   - binary mode over each BINARY given (make vulncheck passes the
#     shipped binaries `make binaries` built): what is really linked in.
#
# Environment:
#   VULNCHECK_GOTOOLCHAIN  toolchain to scan with (default go1.27.3; the
#                          Makefile passes SHIPPED_GOTOOLCHAIN)
#   VULNCHECK_ALLOW        allowlist (default hack/vulncheck-allow.txt)
#   VULNCHECK_REPORTS      keep the JSON reports in this directory
# plus those of hack/vulndb.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
export VULNCHECK_GOTOOLCHAIN="${VULNCHECK_GOTOOLCHAIN:-go1.27.3}"
allow="${VULNCHECK_ALLOW:-$root/hack/vulncheck-allow.txt}"
log() { printf 'vulncheck: %s\n' "$*" >&2; }

[[ "$VULNCHECK_GOTOOLCHAIN" =~ ^go[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || { log "VULNCHECK_GOTOOLCHAIN must look like go1.X.Y, got '$VULNCHECK_GOTOOLCHAIN'"; exit 2; }
[[ -f "$allow" ]] || { log "no allowlist at $allow"; exit 2; }
for bin in "$@"; do
  [[ -f "$bin" ]] || { log "no binary at $bin"; exit 2; }
done

start=$(date +%s)
assets=$("$root/hack/vulndb.sh")
db=$(sed -n 1p <<<"$assets")
govulncheck=$(sed -n 2p <<<"$assets")
[[ -d "$db" && -x "$govulncheck" ]] || { log "hack/vulndb.sh printed no database or govulncheck"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
reports="${VULNCHECK_REPORTS:-$work/reports}"
mkdir -p "$reports"
(cd "$root/hack/vulncheck" && GOWORK=off go build -o "$work/vulncheck" .)

cd "$root"
while IFS= read -r mod; do
  name="source-$(tr '/' '_' <<<"${mod#./}").json"
  [[ "$mod" == . ]] && name=source-root.json
  log "source mode: $mod/... with $VULNCHECK_GOTOOLCHAIN"
  (cd "$mod" && GOWORK=off GOFLAGS= GOTOOLCHAIN="$VULNCHECK_GOTOOLCHAIN" \
    "$govulncheck" -db "file://$db" -format json ./... >"$reports/$name")
done < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)

for bin in "$@"; do
  log "binary mode: $bin"
  "$govulncheck" -db "file://$db" -mode binary -format json "$bin" >"$reports/binary-$(basename "$bin").json"
done

rc=0
"$work/vulncheck" check -allow "$allow" "$reports"/*.json || rc=$?
log "done in $(( $(date +%s) - start ))s"
exit "$rc"
