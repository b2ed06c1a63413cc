#!/usr/bin/env bash
# Builds what a real kubeadm node needs for one Kubernetes version, from
# source fetched through the Go module proxy only (no registry, no release
# downloads), and caches it by version. Prints the version's directory on
# stdout; everything else goes to stderr.
#
#   hack/node-assets.sh v1.36.3      # -> $cache/k8s-v1.36.3_linux-amd64
#
# The directory holds, all static (CGO_ENABLED=0, -trimpath, fixed ldflags):
#
#   kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler
#   etcd etcdctl etcdutl
#                       the etcd kubeadm of that version deploys (its
#                       constants.DefaultEtcdVersion), etcdctl of the same release
#                       line (the first control plane's snapshot step) and etcdutl
#                       (restores a snapshot: tests prove snapshots restorable)
#   cni/bridge cni/host-local cni/loopback cni/portmap
#                       github.com/containernetworking/plugins
#   pause               a minimal pause process (Go; the image kubeadm names)
#   versions.env        KUBERNETES_VERSION ETCD_VERSION ETCD_IMAGE_TAG PAUSE_VERSION CNI_VERSION
#   SHA256SUMS          sha256sum of every binary above
#
# harness/kubeadmnode assembles the container images from these binaries and runs
# a kubeadm node with them. Measured cold on 2 cores shared with other
# builds: 25 minutes (v1.36.3) and 72 minutes (v1.37.2); under a second when
# cached.
#
# Environment:
#   UPGRADEKIT_NODE_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/node)
#   GOARCH                 target architecture (default: go env GOARCH)
#   CNI_VERSION            github.com/containernetworking/plugins version (default below)
set -euo pipefail
# shellcheck source=lib/assets.sh
source "$(dirname "$0")/lib/assets.sh"

