#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries that envtest needs, from source
# fetched through the Go module proxy only (no release downloads), and caches
# them in a directory keyed by both versions. Prints the assets directory on
# stdout; everything else goes to stderr.
#
#   KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh) go test ./...
#
# Environment:
#   UPGRADEKIT_ENVTEST_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/envtest)
#   KUBERNETES_VERSION        k8s.io/kubernetes version (default below; matches our k8s.io/* v0.x)
#   ETCD_VERSION              go.etcd.io/etcd/server/v3 version (default below)
set -euo pipefail

# Pinned. KUBERNETES_VERSION must match the minor of the k8s.io/* modules in
# go.mod (v0.36.x <-> v1.36.x). ETCD_VERSION follows the etcd client that
# cluster-api v1.14.2 pins (v3.6.14).
KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.14}"

log() { printf 'envtest-assets: %s\n' "$*" >&2; }

case "$KUBERNETES_VERSION" in
  v1.*.*) ;;
  *) log "KUBERNETES_VERSION must look like v1.X.Y, got '$KUBERNETES_VERSION'"; exit 2 ;;
esac
case "$ETCD_VERSION" in
  v3.*.*) ;;
  *) log "ETCD_VERSION must look like v3.X.Y, got '$ETCD_VERSION'"; exit 2 ;;
esac

cache_root="${UPGRADEKIT_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/envtest}"
dest="$cache_root/k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}"

if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
  printf '%s\n' "$dest"
  exit 0
fi

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'rm -rf "$work"' EXIT

# Module-aware builds outside our own module: never let a surrounding go.work
# or GOFLAGS=-mod=vendor leak in.
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
k8s_minor_patch="${KUBERNETES_VERSION#v1.}"          # e.g. 36.3
staging_version="v0.${k8s_minor_patch}"               # e.g. v0.36.3
k8s_major=1
k8s_minor="${k8s_minor_patch%%.*}"

build_etcd() {
  local dir="$work/etcd"
  mkdir -p "$dir"
  (
    cd "$dir"
    go mod init upgradekit.local/envtest-etcd >/dev/null 2>&1
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    go mod edit -require="go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    # etcd's server module requires its sibling modules at the same version.
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
      go mod edit -require="go.etcd.io/etcd/${m}@${ETCD_VERSION}"
    done
    go mod tidy >&2
    go build -trimpath -ldflags='-s -w' -o "$work/out/etcd" go.etcd.io/etcd/server/v3 >&2
  )
}

build_apiserver() {
  local dir="$work/kubernetes"
  mkdir -p "$dir"
  (
    cd "$dir"
    go mod init upgradekit.local/envtest-apiserver >/dev/null 2>&1
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
    go mod edit -require="k8s.io/kubernetes@${KUBERNETES_VERSION}"
    # k8s.io/kubernetes's go.mod points every staging module at ./staging,
    # which does not exist in the module zip; replace each by its published
    # v0.x version.
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    [[ -f "$gomod" ]] || { log "could not download k8s.io/kubernetes@${KUBERNETES_VERSION} from the module proxy"; exit 1; }
    local staging
    staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod")
    [[ -n "$staging" ]] || { log "no staging replaces found in $gomod"; exit 1; }
    local args=()
    for m in $staging; do args+=("-replace=${m}=${m}@${staging_version}"); done
    go mod edit "${args[@]}"
    go mod tidy >&2
    local pkg=k8s.io/component-base/version
    local ld="-s -w -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=${k8s_major} -X ${pkg}.gitMinor=${k8s_minor} -X ${pkg}.gitTreeState=clean"
    go build -trimpath -ldflags="$ld" -o "$work/out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2
  )
}

start=$(date +%s)
mkdir -p "$work/out"
log "building etcd ${ETCD_VERSION} and kube-apiserver ${KUBERNETES_VERSION} from the module proxy (a few minutes, once)"
build_etcd
build_apiserver
"$work/out/etcd" --version >&2
"$work/out/kube-apiserver" --version >&2

chmod 0755 "$work/out"
# Atomic publish: a concurrent run either sees nothing or the whole directory.
staged="$work/out"
if ! mv -T "$staged" "$dest" 2>/dev/null; then
  if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
    log "another run published $dest first; using it"
  else
    rm -rf "$dest"
    mv -T "$staged" "$dest"
  fi
fi
log "done in $(( $(date +%s) - start ))s: $dest"
printf '%s\n' "$dest"
