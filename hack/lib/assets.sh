# Sourced by the hack/*-assets.sh and hack/bundle.sh scripts.
#
#   new_workdir CACHE_ROOT
#
# Makes a build directory under CACHE_ROOT (the same file system as the
# cache, so cache_publish can rename into it), sets the globals `work`
# (that directory) and `out` (work/out, created), and removes the whole
# directory when the script exits, also the read-only files the Go module
# cache leaves in it.
new_workdir() {
  mkdir -p "$1"
  work=$(mktemp -d "$1/.build-XXXXXX")
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  out="$work/out"
  mkdir -p "$out"
}

#   go_static_env GOARCH
#
# Module-aware, static builds for linux/GOARCH of modules other than ours:
# never let a surrounding go.work or GOFLAGS=-mod=vendor leak in.
go_static_env() {
  export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOOS=linux GOARCH="$1"
}
#
#   cache_publish OUT DEST COMPLETE
#
# Renames OUT (a finished build, on the same file system as DEST) to DEST.
# When DEST exists already (another run published it first, or an earlier
# run left it incomplete), the existing one is kept if the function named
# COMPLETE accepts it (`COMPLETE DEST` returns 0); otherwise it is replaced.
# Logs through the caller's `log` function.
cache_publish() {
  local out=$1 dest=$2 complete=$3
  if mv -T "$out" "$dest" 2>/dev/null; then
    return 0
  fi
  if "$complete" "$dest"; then
    log "another run published $dest first; using it"
    return 0
  fi
  rm -rf "$dest"
  mv -T "$out" "$dest"
}

#   built_as BINARY GOARCH MODULE VERSION
#
# Whether BINARY's Go build information says it was built for GOARCH with
# MODULE at VERSION (as its main module or a dependency). This is how a
# cross-built binary is checked: it cannot run on this machine.
built_as() {
  local info
  info=$(go version -m "$1") || return 1
  awk -v a="GOARCH=$2" '$1 == "build" && $2 == a { f = 1 } END { exit !f }' <<<"$info" &&
    awk -v m="$3" -v v="$4" '($1 == "mod" || $1 == "dep") && $2 == m && $3 == v { f = 1 } END { exit !f }' <<<"$info"
}
