# shellcheck shell=bash disable=SC2154
# (SC2154: the rollout's settings are set by scripts/rollout before any of this runs.)
# What scripts/rollout does on either layout (two slots, or several nodes): where it may
# write, a slot's or node's process (systemd or direct), its health and its spool, nginx's
# check, reload and old workers, the release links. Sourced by scripts/rollout, not run:
# the functions read the rollout's settings (manager, lib_dir, state_dir, socket_dir,
# spool_root, env_file, nginx, nginx_pid_file, the timeouts, installed, binary, release,
# active), set before they are called. A slot (blue, green) and a node (node-N) are run
# alike; both are called slots below.

say() { printf 'rollout: %s\n' "$*"; }
die() { printf 'rollout: %s\n' "$*" >&2; exit 1; }

socket_of() { printf '%s/%s.sock' "$socket_dir" "$1"; }
spool_of() { printf '%s/spool-%s' "$spool_root" "$1"; }
seconds_now() { date +%s; }

# ---- Where the rollout writes ------------------------------------------------------
# Run as root, a file opened for writing in a directory another user can write is a
# file that user chooses: a link planted there (the service user owns the spools'
# /var/lib/siwa-endpoint and the sockets' /run/siwa-endpoint) makes root truncate or
# create the file it names, and a FIFO there blocks the open for ever. So every
# directory the rollout creates files in must be writable by this user and root only,
# and so must each directory above it (one above can have it swapped for another),
# sticky ones excepted (/tmp: others cannot rename what is not theirs). Both the path
# as written and the directory it resolves to are checked.

