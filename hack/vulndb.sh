#!/usr/bin/env bash
# Builds what `make vulncheck` needs, offline apart from the Go module
# proxy, and caches it by version:
#   - a Go vulnerability database in the v1 layout govulncheck's
#     -db file:///DIR reads, made from the OSV entries (data/osv) of the
#     golang.org/x/vulndb module at VULNDB_VERSION (no vuln.go.dev);
#   - govulncheck (golang.org/x/vuln/cmd/govulncheck at
#     GOVULNCHECK_VERSION), built with the toolchain the shipped binaries
#     are built with (VULNCHECK_GOTOOLCHAIN), so it can load their code.
# Prints the database directory on the first line of stdout and the
# govulncheck binary on the second; everything else goes to stderr.
#
#   { read -r db; read -r govulncheck; } < <(hack/vulndb.sh)
#   "$govulncheck" -db "file://$db" ./...
#
# Environment:
#   UPGRADEKIT_VULNDB_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit)
#   VULNDB_VERSION           golang.org/x/vulndb version (default below)
#   GOVULNCHECK_VERSION      golang.org/x/vuln version (default below)
#   VULNCHECK_GOTOOLCHAIN    toolchain govulncheck is built with (default go1.27.3)
set -euo pipefail

# Pinned. Refresh VULNDB_VERSION to take newer advisories (see SECURITY.md);
# its commit time becomes the database's date.
VULNDB_VERSION="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"
GOVULNCHECK_VERSION="${GOVULNCHECK_VERSION:-v1.9.0}"
VULNCHECK_GOTOOLCHAIN="${VULNCHECK_GOTOOLCHAIN:-go1.27.3}"

log() { printf 'vulndb: %s\n' "$*" >&2; }

[[ "$VULNDB_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { log "VULNDB_VERSION must be a module version, got '$VULNDB_VERSION'"; exit 2; }
[[ "$GOVULNCHECK_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { log "GOVULNCHECK_VERSION must look like vX.Y.Z, got '$GOVULNCHECK_VERSION'"; exit 2; }
[[ "$VULNCHECK_GOTOOLCHAIN" =~ ^go[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || { log "VULNCHECK_GOTOOLCHAIN must look like go1.X.Y, got '$VULNCHECK_GOTOOLCHAIN'"; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
cache_root="${UPGRADEKIT_VULNDB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit}"
db="$cache_root/vulndb/$VULNDB_VERSION"
bindir="$cache_root/govulncheck/${GOVULNCHECK_VERSION}_${VULNCHECK_GOTOOLCHAIN}"

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
export GOWORK=off GOFLAGS=
mkdir -p "$cache_root/vulndb" "$cache_root/govulncheck"
work=$(mktemp -d "$cache_root/.vulndb-XXXXXX")
trap 'rm -rf "$work"' EXIT

# publish SRC DEST: atomic, so a concurrent run sees nothing or the whole.
publish() {
  if ! mv -T "$1" "$2" 2>/dev/null; then
    if [[ -e "$2" ]]; then
      log "another run published $2 first; using it"
    else
      mv -T "$1" "$2"
    fi
  fi
}

if [[ ! -f "$db/index/modules.json" ]]; then
  start=$(date +%s)
  log "building the database from golang.org/x/vulndb@$VULNDB_VERSION (module proxy)"
  info=$(cd "$work" && go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION")
  field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",*\$/\1/p"; }
  src=$(printf '%s\n' "$info" | field Dir)
  infofile=$(printf '%s\n' "$info" | field Info)
  [[ -d "$src/data/osv" && -f "$infofile" ]] || { log "could not download golang.org/x/vulndb@$VULNDB_VERSION from the module proxy"; exit 1; }
  # The commit time dates entries the zip cannot date (no git history).
  modified=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$infofile")
  [[ -n "$modified" ]] || { log "no commit time in $infofile"; exit 1; }
  (cd "$root/hack/vulncheck" && go run . index -osv "$src/data/osv" -out "$work/db" -modified "$modified")
  printf '%s\n' "$VULNDB_VERSION" > "$work/db/VERSION"
  publish "$work/db" "$db"
  log "database done in $(( $(date +%s) - start ))s: $db (entries dated up to $modified)"
fi

if [[ ! -x "$bindir/govulncheck" ]]; then
  start=$(date +%s)
  log "building govulncheck $GOVULNCHECK_VERSION with $VULNCHECK_GOTOOLCHAIN (module proxy)"
  mkdir -p "$work/bin"
  GOTOOLCHAIN="$VULNCHECK_GOTOOLCHAIN" GOBIN="$work/bin" CGO_ENABLED=0 \
    go install -trimpath "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION" >&2
  "$work/bin/govulncheck" -version >&2
  publish "$work/bin" "$bindir"
  log "govulncheck done in $(( $(date +%s) - start ))s: $bindir/govulncheck"
fi

printf '%s\n%s\n' "$db" "$bindir/govulncheck"
