# Sourced by the hack/*-assets.sh and hack/bundle.sh scripts: publishes a
# directory built in a temporary place into the cache, atomically.
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
