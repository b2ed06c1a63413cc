#!/usr/bin/env bash
# Builds kubectl from the k8s.io/kubectl module (its pkg/cmd, as
# k8s.io/kubernetes's cmd/kubectl does) at the k8s.io/client-go version our
# go.mod requires, from the module proxy, and caches it by version. Prints
# the directory holding `kubectl` on stdout; everything else goes to
# stderr. The kubectl plugin test of examples/cliconvention runs it:
#
#   UPGRADEKIT_KUBECTL=$(hack/kubectl.sh)/kubectl go test ./examples/cliconvention/ -run Plugin
#
# Environment:
#   UPGRADEKIT_KUBECTL_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/kubectl)
#   KUBECTL_VERSION           k8s.io/kubectl version, v0.X.Y (default: k8s.io/client-go's in strategy/capi/go.mod)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
log() { printf 'kubectl: %s\n' "$*" >&2; }
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
[[ $# -eq 0 ]] || { log "no arguments expected"; exit 2; }
command -v go >/dev/null || { log "go is not on PATH"; exit 1; }
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

if [[ -z "${KUBECTL_VERSION:-}" ]]; then
  KUBECTL_VERSION=$(cd "$repo/strategy/capi" && go list -m -f '{{.Version}}' k8s.io/client-go)
fi
[[ "$KUBECTL_VERSION" =~ ^v0\.[0-9]+\.[0-9]+$ ]] || { log "KUBECTL_VERSION must look like v0.X.Y, got '$KUBECTL_VERSION'"; exit 2; }

cache_root="${UPGRADEKIT_KUBECTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/kubectl}"
dest="$cache_root/kubectl-${KUBECTL_VERSION}_$(go env GOOS)-$(go env GOARCH)"
complete() { [[ -x "$1/kubectl" ]]; }
if complete "$dest"; then
  printf '%s\n' "$dest"
  exit 0
fi

start=$(date +%s)
# shellcheck source=lib/assets.sh
. "$repo/hack/lib/assets.sh"
new_workdir "$cache_root"
log "building kubectl from k8s.io/kubectl@${KUBECTL_VERSION} (once per version)"
mkdir -p "$work/src" "$work/out"
cat > "$work/src/main.go" <<'GO'
// Command kubectl is k8s.io/kubernetes's cmd/kubectl, built from the
// published k8s.io/kubectl module.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
GO
(
  cd "$work/src"
  go mod init kubectl-build >&2
  go get "k8s.io/kubectl@${KUBECTL_VERSION}" >&2
  go mod tidy >&2
  go build -trimpath -ldflags='-s -w' -o "$work/out/kubectl" . >&2
)
"$work/out/kubectl" version --client >/dev/null 2>&1 || { log "the built kubectl does not run"; exit 1; }
chmod 0755 "$work/out"
cache_publish "$work/out" "$dest" complete
log "done in $(( $(date +%s) - start ))s: $dest"
printf '%s\n' "$dest"
