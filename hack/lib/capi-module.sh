# Sourced by the hack/capi-*.sh scripts: copies Cluster API's main module
# out of the Go module cache, ready to build from.
#
#   capi_module_copy REPO VERSION DEST
#
# Fetches sigs.k8s.io/cluster-api@VERSION and sigs.k8s.io/cluster-api/api@VERSION
# through the module proxy (or the cache), copies the main module to DEST
# (writable), and points its go.mod at the published api module: the
# repository's `replace sigs.k8s.io/cluster-api/api => ./api` names a
# directory that is a module of its own and not in the main module's zip.
# Nothing of Cluster API is changed otherwise.
capi_module_copy() {
  local repo=$1 version=$2 dest=$3
  local field capi_info api_info src api_sum api_gomod_sum
  field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",*\$/\1/p"; }
  capi_info=$(cd "$repo/strategy/capi" && go mod download -json "sigs.k8s.io/cluster-api@${version}")
  api_info=$(cd "$repo/strategy/capi" && go mod download -json "sigs.k8s.io/cluster-api/api@${version}")
  src=$(printf '%s\n' "$capi_info" | field Dir)
  api_sum=$(printf '%s\n' "$api_info" | field Sum)
  api_gomod_sum=$(printf '%s\n' "$api_info" | field GoModSum)
  if [[ ! -d "$src" || -z "$api_sum" || -z "$api_gomod_sum" ]]; then
    echo "could not download sigs.k8s.io/cluster-api{,/api}@${version} from the module proxy" >&2
    return 1
  fi
  cp -R "$src" "$dest"
  chmod -R u+w "$dest"
  (
    cd "$dest"
    go mod edit -dropreplace=sigs.k8s.io/cluster-api/api -require="sigs.k8s.io/cluster-api/api@${version}"
    printf 'sigs.k8s.io/cluster-api/api %s %s\nsigs.k8s.io/cluster-api/api %s/go.mod %s\n' \
      "$version" "$api_sum" "$version" "$api_gomod_sum" >> go.sum
  )
}
