# shellcheck shell=bash
# Releases of siwa-endpoint, shared by scripts/install, scripts/rollout and
# scripts/run-local. Sourced, not run. Under LIB_DIR:
#   releases/<time>-<digest>/siwa-endpoint   one directory per binary (0755)
#   current-<slot> -> releases/<id>          the release each slot (blue, green) runs

# Installs BINARY as a release under LIB_DIR/releases and sets RELEASE to its id:
#   release_install LIB_DIR BINARY
# A release is named by time and content: the same binary installed again reuses its
# release directory instead of piling up copies. The directory is filled under a
# hidden staging name and renamed into place, so no slot can see half a release.
release_install() {
  local lib_dir=$1 binary=$2 digest existing staging
  RELEASE=""
  digest=$(sha256sum "$binary" | cut -c1-12) || return 1
  [ -n "$digest" ] || return 1
  for existing in "$lib_dir"/releases/*-"$digest"; do
    if [ -x "$existing/siwa-endpoint" ]; then RELEASE=$(basename "$existing"); fi
  done
  if [ -z "$RELEASE" ]; then
    staging=$(mktemp -d "$lib_dir/releases/.staging.XXXXXX") || return 1
    install -m 0755 "$binary" "$staging/siwa-endpoint" || return 1
    chmod 0755 "$staging" || return 1
    RELEASE="$(date -u +%Y%m%dT%H%M%SZ)-$digest"
    mv -T "$staging" "$lib_dir/releases/$RELEASE" || return 1
  fi
}

# Points LIB_DIR/current-SLOT at TARGET (a path relative to LIB_DIR, such as
# releases/<id>), atomically: the link is made under a temporary name beside it and
# renamed over the old one, so current-SLOT always names a release, old or new.
#   release_point_slot LIB_DIR SLOT TARGET
release_point_slot() {
  local link="$1/current-$2" temp="$1/.current-$2.new"
  rm -f -- "$temp"
  ln -s -- "$3" "$temp" || return 1
  mv -Tf -- "$temp" "$link"
}

# Sets RELEASE_BINARY to BINARY; when BINARY is empty, builds siwa-endpoint in release
# mode in REPO first (saying so through the command SAY) and sets it to that build:
#   release_binary REPO BINARY SAY
release_binary() {
  RELEASE_BINARY=$2
  [ -z "$RELEASE_BINARY" ] || return 0
  "$3" "building a release binary"
  (cd "$1" && swift build -c release --product siwa-endpoint) || return 1
  RELEASE_BINARY="$1/.build/release/siwa-endpoint"
}
