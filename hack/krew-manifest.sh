#!/usr/bin/env bash
# Builds the kubectl plugin kubectl-upgradekit (examples/preview) for each
# platform, packs each build as krew installs it (a .tar.gz holding
# kubectl-upgradekit and LICENSE), and writes the krew manifest
# upgradekit.yaml beside the archives: one platform per archive, its
# sha256 computed from the archive itself, its uri where a release of
# VERSION keeps it. `kubectl krew install --manifest=DIR/upgradekit.yaml
# --archive=DIR/kubectl-upgradekit_linux_amd64.tar.gz` installs a local
# build; upload the archives with the release and submit the manifest to a
# krew index to publish. Static and reproducible builds (CGO_ENABLED=0,
# -trimpath). Prints DIR on stdout; everything else goes to stderr.
#
#   hack/krew-manifest.sh VERSION DIR [OS/ARCH...]
#   hack/krew-manifest.sh v0.1.0 dist            # linux and darwin, amd64 and arm64
#   hack/krew-manifest.sh v0.1.0 dist linux/amd64
set -euo pipefail

if [[ $# -lt 2 ]]; then
	echo "usage: hack/krew-manifest.sh VERSION DIR [OS/ARCH...]" >&2
	exit 2
fi
version=$1 dir=$2
shift 2
if [[ ! $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "krew-manifest: version \"$version\" is not vMAJOR.MINOR.PATCH" >&2
	exit 2
fi
platforms=("$@")
[[ ${#platforms[@]} -gt 0 ]] || platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p -- "$dir"
dir=$(cd -- "$dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT

manifest=$dir/upgradekit.yaml
cat >"$manifest" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: upgradekit
spec:
  version: $version
  homepage: https://github.com/upgradekit/upgradekit
  shortDescription: Preview how Cluster API rolls a change out, in place or by replacement
  description: |
    kubectl upgradekit preview reads a Cluster API cluster and a change
    (what kubectl apply -f would take) and says, per machine, whether it
    will be updated in place, replaced or held up, and why; with the waves
    and an estimate. Run kubectl upgradekit preview --help.
  platforms:
YAML
for p in "${platforms[@]}"; do
	os=${p%/*} arch=${p#*/}
	if [[ ! $os =~ ^[a-z0-9]+$ || ! $arch =~ ^[a-z0-9]+$ || $p != "$os/$arch" ]]; then
		echo "krew-manifest: platform \"$p\" is not OS/ARCH" >&2
		exit 2
	fi
	echo "krew-manifest: building $p" >&2
	mkdir -p -- "$work/$os-$arch"
	(cd "$root/examples" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -o "$work/$os-$arch/kubectl-upgradekit" ./preview)
	cp -- "$root/LICENSE" "$work/$os-$arch/LICENSE"
	archive=kubectl-upgradekit_${os}_${arch}.tar.gz
	tar -C "$work/$os-$arch" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - kubectl-upgradekit LICENSE | gzip -n >"$dir/$archive"
	sum=$(sha256sum -- "$dir/$archive")
	cat >>"$manifest" <<YAML
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: https://github.com/upgradekit/upgradekit/releases/download/$version/$archive
    sha256: ${sum%% *}
    bin: kubectl-upgradekit
    files:
    - from: kubectl-upgradekit
      to: .
    - from: LICENSE
      to: .
YAML
done
echo "$dir"
