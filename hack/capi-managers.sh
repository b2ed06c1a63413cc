#!/usr/bin/env bash
# Builds Cluster API's own managers (the core manager, the kubeadm bootstrap
# provider and the kubeadm control plane provider: the main.go of core/,
# bootstrap/kubeadm/ and controlplane/kubeadm/ in the sigs.k8s.io/cluster-api
# module) at the version our go.mod requires, from the module proxy, and
# caches them by version. Prints the directory holding
#
#   capi-manager  capi-kubeadm-bootstrap-manager  capi-kubeadm-control-plane-manager
#
# and, for each, <name>.webhooks.yaml: its admission webhook configurations
# as Cluster API ships them (config/webhook/manifests.yaml), which
# harness/clusterapi points at the running manager; on stdout; everything else goes to stderr. harness/clusterapi starts them
# against an envtest API server:
#
#   UPGRADEKIT_CAPI_MANAGERS=$(hack/capi-managers.sh) go test ./harness/clusterapi/
#
# Nothing of Cluster API is changed: the module is copied out of the module
# cache and only its go.mod is pointed at the published api module
# (hack/lib/capi-module.sh).
#
# Environment:
#   UPGRADEKIT_CAPI_MANAGERS_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/capi-managers)
#   CAPI_VERSION                    sigs.k8s.io/cluster-api version (default: the one in strategy/capi/go.mod)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
log() { printf 'capi-managers: %s\n' "$*" >&2; }
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
[[ $# -eq 0 ]] || { log "no arguments expected"; exit 2; }
command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

if [[ -z "${CAPI_VERSION:-}" ]]; then
  CAPI_VERSION=$(cd "$repo/strategy/capi" && go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
fi
[[ "$CAPI_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { log "CAPI_VERSION must look like v1.X.Y, got '$CAPI_VERSION'"; exit 2; }

cache_root="${UPGRADEKIT_CAPI_MANAGERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/capi-managers}"
dest="$cache_root/capi-${CAPI_VERSION}_$(go env GOOS)-$(go env GOARCH)"
names=(capi-manager capi-kubeadm-bootstrap-manager capi-kubeadm-control-plane-manager)
mains=(core bootstrap/kubeadm controlplane/kubeadm)
complete() {
  for n in "${names[@]}"; do
    [[ -x "$1/$n" && -f "$1/$n.webhooks.yaml" ]] || return 1
  done
}
if complete "$dest"; then
  printf '%s\n' "$dest"
  exit 0
fi

start=$(date +%s)
mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/.build-XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
log "building Cluster API ${CAPI_VERSION}'s managers (once per version; a few minutes cold)"
# shellcheck source=lib/capi-module.sh
. "$repo/hack/lib/capi-module.sh"
capi_module_copy "$repo" "$CAPI_VERSION" "$work/cluster-api" || exit 1
mkdir -p "$work/out"
(
  cd "$work/cluster-api"
  for i in "${!mains[@]}"; do
    [[ -f "${mains[$i]}/main.go" ]] || { log "${mains[$i]}/main.go is not in sigs.k8s.io/cluster-api@${CAPI_VERSION}"; exit 1; }
    go build -trimpath -ldflags='-s -w' -o "$work/out/${names[$i]}" "./${mains[$i]}" >&2
    cp "${mains[$i]}/config/webhook/manifests.yaml" "$work/out/${names[$i]}.webhooks.yaml"
  done
)
# Smoke test: each manager knows its flags.
for n in "${names[@]}"; do
  "$work/out/$n" --help 2>&1 | grep -q -- '--webhook-port' || { log "$n does not answer --help as a manager"; exit 1; }
done
chmod 0755 "$work/out"
rm -rf "$dest.old"
if [[ -e "$dest" ]] && ! complete "$dest"; then
  mv -T "$dest" "$dest.old" # built by an earlier version of this script
fi
if ! mv -T "$work/out" "$dest" 2>/dev/null; then
  if complete "$dest"; then
    log "another run published $dest first; using it"
  else
    rm -rf "$dest"
    mv -T "$work/out" "$dest"
  fi
fi
rm -rf "$dest.old"
log "done in $(( $(date +%s) - start ))s: $dest"
printf '%s\n' "$dest"