# Prints why DIR (which exists) is not private to this user and root; nothing if it is.
not_private() {
  local dir=$1 leaf=1 owner mode me
  me=$(id -u)
  [ -d "$dir" ] || { printf '%s is not a directory' "$dir"; return; }
  while :; do
    owner=$(stat -Lc %u -- "$dir" 2>/dev/null) || { printf '%s cannot be read' "$dir"; return; }
    mode=$(stat -Lc %a -- "$dir")
    if [ "$owner" != 0 ] && [ "$owner" != "$me" ]; then
      printf '%s belongs to user %s' "$dir" "$owner"
      return
    fi
    if (((8#$mode & 8#022) != 0)) && { [ "$leaf" -eq 1 ] || (((8#$mode & 8#1000) == 0)); }; then
      printf '%s is writable by its group or by others (mode %s)' "$dir" "$mode"
      return
    fi
    [ "$dir" = / ] && return
    dir=$(dirname -- "$dir")
    leaf=0
  done
}

# Refuses (exit 2) a directory the rollout would create files in unless it is private;
# one that does not exist yet is judged by the directory it would be made in.
require_private_dir() {
  local dir=$1 setting=$2 existing why
  case $dir in /*) ;; *) dir="$PWD/$dir" ;; esac
  existing=$dir
  while [ ! -e "$existing" ] && [ ! -L "$existing" ]; do existing=$(dirname -- "$existing"); done
  why=$(not_private "$existing")
  if [ -z "$why" ]; then why=$(not_private "$(realpath -e -- "$existing" 2>/dev/null || printf '%s' "$existing")"); fi
  if [ -n "$why" ]; then
    printf 'rollout: unsafe_directory: %s (%s): %s; run as root, the rollout writes only where no other user can\n' \
      "$dir" "$setting" "$why" >&2
    exit 2
  fi
}

# ---- A slot's process ------------------------------------------------------------------
pid_file_of() { printf '%s/%s.pid' "$state_dir" "$1"; }

# Prints the pid of the slot's running responder (direct mode), or nothing. The
# command line is checked too, so a recycled pid is never signalled.
direct_pid() {
  local pid_file pid
  pid_file=$(pid_file_of "$1")
  [ -f "$pid_file" ] || return 0
  pid=$(cat "$pid_file")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' serve '; then
    printf '%s' "$pid"
  fi
}

start_slot() {
  local slot=$1
  if [ "$manager" = systemd ]; then
    systemctl start "siwa-endpoint@$slot"
    return
  fi
  (umask 077 && mkdir -p "$state_dir")
  mkdir -p "$socket_dir" "$spool_root"
  # setsid: the responder outlives this script and gets no signal meant for it;
  # stdin/stdout/stderr go to the log, so no caller waits on an inherited pipe, and
  # the lock's descriptor is closed, so the responder does not hold the lock.
  local program="$lib_dir/current-$slot/siwa-endpoint"
  [ "$installed" -eq 1 ] && program=$binary
  SIWA_FCGI_SOCKET=$(socket_of "$slot") SIWA_SPOOL_DIR=$(spool_of "$slot") \
    setsid "$program" serve --env-file "$env_file" \
    </dev/null >>"$state_dir/$slot.log" 2>&1 9>&- &
  printf '%s\n' "$!" >"$(pid_file_of "$slot")"
}

# Stops a slot with SIGTERM: the responder stops accepting, finishes requests in
# flight and exits 0. Returns 1 if it had to be killed. In direct mode its pid file is
# removed whichever way it ended (or if it was not running).
stop_slot() {
  local slot=$1 pid deadline stopped=0
  if [ "$manager" = systemd ]; then
    systemctl stop "siwa-endpoint@$slot"
    return
  fi
  pid=$(direct_pid "$slot")
  if [ -n "$pid" ]; then
    kill -TERM "$pid"
    deadline=$(($(seconds_now) + stop_timeout))
    while kill -0 "$pid" 2>/dev/null && [ "$(seconds_now)" -lt "$deadline" ]; do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      say "slot $slot (pid $pid) did not stop within ${stop_timeout}s of SIGTERM: killing it"
      kill -KILL "$pid" 2>/dev/null || true
      stopped=1
    fi
  fi
  rm -f "$(pid_file_of "$slot")"
  return "$stopped"
}

# True once the process just started for a slot (direct mode) has exited. Unlike
# direct_pid, it reads no command line: while the responder starts, its command line
# changes (setsid, a wrapper script, the binary) and may read empty mid-exec, which is
# no exit. A zombie has exited.
slot_exited() {
  local pid state
  pid=$(cat "$(pid_file_of "$1")" 2>/dev/null || true)
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  state=$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$pid/stat" 2>/dev/null || true)
  [ -z "$state" ] || [ "$state" = Z ]
}

slot_running() {
  if [ "$manager" = systemd ]; then
    systemctl is-active --quiet "siwa-endpoint@$1"
  else
    [ -n "$(direct_pid "$1")" ]
  fi
}

# A slot's health: `siwa-endpoint status --json` asks its /healthz over its FastCGI
# socket, straight (nginx passes /healthz from loopback only, and the new slot is not
# behind nginx yet), and exits 0 only when it is healthy (200, keys loaded, Redis
# answering). The client is the new release's binary, or the active slot's when the new
# one has no `status` (an older release rolled out to roll back); set by pick_status_client.
status_client=""
pick_status_client() {
  local candidate
  local candidates=("$lib_dir/releases/$release/siwa-endpoint" ${active:+"$lib_dir/current-$active/siwa-endpoint"})
  [ "$installed" -eq 1 ] && candidates=("$binary")
  for candidate in "${candidates[@]}"; do
    if [ -x "$candidate" ] && timeout 10 "$candidate" status --help >/dev/null 2>&1; then
      status_client=$candidate
      return 0
    fi
  done
  say "neither the new release nor the active slot has \`siwa-endpoint status\`: health cannot be asked"
}

# Prints the slot's health document (nothing when it does not answer).
health() {
  [ -n "$status_client" ] || return 0
  timeout 10 "$status_client" status --socket "$(socket_of "$1")" --json --timeout 5 2>/dev/null || true
}

healthy() {
  [ -n "$status_client" ] || return 1
  timeout 10 "$status_client" status --socket "$(socket_of "$1")" --json --timeout 5 >/dev/null 2>&1
}

# Waits up to --health-timeout for SLOT to be healthy; on failure says why, naming it
# LABEL ("slot blue", "node-1"), and returns 1.
wait_healthy() {
  local slot=$1 label=$2 deadline
  deadline=$(($(seconds_now) + health_timeout))
  until healthy "$slot"; do
    if [ "$manager" = direct ] && slot_exited "$slot"; then
      say "$label exited during its health check"
      return 1
    fi
    if [ "$(seconds_now)" -ge "$deadline" ]; then
      say "$label was not healthy within ${health_timeout}s"
      return 1
    fi
    sleep 0.2
  done
}

# The number of notifications waiting in a slot's spool, read from its health document;
# nothing when it does not answer. The document is the compact JSON our own binary
# writes (one top-level "spool_depth" member, a whole number), so a pattern reads it:
# a host without Python (the package's) can roll out too.
spool_depth() {
  health "$1" | sed -n 's/.*"spool_depth":\([0-9]\{1,\}\)[,}].*/\1/p' | head -n 1
}

# Waits up to --drain-timeout while the running SLOT's spool holds notifications, for
# their replay into Redis (Redis answers: the slots that serve just said so), saying so
# with LABEL; sets `depth` to what is left (empty when SLOT did not answer).
drain_spool() {
  local slot=$1 label=$2 deadline
  depth=$(spool_depth "$slot")
  if [ -n "$depth" ] && [ "$depth" -gt 0 ]; then
    say "$label holds $depth spooled notifications: waiting up to ${drain_timeout}s for their replay"
    deadline=$(($(seconds_now) + drain_timeout))
    while [ -n "$depth" ] && [ "$depth" -gt 0 ] && [ "$(seconds_now)" -lt "$deadline" ]; do
      sleep 0.5
      depth=$(spool_depth "$slot")
    done
  fi
}

# nginx's worker processes, children of the master named by the pid file (read from
# /proc: a minimal host has no ps).
nginx_workers() {
  local master stat pid line
  master=$(cat "$nginx_pid_file" 2>/dev/null || true)
  [[ $master =~ ^[0-9]+$ ]] || return 0
  for stat in /proc/[0-9]*/stat; do
    pid=${stat#/proc/}
    pid=${pid%/stat}
    # Field 4 is the parent's pid; the name in field 2 may hold spaces, so count from
    # after its closing parenthesis.
    read -r line <"$stat" 2>/dev/null || continue
    line=${line##*) }
    # shellcheck disable=SC2086 # split into its fields on purpose
    set -- $line
    [ "${2:-}" = "$master" ] && printf '%s\n' "$pid"
  done
  return 0
}

# Checks nginx's configuration (`nginx -t`, its complaint printed) and reloads nginx,
# keeping in `old_nginx_workers` the workers that ran before. Returns 1 if `nginx -t`
# refused the configuration, 2 if the reload failed.
old_nginx_workers=""
nginx_check_and_reload() {
  local checked
  if ! checked=$("${nginx[@]}" -t 2>&1); then
    printf '%s\n' "$checked" >&2
    return 1
  fi
  old_nginx_workers=$(nginx_workers)
  "${nginx[@]}" -s reload || return 2
}

# Waits up to --drain-timeout for the workers that ran before the reload to finish their
# requests (the only ones that can still send to what the upstream file no longer names)
# and exit; names each that still runs, followed by CONSEQUENCE. Returns 0 only when it
# watched them and all exited.
wait_old_nginx_workers() {
  local consequence=${1:-} worker deadline remaining=0
  if [ -z "$old_nginx_workers" ]; then
    say "no nginx master at $nginx_pid_file: waiting 2s instead of watching old workers"
    sleep 2
    return 1
  fi
  deadline=$(($(seconds_now) + drain_timeout))
  for worker in $old_nginx_workers; do
    while kill -0 "$worker" 2>/dev/null && [ "$(seconds_now)" -lt "$deadline" ]; do sleep 0.1; done
    if kill -0 "$worker" 2>/dev/null; then
      remaining=$((remaining + 1))
      say "old nginx worker $worker still runs after ${drain_timeout}s$consequence"
    fi
  done
  [ "$remaining" -eq 0 ]
}

# ---- Releases ------------------------------------------------------------------------
# Points current-<slot> at a release (relative link), atomically (scripts/lib/release.sh).
# The installed binary has no slot links: nothing to point.
point_slot() {
  [ "$installed" -eq 1 ] && return 0
  release_point_slot "$lib_dir" "$1" "$2"
}
# Points current-live at the release now served, and current-previous at the one it
# named before (what --rollback rolls out).
point_live() {
  local before
  before=$(readlink "$lib_dir/current-live" 2>/dev/null || true)
  if [ -n "$before" ] && [ "$before" != "$1" ]; then release_point_slot "$lib_dir" previous "$before"; fi
  release_point_slot "$lib_dir" live "$1"
}

# Removes releases beyond the newest few that no link names.
prune_releases() {
  local in_use=" " link count=0 old
  for link in "$lib_dir"/current-*; do
    [ -L "$link" ] && in_use+="$(readlink "$link") "
  done
  while IFS= read -r old; do
    [ -n "$old" ] || continue
    count=$((count + 1))
    if [ "$count" -gt "$keep_releases" ] && [[ $in_use != *" releases/$old "* ]]; then
      rm -rf -- "${lib_dir:?}/releases/$old"
    fi
  done < <(find "$lib_dir/releases" -mindepth 1 -maxdepth 1 -type d ! -name '.*' -printf '%f\n' | sort -r)
}

