#!/usr/bin/env bash
# Builds containerd 2.x (containerd, containerd-shim-runc-v2, ctr) from
# source fetched through the Go module proxy only, and caches it by
# version. Prints the version's directory on stdout; everything else goes
# to stderr.
#
#   hack/containerd-assets.sh v2.4.2   # -> $cache/containerd-v2.4.2_linux-amd64
#
# The real-node scenarios (harness/kubeadmnode, make e2e-node) upgrade the nodes'
# containerd from Debian's 1.6 to this one in the same plan as Kubernetes:
# kubelet v1.37 warns that containerd 1.6 lacks the CRI RuntimeConfig call
# (an error from v1.38), and containerd 2.x reads its configuration in
# another format (version 3), which the plan migrates.
#
# The binaries are static (CGO_ENABLED=0, -trimpath, fixed ldflags), built
# without the btrfs, devmapper and zfs snapshotters (cgo or kernel
# features a kubeadm node does not need); SHA256SUMS lists them. Measured
# cold on 2 cores shared with other builds: about 3 minutes; under a second
# when cached.
#
# Environment:
#   UPGRADEKIT_NODE_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/node)
#   GOARCH                 target architecture (default: go env GOARCH)
set -euo pipefail
# shellcheck source=lib/assets.sh
source "$(dirname "$0")/lib/assets.sh"

log() { printf 'containerd-assets: %s\n' "$*" >&2; }
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
[[ $# -eq 1 ]] || { log "usage: hack/containerd-assets.sh VERSION (e.g. v2.4.2); see --help"; exit 2; }
CONTAINERD_VERSION=$1
[[ "$CONTAINERD_VERSION" =~ ^v2\.[0-9]+\.[0-9]+$ ]] || { log "VERSION must look like v2.X.Y (containerd 2.x), got '$CONTAINERD_VERSION'"; exit 2; }
command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
goarch="${GOARCH:-$(go env GOARCH)}"
case "$goarch" in amd64|arm64) ;; *) log "GOARCH must be amd64 or arm64, got '$goarch'"; exit 2 ;; esac

cache_root="${UPGRADEKIT_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/node}"
dest="$cache_root/containerd-${CONTAINERD_VERSION}_linux-${goarch}"
bins=(containerd containerd-shim-runc-v2 ctr)
complete() {
  local b
  for b in "${bins[@]}"; do [[ -x "$1/$b" ]] || return 1; done
  [[ -f "$1/SHA256SUMS" ]]
}
if complete "$dest"; then
  printf '%s\n' "$dest"
  exit 0
fi

go_static_env "$goarch"
new_workdir "$cache_root"
start=$(date +%s)
log "containerd ${CONTAINERD_VERSION} for linux/${goarch}: building once, then cached"
(
  cd "$work"
  go mod init upgradekit.local/node-containerd >/dev/null 2>&1
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
GO
  go mod edit -require="github.com/containerd/containerd/v2@${CONTAINERD_VERSION}"
  go mod tidy >&2
  # `containerd --version` prints these, as containerd's own Makefile sets them.
  go build -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
    -ldflags="-s -w -buildid= -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION} -X github.com/containerd/containerd/v2/version.Revision=module-proxy" \
    -o "$out/" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr >&2
)
if [[ "$goarch" == "$(go env GOHOSTARCH)" ]]; then
  got=$("$out/containerd" --version)
  [[ "$got" == *" ${CONTAINERD_VERSION} "* || "$got" == *" ${CONTAINERD_VERSION}" ]] || { log "built containerd reports '$got', want ${CONTAINERD_VERSION}"; exit 1; }
else
  # Cross-built: it cannot run here, its build information says what it is.
  built_as "$out/containerd" "$goarch" github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" || { log "built containerd is not ${CONTAINERD_VERSION} for ${goarch}"; exit 1; }
fi
(cd "$out" && sha256sum "${bins[@]}" > SHA256SUMS)
chmod 0755 "$out"
cache_publish "$out" "$dest" complete
log "done in $(( $(date +%s) - start ))s: $dest"
printf '%s\n' "$dest"
