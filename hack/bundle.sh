#!/usr/bin/env bash
# Builds the upgrader bundle for one Kubernetes version and architecture:
# the staging tree examples/upgrader's image carries under /staging, in the
# layout nodeexec/kubeadm reads, and its SHA256SUMS. Everything comes from
# the Go module proxy through hack/node-assets.sh (and
# hack/containerd-assets.sh), static and reproducible (CGO_ENABLED=0,
# -trimpath, fixed ldflags); the bundle is cached by version, architecture
# and options. Prints the bundle's directory on stdout; everything else
# goes to stderr.
#
#   hack/bundle.sh [--containerd VERSION] [--cni] VERSION [ARCH]
#   hack/bundle.sh v1.36.3            # -> $cache/v1.36.3_linux-amd64
#   hack/bundle.sh --cni v1.37.2 arm64  # -> $cache/v1.37.2_linux-arm64_cni
#
# The directory holds:
#
#   staging/kubernetes/kubeadm, kubelet, kubectl    VERSION's
#   staging/etcd/etcdctl        the first control plane's etcd-snapshot step
#   staging/containerd/usr/bin/containerd, containerd-shim-runc-v2, ctr
#                               with --containerd (containerd 2.x)
#   staging/cni-plugins/opt/cni/bin/bridge, host-local, loopback, portmap
#                               with --cni (github.com/containernetworking/plugins)
#   SHA256SUMS                  sha256sum of every file under staging/, paths
#                               relative to it (kubernetes/kubeadm, ...): the
#                               in-place extension's --bundle-checksums-dir file
#                               for VERSION, kept with your release records
#   bundle.env                  the versions, ARCH, and SKIP_STEPS: the
#                               extension's --skip-steps for what the bundle
#                               does not carry
#
# Fill the image with: cp -a "$(hack/bundle.sh VERSION)"/staging/. examples/upgrader/staging/
# Measured on 2 cores: from cached node assets 2 to 8 seconds, cached about
# one; cold, the time of hack/node-assets.sh (BENCHMARKS.md).
#
# ARCH is amd64 (default) or arm64. Environment:
#   UPGRADEKIT_BUNDLE_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/bundle)
#   BUNDLE_CONTAINERD        containerd version, as --containerd
#   BUNDLE_CNI               1 for --cni (0 or empty: without)
#   UPGRADEKIT_BUNDLE_NODE_ASSETS, UPGRADEKIT_BUNDLE_CONTAINERD_ASSETS
#                            directories to take instead of running
#                            hack/node-assets.sh / hack/containerd-assets.sh
#                            (same layout, SHA256SUMS included: tests, or
#                            assets built elsewhere)
#   UPGRADEKIT_NODE_CACHE, CNI_VERSION   passed on to those scripts
set -euo pipefail
# shellcheck source=lib/assets.sh
source "$(dirname "$0")/lib/assets.sh"

repo="$(cd "$(dirname "$0")/.." && pwd)"
log() { printf 'bundle: %s\n' "$*" >&2; }
usage() { log "usage: hack/bundle.sh [--containerd VERSION] [--cni] VERSION [ARCH]; see --help"; exit 2; }

containerd_version="${BUNDLE_CONTAINERD:-}"
cni="${BUNDLE_CNI:-}"
positional=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --containerd) [[ $# -ge 2 ]] || { log "--containerd needs a VERSION"; usage; }; containerd_version=$2; shift 2 ;;
    --containerd=*) containerd_version=${1#--containerd=}; shift ;;
    --cni) cni=1; shift ;;
    --) shift; positional+=("$@"); break ;;
    -*) log "unknown option '$1'"; usage ;;
    *) positional+=("$1"); shift ;;
  esac
done
[[ ${#positional[@]} -ge 1 && ${#positional[@]} -le 2 ]] || usage
version=${positional[0]}
arch=${positional[1]:-amd64}
[[ "$version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { log "VERSION must look like v1.X.Y, got '$version'"; exit 2; }
case "$arch" in amd64|arm64) ;; *) log "ARCH must be amd64 or arm64, got '$arch'"; exit 2 ;; esac
[[ -z "$containerd_version" || "$containerd_version" =~ ^v2\.[0-9]+\.[0-9]+$ ]] || { log "--containerd (BUNDLE_CONTAINERD) must look like v2.X.Y (containerd 2.x), got '$containerd_version'"; exit 2; }
case "$cni" in ""|0) cni="" ;; 1) ;; *) log "BUNDLE_CNI must be 1, 0 or empty, got '$cni'"; exit 2 ;; esac

name="${version}_linux-${arch}"
skip=()
if [[ -n "$containerd_version" ]]; then name+="_containerd-${containerd_version}"; else skip+=(containerd); fi
if [[ -n "$cni" ]]; then name+="_cni"; else skip+=(cni-plugins); fi
cache_root="${UPGRADEKIT_BUNDLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/upgradekit/bundle}"
dest="$cache_root/$name"

