# shellcheck shell=bash disable=SC2154
# (SC2154: the rollout's settings are set by scripts/rollout before any of this runs.)
# The slot layout of scripts/rollout: two slots, blue and green, nginx's upstream file
# naming the active one (steps 2 to 4 of the script's header). Sourced by scripts/rollout
# after scripts/lib/rollout-common.sh, not run; reads `active`, `idle`,
# `upstream_socket`, `upstream_dir` and the rollout's settings.

# Says why the new slot failed (REASON, when given), with its last /healthz answer and
# log lines; stops it, restores its release link; exit 1 with nginx and the active slot
# untouched.
fail_new_slot() {
  [ -z "${1:-}" ] || say "$1"
  local response
  response=$(health "$idle")
  [ -n "$response" ] && say "last /healthz answer: $response"
  if [ "$manager" = direct ] && [ -f "$state_dir/$idle.log" ]; then
    # The responder's own log lines: JSON events, never tokens or bodies.
    say "last lines of $state_dir/$idle.log:"
    tail -n 5 "$state_dir/$idle.log" | sed 's/^/  /' >&2
  fi
  stop_slot "$idle" || true
  if [ -n "$previous_idle_target" ]; then
    point_slot "$idle" "$previous_idle_target"
  elif [ "$installed" -eq 0 ]; then
    rm -f "$lib_dir/current-$idle"
  fi
  die "rollout aborted: nginx and slot ${active:-(none)} are untouched"
}

# Rolls the release out to the idle slot, switches nginx to it, drains and stops the
# active one; exits 0, or 1 through fail_new_slot.
roll_out_slots() {
  local previous_idle_target backup rewritten new_socket depth="" reloaded=0
  previous_idle_target=$(readlink "$lib_dir/current-$idle" 2>/dev/null || true)

  # A slot that is idle yet running is left over from an interrupted rollout: nginx does
  # not send it anything, so it is stopped before its socket is reused.
  if slot_running "$idle"; then
    say "slot $idle is running although nginx does not use it: stopping it first"
    stop_slot "$idle" || true
  fi
  point_slot "$idle" "releases/$release"

  # ---- 2. Start the new slot and check its health ------------------------------------
  pick_status_client
  say "starting slot $idle on $(socket_of "$idle")"
  start_slot "$idle" || fail_new_slot "slot $idle failed to start"
  wait_healthy "$idle" "slot $idle" || fail_new_slot
  say "slot $idle is healthy"

  # ---- 3. Point nginx at the new slot -------------------------------------------------
  backup=$(mktemp "$upstream_dir/.siwa-upstream.old.XXXXXX")
  cp -p "$upstream_file" "$backup"
  rewritten=$(mktemp "$upstream_dir/.siwa-upstream.new.XXXXXX")
  new_socket=$(socket_of "$idle")
  if [ -n "$upstream_socket" ]; then
    # Only the server line changes; comments and the upstream name stay.
    sed "s|unix:$upstream_socket|unix:$new_socket|" "$upstream_file" >"$rewritten"
  else
    printf 'upstream siwa_endpoint {\n    server unix:%s;\n}\n' "$new_socket" >"$rewritten"
  fi
  chmod --reference="$upstream_file" "$rewritten"
  mv -f "$rewritten" "$upstream_file"

  nginx_check_and_reload || reloaded=$?
  if [ "$reloaded" -ne 0 ]; then
    mv -f "$backup" "$upstream_file"
    [ "$reloaded" -eq 1 ] && fail_new_slot "nginx -t refused the new upstream file; the old file is back"
    fail_new_slot "nginx reload failed; the old upstream file is back"
  fi
  rm -f "$backup"
  say "nginx now sends to $new_socket"

  # current-live names the release nginx now serves: what commands that are no slot (the
  # reconcile unit, cron) run, whichever slot or node layout serves.
  [ "$installed" -eq 0 ] && point_live "releases/$release"

  if [ -z "$active" ]; then
    [ "$manager" = systemd ] && systemctl enable --quiet "siwa-endpoint@$idle"
    say "done: slot $idle serves release $release"
    exit 0
  fi

  # Old workers keep serving the requests they hold (to the old slot), then exit.
  # Once all are gone, nothing sends to the old slot any more.
  if wait_old_nginx_workers "; its requests to slot $active may fail"; then
    say "the old nginx workers have exited"
  fi

  # ---- 4. Drain and stop the old slot -------------------------------------------------
  if slot_running "$active"; then
    drain_spool "$active" "slot $active"
    say "stopping slot $active (SIGTERM: it finishes requests in flight)"
    stop_slot "$active" || say "slot $active had to be killed"
  else
    say "slot $active was not running"
  fi
  [ "$manager" = systemd ] && systemctl disable --quiet "siwa-endpoint@$active" && systemctl enable --quiet "siwa-endpoint@$idle"

  if [ -z "$depth" ]; then
    say "spool depth of slot $active: unknown (no /healthz answer before it stopped); $(spool_of "$active") is replayed when slot $active next starts"
  elif [ "$depth" -gt 0 ]; then
    say "WARNING: $depth notifications remain in $(spool_of "$active"); they are replayed when slot $active next starts (the next rollout, or start it by hand once Redis answers)"
  else
    say "spool depth of slot $active: 0"
  fi

  # ---- Old releases: keep the newest few, and any a slot points at --------------------
  if [ "$installed" -eq 1 ]; then
    say "done: slot $idle serves $release; slot $active is stopped"
    exit 0
  fi
  prune_releases

  say "done: slot $idle serves release $release; slot $active is stopped"
  exit 0
}
