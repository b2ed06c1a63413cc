#!/usr/bin/env bash
# Builds Cluster API's own clusterctl (cmd/clusterctl in the
# sigs.k8s.io/cluster-api module) at the version our go.mod requires, from
# the module proxy, and caches it by version. Prints the directory holding
#
#   clusterctl             the binary
#   repository/            a local clusterctl repository of Cluster API's own
#                          providers at that version, as its release ships
#                          them (`make release-manifests`: kustomize of each
#                          config/default, clusterctl's variables left in):
#                          cluster-api/VERSION/core-components.yaml,
#                          bootstrap-kubeadm/VERSION/bootstrap-components.yaml,
#                          control-plane-kubeadm/VERSION/control-plane-components.yaml,
#                          each with metadata.yaml; the providers the first
#                          `clusterctl init` installs
#   cert-manager-crds.yaml the CustomResourceDefinitions of the cert-manager
#                          version this clusterctl installs by default
#                          (deploy/crds of github.com/cert-manager/cert-manager)
#
# on stdout; everything else goes to stderr. The clusterctl test of
# examples/inplace-extension uses them:
#
#   UPGRADEKIT_CLUSTERCTL=$(hack/clusterctl.sh) go test ./examples/inplace-extension/ -run Clusterctl
#
# Nothing of Cluster API is changed: the module is copied out of the module
# cache and only its go.mod is pointed at the published api module
# (hack/lib/capi-module.sh).
#
# Environment:
#   UPGRADEKIT_CLUSTERCTL_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/clusterctl)
#   CAPI_VERSION                 sigs.k8s.io/cluster-api version (default: the one in strategy/capi/go.mod)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
log() { printf 'clusterctl: %s\n' "$*" >&2; }
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
[[ $# -eq 0 ]] || { log "no arguments expected"; exit 2; }
command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

if [[ -z "${CAPI_VERSION:-}" ]]; then
  CAPI_VERSION=$(cd "$repo/strategy/capi" && go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
fi
[[ "$CAPI_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { log "CAPI_VERSION must look like v1.X.Y, got '$CAPI_VERSION'"; exit 2; }

cache_root="${UPGRADEKIT_CLUSTERCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/clusterctl}"
dest="$cache_root/clusterctl-${CAPI_VERSION}_$(go env GOOS)-$(go env GOARCH)"
labels=(cluster-api bootstrap-kubeadm control-plane-kubeadm)
files=(core-components.yaml bootstrap-components.yaml control-plane-components.yaml)
configs=(core/config/default bootstrap/kubeadm/config/default controlplane/kubeadm/config/default)
complete() {
  [[ -x "$1/clusterctl" && -s "$1/cert-manager-crds.yaml" ]] || return 1
  for i in "${!labels[@]}"; do
    [[ -s "$1/repository/${labels[$i]}/$CAPI_VERSION/${files[$i]}" && -s "$1/repository/${labels[$i]}/$CAPI_VERSION/metadata.yaml" ]] || return 1
  done
}
if complete "$dest"; then
  printf '%s\n' "$dest"
  exit 0
fi

start=$(date +%s)
# shellcheck source=lib/assets.sh
. "$repo/hack/lib/assets.sh"
new_workdir "$cache_root"
log "building Cluster API ${CAPI_VERSION}'s clusterctl (once per version; a couple of minutes cold)"
# shellcheck source=lib/capi-module.sh
. "$repo/hack/lib/capi-module.sh"
capi_module_copy "$repo" "$CAPI_VERSION" "$work/cluster-api" || exit 1
(
  cd "$work/cluster-api"
  # The version clusterctl reports and checks contracts against (CAPI's
  # Makefile sets the same variables through hack/version.sh).
  v=sigs.k8s.io/cluster-api/version
  go build -trimpath -ldflags="-s -w -X $v.gitVersion=${CAPI_VERSION} -X $v.gitMajor=1 -X $v.gitMinor=$(cut -d. -f2 <<<"$CAPI_VERSION") -X $v.gitTreeState=clean" \
    -o "$work/out/clusterctl" ./cmd/clusterctl >&2
  # The providers' components as Cluster API's `make release-manifests`
  # builds them: `kustomize build <provider>/config/default`, with the
  # kustomize CLI at the version its Makefile pins (KUSTOMIZE_VER).
  kv=$(sed -n 's/^KUSTOMIZE_VER := //p' Makefile)
  [[ -n "$kv" ]] || { log "KUSTOMIZE_VER is not in Cluster API's Makefile"; exit 1; }
  GOBIN="$work/bin" go install "sigs.k8s.io/kustomize/kustomize/v5@${kv}" >&2
  for i in "${!labels[@]}"; do
    d="$work/out/repository/${labels[$i]}/$CAPI_VERSION"
    mkdir -p "$d"
    "$work/bin/kustomize" build "${configs[$i]}" > "$d/${files[$i]}"
    grep -q '^kind: CustomResourceDefinition' "$d/${files[$i]}" || { log "${files[$i]} was not built"; exit 1; }
    cp metadata.yaml "$d/metadata.yaml"
  done
  # cert-manager's CRDs at the version clusterctl installs by default.
  cmv=$(sed -n 's/^[[:space:]]*CertManagerDefaultVersion = "\(v[0-9.]*\)"$/\1/p' cmd/clusterctl/client/config/cert_manager_client.go)
  [[ -n "$cmv" ]] || { log "CertManagerDefaultVersion is not in clusterctl's source"; exit 1; }
  cmdir=$(go mod download -json "github.com/cert-manager/cert-manager@${cmv}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
  [[ -d "$cmdir/deploy/crds" ]] || { log "github.com/cert-manager/cert-manager@${cmv} has no deploy/crds"; exit 1; }
  for f in "$cmdir"/deploy/crds/*.yaml; do
    printf -- '---\n'; sed '/^---$/d' "$f"
  done > "$work/out/cert-manager-crds.yaml"
)
"$work/out/clusterctl" version 2>&1 | grep -q "GitVersion:\"${CAPI_VERSION}\"" || { log "clusterctl does not report ${CAPI_VERSION}"; exit 1; }
chmod 0755 "$work/out"
cache_publish "$work/out" "$dest" complete
log "done in $(( $(date +%s) - start ))s: $dest"
printf '%s\n' "$dest"