repo="$(cd "$(dirname "$0")/.." && pwd)"
log() { printf 'node-assets: %s\n' "$*" >&2; }
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
[[ $# -eq 1 ]] || { log "usage: hack/node-assets.sh VERSION (e.g. v1.36.3); see --help"; exit 2; }
KUBERNETES_VERSION=$1
[[ "$KUBERNETES_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { log "VERSION must look like v1.X.Y, got '$KUBERNETES_VERSION'"; exit 2; }
k8s_minor=${BASH_REMATCH[1]}
CNI_VERSION="${CNI_VERSION:-v1.9.1}"
[[ "$CNI_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { log "CNI_VERSION must look like vX.Y.Z, got '$CNI_VERSION'"; exit 2; }
command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
goarch="${GOARCH:-$(go env GOARCH)}"
case "$goarch" in amd64|arm64) ;; *) log "GOARCH must be amd64 or arm64, got '$goarch'"; exit 2 ;; esac

cache_root="${UPGRADEKIT_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/node}"
dest="$cache_root/k8s-${KUBERNETES_VERSION}_linux-${goarch}"
core=(kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler etcd etcdctl pause cni/bridge cni/host-local cni/loopback cni/portmap)
bins=("${core[@]}" etcdutl)
# complete DIR [NAMES...]: every binary (default: all) and the two files.
complete() {
  local d=$1 b
  shift
  [[ $# -gt 0 ]] || set -- "${bins[@]}"
  for b in "$@"; do [[ -x "$d/$b" ]] || return 1; done
  [[ -f "$d/versions.env" && -f "$d/SHA256SUMS" ]]
}
# pause is this repository's own code (harness/kubeadmnode/internal/pause): build
# it at every call (seconds, from the build cache) so a cached directory
# never keeps an outdated one.
# Kubernetes' pause is C; this one does the same in Go: block until
# SIGINT/SIGTERM, reap children (it is PID 1 of the sandbox). The same
# command and environment for a new directory and a refresh, so that both
# give the same bytes.
build_pause() {
  (cd "$repo/harness" && GOWORK=off GOFLAGS= CGO_ENABLED=0 GOOS=linux GOARCH="$goarch" go build -trimpath -ldflags='-s -w -buildid=' -o "$1" ./kubeadmnode/internal/pause >&2)
}
refresh_pause() {
  local tmp
  tmp=$(mktemp "$1/.pause-XXXXXX")
  if ! build_pause "$tmp"; then
    rm -f "$tmp"
    return 1
  fi
  if cmp -s "$tmp" "$1/pause"; then
    rm -f "$tmp"
    return 0
  fi
  chmod 0755 "$tmp"
  mv -f "$tmp" "$1/pause"
  (cd "$1" && sha256sum "${bins[@]}" > SHA256SUMS.new && mv -f SHA256SUMS.new SHA256SUMS)
}
if complete "$dest"; then
  refresh_pause "$dest"
  printf '%s\n' "$dest"
  exit 0
fi

go_static_env "$goarch"
new_workdir "$cache_root"
mkdir -p "$out/cni"
start=$(date +%s)
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",*\$/\1/p"; }

# kubeadm's own constants say which etcd and pause images this version
# deploys; the node runs exactly those tags.
k8s_dir=$(go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" | field Dir)
[[ -d "$k8s_dir" ]] || { log "could not download k8s.io/kubernetes@${KUBERNETES_VERSION} from the module proxy"; exit 1; }
constants="$k8s_dir/cmd/kubeadm/app/constants/constants.go"
ETCD_IMAGE_TAG=$(sed -n 's/^[[:space:]]*DefaultEtcdVersion = "\(.*\)"/\1/p' "$constants")
PAUSE_VERSION=$(sed -n 's/^[[:space:]]*PauseVersion = "\(.*\)"/\1/p' "$constants")
[[ "$ETCD_IMAGE_TAG" =~ ^([0-9]+\.[0-9]+\.[0-9]+)-[0-9]+$ ]] || { log "cannot read DefaultEtcdVersion from $constants"; exit 1; }
ETCD_VERSION="v${BASH_REMATCH[1]}"
[[ -n "$PAUSE_VERSION" ]] || { log "cannot read PauseVersion from $constants"; exit 1; }
# etcdctl is released with the server but not for every patch: take the
# newest etcdctl of the same minor that is not newer than the server (or
# the oldest of that minor when all are newer).
etcd_minor=${ETCD_VERSION%.*}
etcdctl_versions=$(go list -m -versions go.etcd.io/etcd/etcdctl/v3 | tr ' ' '\n' | grep -E "^${etcd_minor//./\\.}\.[0-9]+$" | sort -V || true)
ETCDCTL_VERSION=""
for v in $etcdctl_versions; do
  if [[ "$(printf '%s\n%s\n' "$v" "$ETCD_VERSION" | sort -V | tail -1)" == "$ETCD_VERSION" ]]; then ETCDCTL_VERSION=$v; fi
done
[[ -n "$ETCDCTL_VERSION" ]] || ETCDCTL_VERSION=$(printf '%s\n' $etcdctl_versions | head -1)
[[ -n "$ETCDCTL_VERSION" ]] || { log "no go.etcd.io/etcd/etcdctl/v3 release for etcd ${etcd_minor}"; exit 1; }
log "Kubernetes ${KUBERNETES_VERSION} (etcd ${ETCD_VERSION}, etcdctl ${ETCDCTL_VERSION}, pause ${PAUSE_VERSION}, CNI plugins ${CNI_VERSION}) for linux/${goarch}: building once, then cached"

# newmod DIR NAME: an empty throwaway module to build another module's
# commands from (their own replace directives do not apply to us).
newmod() { mkdir -p "$1"; (cd "$1" && go mod init "upgradekit.local/$2" >/dev/null 2>&1); }

build_kubernetes() {
  local dir="$work/kubernetes" staging_version="v0.${KUBERNETES_VERSION#v1.}"
  newmod "$dir" node-kubernetes
  (
    cd "$dir"
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    go mod edit -require="k8s.io/kubernetes@${KUBERNETES_VERSION}"
    # k8s.io/kubernetes's go.mod points every staging module at ./staging,
    # which its module zip lacks: use the published v0.x versions instead.
    local staging args=()
    staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$k8s_dir/go.mod")
    [[ -n "$staging" ]] || { log "no staging replaces in k8s.io/kubernetes@${KUBERNETES_VERSION}'s go.mod"; exit 1; }
    for m in $staging; do args+=("-replace=${m}=${m}@${staging_version}"); done
    go mod edit "${args[@]}"
    go mod tidy >&2
    # What `kubeadm version`, `kubelet --version` and `kubectl version`
    # print comes from these variables, set as Kubernetes' own build sets them.
    local ld="-s -w -buildid=" p
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X ${p}.gitVersion=${KUBERNETES_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${k8s_minor} -X ${p}.gitTreeState=clean -X ${p}.buildDate=1970-01-01T00:00:00Z"
    done
    go build -trimpath -ldflags="$ld" -o "$out/" \
      k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl >&2
  )
}

build_etcd() {
  local dir="$work/etcd" m
  newmod "$dir" node-etcd
  (
    cd "$dir"
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    go mod edit -require="go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
      go mod edit -require="go.etcd.io/etcd/${m}@${ETCD_VERSION}"
    done
    go mod tidy >&2
    go build -trimpath -ldflags='-s -w -buildid=' -o "$out/etcd" go.etcd.io/etcd/server/v3 >&2
  )
  # etcdctl in a module of its own: its release may differ from the server's.
  dir="$work/etcdctl"
  newmod "$dir" node-etcdctl
  (
    cd "$dir"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/etcdctl/v3"\n' > tools.go
    go mod edit -require="go.etcd.io/etcd/etcdctl/v3@${ETCDCTL_VERSION}"
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
      go mod edit -require="go.etcd.io/etcd/${m}@${ETCDCTL_VERSION}"
    done
    go mod tidy >&2
    go build -trimpath -ldflags='-s -w -buildid=' -o "$out/etcdctl" go.etcd.io/etcd/etcdctl/v3 >&2
  )
  build_etcdutl
}

# etcdutl (snapshot restore) of the etcdctl release, in a module of its own.
build_etcdutl() {
  local dir="$work/etcdutl" m
  newmod "$dir" node-etcdutl
  (
    cd "$dir"
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/etcdutl/v3"\n' > tools.go
    go mod edit -require="go.etcd.io/etcd/etcdutl/v3@${ETCDCTL_VERSION}"
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3 server/v3; do
      go mod edit -require="go.etcd.io/etcd/${m}@${ETCDCTL_VERSION}"
    done
    go mod tidy >&2
    go build -trimpath -ldflags='-s -w -buildid=' -o "$out/etcdutl" go.etcd.io/etcd/etcdutl/v3 >&2
  )
}

build_cni() {
  local dir="$work/cni"
  newmod "$dir" node-cni
  (
    cd "$dir"
    printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "github.com/containernetworking/plugins/plugins/main/bridge"\n\t_ "github.com/containernetworking/plugins/plugins/ipam/host-local"\n\t_ "github.com/containernetworking/plugins/plugins/main/loopback"\n\t_ "github.com/containernetworking/plugins/plugins/meta/portmap"\n)\n' > tools.go
    go mod edit -require="github.com/containernetworking/plugins@${CNI_VERSION}"
    go mod tidy >&2
    go build -trimpath -ldflags='-s -w -buildid=' -o "$out/cni/" \
      github.com/containernetworking/plugins/plugins/main/bridge \
      github.com/containernetworking/plugins/plugins/ipam/host-local \
      github.com/containernetworking/plugins/plugins/main/loopback \
      github.com/containernetworking/plugins/plugins/meta/portmap >&2
  )
}

# A directory from before etcdutl was added: build just that.
if complete "$dest" "${core[@]}"; then
  log "adding etcdutl ${ETCDCTL_VERSION} to $dest"
  build_etcdutl
  install -m 0755 "$out/etcdutl" "$dest/etcdutl.new"
  mv -f "$dest/etcdutl.new" "$dest/etcdutl"
  (cd "$dest" && sha256sum "${bins[@]}" > SHA256SUMS.new && mv -f SHA256SUMS.new SHA256SUMS)
  printf '%s\n' "$dest"
  exit 0
fi

build_pause "$out/pause"
build_cni
build_etcd
build_kubernetes

if [[ "$goarch" == "$(go env GOHOSTARCH)" ]]; then
  "$out/kubeadm" version -o short >&2
  "$out/etcd" --version | head -1 >&2
else
  # Cross-built: it cannot run here, its build information says what it is.
  built_as "$out/kubeadm" "$goarch" k8s.io/kubernetes "$KUBERNETES_VERSION" || { log "built kubeadm is not k8s.io/kubernetes ${KUBERNETES_VERSION} for ${goarch}"; exit 1; }
  built_as "$out/etcd" "$goarch" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" || { log "built etcd is not ${ETCD_VERSION} for ${goarch}"; exit 1; }
  log "linux/${goarch} is cross-built: checked by its build information, not run"
fi
cat > "$out/versions.env" <<EOF
KUBERNETES_VERSION=${KUBERNETES_VERSION}
ETCD_VERSION=${ETCD_VERSION}
ETCD_IMAGE_TAG=${ETCD_IMAGE_TAG}
ETCDCTL_VERSION=${ETCDCTL_VERSION}
PAUSE_VERSION=${PAUSE_VERSION}
CNI_VERSION=${CNI_VERSION}
EOF
(cd "$out" && sha256sum "${bins[@]}" > SHA256SUMS)
chmod 0755 "$out"
cache_publish "$out" "$dest" complete
log "done in $(( $(date +%s) - start ))s: $dest"
printf '%s\n' "$dest"
