#!/usr/bin/env bash
# Builds upgradekit's test oracle for Cluster API's in-place comparison from
# Cluster API's own code, and caches the binary by Cluster API version and
# by the contents of our glue. Prints the binary's path on stdout;
# everything else goes to stderr.
#
#   UPGRADEKIT_CAPI_ORACLE=$(hack/capi-inplace-oracle.sh) go test ./strategy/capi/ -run Oracle
#
# What CAPI does with a CanUpdateMachine / CanUpdateMachineSet answer
# (applyPatchesToRequest, then matchesMachine / matchesMachineSet) lives in
# unexported functions of internal packages, which no other module may
# import. So the module sigs.k8s.io/cluster-api, at the version our go.mod
# requires, is copied out of the Go module cache (fetched through the module
# proxy if needed) and our glue is added inside the copy
# (hack/capi-inplace-oracle/: two export_oracle.go files that export those
# functions under new names, and a main package that feeds them JSON lines).
# Nothing of Cluster API is changed or copied into upgradekit.
#
# Environment:
#   UPGRADEKIT_CAPI_ORACLE_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/capi-inplace-oracle)
#   CAPI_VERSION                  sigs.k8s.io/cluster-api version (default: the one in strategy/capi/go.mod)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
glue="$repo/hack/capi-inplace-oracle"
log() { printf 'capi-inplace-oracle: %s\n' "$*" >&2; }

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
# Module-aware builds outside our own module: never let a surrounding go.work
# or GOFLAGS=-mod=vendor leak in.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

if [[ -z "${CAPI_VERSION:-}" ]]; then
  CAPI_VERSION=$(cd "$repo/strategy/capi" && go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
fi
case "$CAPI_VERSION" in
  v1.*.*) ;;
  *) log "CAPI_VERSION must look like v1.X.Y, got '$CAPI_VERSION'"; exit 2 ;;
esac

files=(main.go kubeadmcontrolplane/export_oracle.go machinedeployment/export_oracle.go)
for f in "${files[@]}"; do
  [[ -f "$glue/$f" ]] || { log "missing $glue/$f"; exit 1; }
done
# The glue is part of the key: changing it rebuilds.
key=$( (cd "$glue" && cat "${files[@]}" && go version) | sha256sum | cut -c1-12)
cache_root="${UPGRADEKIT_CAPI_ORACLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/capi-inplace-oracle}"
dest="$cache_root/capi-${CAPI_VERSION}_${key}"
bin="$dest/capi-inplace-oracle"

if [[ -x "$bin" ]]; then
  printf '%s\n' "$bin"
  exit 0
fi

start=$(date +%s)
mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

log "building the oracle from sigs.k8s.io/cluster-api@${CAPI_VERSION} (once per version; about a minute or two)"
copy="$work/cluster-api"
# shellcheck source=lib/capi-module.sh
. "$repo/hack/lib/capi-module.sh"
capi_module_copy "$repo" "$CAPI_VERSION" "$copy" || exit 1
(
  cd "$copy"
  for p in controlplane/kubeadm/reconcilers/kubeadmcontrolplane core/reconcilers/machinedeployment; do
    [[ -d "$p" ]] || { log "$p is not in sigs.k8s.io/cluster-api@${CAPI_VERSION}"; exit 1; }
  done
  # The glue carries `//go:build ignore` in upgradekit's tree, so that
  # neither our builds nor `go mod tidy` (which honours every tag but
  # "ignore") see CAPI's internal imports; the copies drop that line.
  unignore() { sed '1{/^\/\/go:build ignore$/d}' "$1" > "$2"; }
  unignore "$glue/kubeadmcontrolplane/export_oracle.go" controlplane/kubeadm/reconcilers/kubeadmcontrolplane/zz_upgradekit_export_oracle.go
  unignore "$glue/machinedeployment/export_oracle.go" core/reconcilers/machinedeployment/zz_upgradekit_export_oracle.go
  mkdir -p cmd/upgradekit-capi-inplace-oracle
  unignore "$glue/main.go" cmd/upgradekit-capi-inplace-oracle/main.go
  mkdir -p "$work/out"
  go build -trimpath -ldflags='-s -w' -o "$work/out/capi-inplace-oracle" ./cmd/upgradekit-capi-inplace-oracle >&2
)
# Smoke test: an unknown hook must come back as an error line.
reply=$(printf '{"hook":"none","request":{},"response":{}}\n' | "$work/out/capi-inplace-oracle")
[[ "$reply" == *'"error"'* ]] || { log "the built oracle does not answer: $reply"; exit 1; }

chmod 0755 "$work/out"
# Atomic publish: a concurrent run either sees nothing or the whole directory.
if ! mv -T "$work/out" "$dest" 2>/dev/null; then
  if [[ -x "$bin" ]]; then
    log "another run published $dest first; using it"
  else
    rm -rf "$dest"
    mv -T "$work/out" "$dest"
  fi
fi
log "done in $(( $(date +%s) - start ))s: $bin"
printf '%s\n' "$bin"