# complete DIR: the staging tree is exactly what SHA256SUMS lists, and
# matches it (a cached bundle is checked at every call: a second or so).
complete() {
  local d=$1 listed files
  [[ -d "$d/staging" && -s "$d/SHA256SUMS" && -f "$d/bundle.env" ]] || return 1
  (cd "$d/staging" && sha256sum --check --strict --quiet ../SHA256SUMS >/dev/null 2>&1) || return 1
  listed=$(cut -c67- "$d/SHA256SUMS" | LC_ALL=C sort)
  files=$(cd "$d/staging" && find . ! -type d -printf '%P\n' | LC_ALL=C sort)
  [[ "$listed" == "$files" ]]
}
if complete "$dest"; then
  log "cached: $dest"
  printf '%s\n' "$dest"
  exit 0
fi
start=$(date +%s)

# The sources: node assets (kubeadm, kubelet, kubectl, etcdctl, CNI
# plugins) and containerd's, built for ARCH unless given.
node="${UPGRADEKIT_BUNDLE_NODE_ASSETS:-}"
[[ -n "$node" ]] || node=$(GOARCH="$arch" "$repo/hack/node-assets.sh" "$version")
[[ -f "$node/versions.env" && -f "$node/SHA256SUMS" ]] || { log "$node has no versions.env or SHA256SUMS: not a hack/node-assets.sh directory"; exit 1; }
grep -qxF "KUBERNETES_VERSION=${version}" "$node/versions.env" || { log "$node/versions.env is not for ${version}"; exit 1; }
env_value() { sed -n "s/^$1=//p" "$node/versions.env"; }
containerd=""
if [[ -n "$containerd_version" ]]; then
  containerd="${UPGRADEKIT_BUNDLE_CONTAINERD_ASSETS:-}"
  [[ -n "$containerd" ]] || containerd=$(GOARCH="$arch" "$repo/hack/containerd-assets.sh" "$containerd_version")
  [[ -f "$containerd/SHA256SUMS" ]] || { log "$containerd has no SHA256SUMS: not a hack/containerd-assets.sh directory"; exit 1; }
fi

new_workdir "$cache_root"
mkdir -p "$out/staging"

# elf_machine FILE: the ELF header's e_machine (little endian), as the
# architecture it names.
elf_machine() {
  local magic m
  magic=$(od -An -tx1 -N4 -- "$1" | tr -d ' \n')
  [[ "$magic" == 7f454c46 ]] || { echo "not-elf"; return; }
  m=$(od -An -tx1 -j18 -N2 -- "$1" | tr -d ' \n')
  case "$m" in 3e00) echo amd64 ;; b700) echo arm64 ;; *) echo "machine-$m" ;; esac
}
# take SRC NAME DEST: installs SRC/NAME at staging/DEST, if it is the file
# SRC/SHA256SUMS lists and a linux/ARCH executable.
take() {
  local src=$1 file=$2 to="$out/staging/$3" want got machine
  want=$(awk -v f="$file" '$2 == f || $2 == "*" f { print $1 }' "$src/SHA256SUMS")
  [[ -n "$want" ]] || { log "$src/SHA256SUMS does not list $file"; exit 1; }
  mkdir -p "$(dirname "$to")"
  install -m 0755 "$src/$file" "$to"
  got=$(sha256sum "$to" | cut -d' ' -f1)
  [[ "$got" == "$want" ]] || { log "$src/$file does not match its SHA256SUMS ($got, want $want)"; exit 1; }
  machine=$(elf_machine "$to")
  [[ "$machine" == "$arch" ]] || { log "$src/$file is $machine, want a linux/$arch executable"; exit 1; }
}

for b in kubeadm kubelet kubectl; do take "$node" "$b" "kubernetes/$b"; done
take "$node" etcdctl etcd/etcdctl
if [[ -n "$containerd" ]]; then
  for b in containerd containerd-shim-runc-v2 ctr; do take "$containerd" "$b" "containerd/usr/bin/$b"; done
fi
if [[ -n "$cni" ]]; then
  for b in bridge host-local loopback portmap; do take "$node" "cni/$b" "cni-plugins/opt/cni/bin/$b"; done
fi

# Reproducible down to the image layer: fixed modes and times (COPY keeps
# both), sorted checksums.
find "$out/staging" -type d -exec chmod 0755 {} +
find "$out/staging" -exec touch -h -d @0 {} +
(cd "$out/staging" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum --) > "$out/SHA256SUMS"
skip_steps=$(IFS=,; printf '%s' "${skip[*]}")
cni_version=""
[[ -z "$cni" ]] || cni_version=$(env_value CNI_VERSION)
cat > "$out/bundle.env" <<EOF
KUBERNETES_VERSION=${version}
ARCH=${arch}
ETCDCTL_VERSION=$(env_value ETCDCTL_VERSION)
CNI_VERSION=${cni_version}
CONTAINERD_VERSION=${containerd_version}
SKIP_STEPS=${skip_steps}
EOF
chmod 0755 "$out"
cache_publish "$out" "$dest" complete
log "done in $(( $(date +%s) - start ))s: $dest"
log "image: cp -a $dest/staging/. examples/upgrader/staging/ && docker build --platform linux/$arch -f examples/upgrader/Dockerfile --target bundle ."
log "extension: $dest/SHA256SUMS as the --bundle-checksums-dir file ${version}${skip_steps:+, with --skip-steps=$skip_steps}"
printf '%s\n' "$dest"
