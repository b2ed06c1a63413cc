#!/usr/bin/env bash
# Releases upgradekit at one version: the root module and every nested
# module that depends on it (today amiselect/aws, karpenter and
# examples/drift-explain) get the same version, and each nested module
# requires the root (and any other of these it uses) at exactly that version (its
# `replace ... => ../..` stays for work inside the repository; the go
# command ignores a dependency's replace directives, so consumers resolve
# the required version from their proxy).
#
#   hack/release.sh [-proxy DIR] [-clusterctl DIR] [-no-tag] VERSION
#
# Steps: check VERSION (vX.Y.Z or vX.Y.Z-pre) and that the work tree is
# clean; set the nested requires (a commit "release VERSION" when they
# change); tag VERSION and <subdir>/VERSION for each nested module (unless
# -no-tag). With -proxy DIR it also writes a file-based Go module proxy of
# the released modules (GOPROXY=file://DIR), built by hack/release from the
# tagged commit: what the release test installs into a consumer module.
# With -clusterctl DIR it also writes the in-place extension's clusterctl
# repository files (hack/release clusterctl), generated from its kustomize
# base at the tagged commit:
# DIR/runtime-extension-upgradekit/VERSION/{metadata.yaml,runtime-extension-components.yaml},
# a local clusterctl repository and the two files to attach to the release.
# Pushing the commit and the tags is left to the person releasing.
set -euo pipefail
# Each module on its own go.mod (`go list -m` in a workspace lists them all).
export GOWORK=off

usage() { echo "usage: hack/release.sh [-proxy DIR] [-clusterctl DIR] [-no-tag] VERSION" >&2; exit 2; }
proxy="" clusterctl="" tag=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) echo "usage: hack/release.sh [-proxy DIR] [-clusterctl DIR] [-no-tag] VERSION"; exit 0 ;;
    -proxy) [[ $# -ge 2 ]] || usage; proxy="$2"; shift 2 ;;
    -clusterctl) [[ $# -ge 2 ]] || usage; clusterctl="$2"; shift 2 ;;
    -no-tag) tag=0; shift ;;
    -*) echo "release: unknown flag $1" >&2; usage ;;
    *) break ;;
  esac
done
[[ $# -eq 1 ]] || usage
version="$1"
[[ "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "release: version '$version' is not vX.Y.Z[-pre]" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rootmod=$(go list -m)
if [[ -n "$(git status --porcelain)" ]]; then
  echo "release: the work tree has uncommitted changes" >&2
  exit 1
fi

# Nested modules released with the root: those that require it.
nested=()
while IFS= read -r mod; do
  dir=${mod#./}
  [[ "$dir" == . || "$dir" == hack/* ]] && continue
  if (cd "$dir" && go mod edit -json | grep -q "\"Path\": \"$rootmod\""); then
    nested+=("$dir")
  fi
done < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)

# Each nested module requires the root, and may require other nested ones
# (examples/drift-explain requires karpenter): all at the released version.
ours=("$rootmod")
for dir in "${nested[@]}"; do
  ours+=("$(cd "$dir" && go list -m)")
done
for dir in "${nested[@]}"; do
  reqs=$(cd "$dir" && go mod edit -json)
  self=$(cd "$dir" && go list -m)
  for mod in "${ours[@]}"; do
    if [[ "$mod" != "$self" ]] && grep -q "\"Path\": \"$mod\"" <<<"$reqs"; then
      (cd "$dir" && go mod edit -require="$mod@$version")
    fi
  done
done
if [[ -n "$(git status --porcelain)" ]]; then
  git add -- $(printf '%s/go.mod ' "${nested[@]}")
  git commit -q -m "release $version: nested modules require $rootmod $version"
fi

if [[ $tag == 1 ]]; then
  git tag "$version"
  for dir in "${nested[@]}"; do
    git tag "$dir/$version"
  done
  echo "release: tagged $version$(printf ' %s/'"$version" "${nested[@]}") at $(git rev-parse --short HEAD)" >&2
fi

if [[ -n "$proxy" ]]; then
  mkdir -p "$proxy"
  proxy=$(cd "$proxy" && pwd)
  mods=("$rootmod")
  for dir in "${nested[@]}"; do
    mods+=("$(cd "$dir" && go list -m)=$dir")
  done
  (cd hack/release && GOWORK=off go run . -repo "$root" -rev HEAD -version "$version" -out "$proxy" "${mods[@]}")
  echo "release: wrote GOPROXY=file://$proxy for ${mods[*]}" >&2
fi

if [[ -n "$clusterctl" ]]; then
  mkdir -p "$clusterctl"
  clusterctl=$(cd "$clusterctl" && pwd)
  (cd hack/release && GOWORK=off go run . clusterctl -repo "$root" -version "$version" -out "$clusterctl")
  echo "release: wrote the clusterctl repository files to $clusterctl/runtime-extension-upgradekit/$version" >&2
fi
