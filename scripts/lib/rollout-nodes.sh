# shellcheck shell=bash disable=SC2154
# (SC2154: the rollout's settings are set by scripts/rollout before any of this runs.)
# The nodes layout of scripts/rollout: nginx's upstream file names several nodes,
# SOCKET_DIR/node-N.sock (nginx/siwa-endpoint-upstream-nodes.conf). Sourced by
# scripts/rollout after scripts/lib/rollout-common.sh, not run; reads `nodes` and the
# rollout's settings.
#
# One node at a time, the others serving:
#   1. nginx stops sending to the node: its server line gets `down`, `nginx -t`, reload,
#      and the old nginx workers (which may still hold requests for it) exit;
#   2. the node's spool is given the drain wait of the slot layout (bounded; Redis
#      answers, the nodes that serve just said so), then the node stops with SIGTERM,
#      which finishes requests in flight; what is left stays in the node's own spool and
#      the node replays it when it starts again, at step 3;
#   3. current-node-N names the new release, the node starts, and its /healthz must say
#      healthy through its own socket within --health-timeout;
#   4. nginx sends to the node again (`down` removed, `nginx -t`, reload).
# Nodes that are not running go first (nothing to take out). A node is taken out only
# while another node is healthy. A node that fails step 3 is stopped, its link restored,
# it is started again on its old release, and the rollout stops there (exit 1): the nodes
# before it run the new release, the ones after it the old one, and every node serves.

# nginx -t, reload, and the old workers' exit, waited for (bounded); 1 if nginx refused.
nginx_reload_and_wait() {
  nginx_check_and_reload || return 1
  wait_old_nginx_workers || true
}

# Rewrites the node's server line with or without `down` (a copy renamed over the file).
mark_node() {
  local node=$1 state=$2 rewritten socket
  socket=$(socket_of "$node")
  rewritten=$(mktemp "$(dirname "$upstream_file")/.siwa-upstream.new.XXXXXX")
  if [ "$state" = down ]; then
    sed "/unix:${socket//\//\\/}[[:space:];]/{/[[:space:]]down[[:space:];]/!s/;/ down;/}" "$upstream_file" >"$rewritten"
  else
    sed "/unix:${socket//\//\\/}[[:space:];]/s/[[:space:]]down;/;/" "$upstream_file" >"$rewritten"
  fi
  chmod --reference="$upstream_file" "$rewritten"
  mv -f "$rewritten" "$upstream_file"
}

roll_out_node() {
  local node=$1 other serving="" previous depth response
  previous=$(readlink "$lib_dir/current-$node" 2>/dev/null || true)
  if slot_running "$node"; then
    for other in "${nodes[@]}"; do
      if [ "$other" != "$node" ] && healthy "$other"; then serving=$other; break; fi
    done
    [ -n "$serving" ] || die "no node but $node is healthy: taking $node out would leave none; rollout stopped, $node untouched"
    mark_node "$node" down
    nginx_reload_and_wait || { mark_node "$node" up; die "nginx refused the upstream file with $node down; file restored, $node untouched"; }
    say "nginx no longer sends to $node ($serving serves)"
    drain_spool "$node" "$node"
    say "stopping $node (SIGTERM: it finishes requests in flight)"
    stop_slot "$node" || say "$node had to be killed"
    if [ -z "$depth" ]; then
      say "spool depth of $node: unknown; $(spool_of "$node") is replayed when $node starts"
    elif [ "$depth" -gt 0 ]; then
      say "$depth notifications remain in $(spool_of "$node"); $node replays them when it starts"
    else
      say "spool depth of $node: 0"
    fi
  else
    mark_node "$node" down
    say "$node was not running"
  fi

  point_slot "$node" "releases/$release"
  say "starting $node on $(socket_of "$node")"
  if start_slot "$node" && wait_healthy "$node" "$node"; then
    mark_node "$node" up
    nginx_reload_and_wait || die "nginx refused the upstream file with $node back; $upstream_file names it without down, fix nginx and reload"
    [ "$manager" = systemd ] && systemctl enable --quiet "siwa-endpoint@$node"
    say "$node serves release $release"
    return 0
  fi

  response=$(health "$node")
  [ -n "$response" ] && say "last /healthz answer of $node: $response"
  if [ "$manager" = direct ] && [ -f "$state_dir/$node.log" ]; then
    say "last lines of $state_dir/$node.log:"
    tail -n 5 "$state_dir/$node.log" | sed 's/^/  /' >&2
  fi
  stop_slot "$node" || true
  if [ "$installed" -eq 1 ]; then
    mark_node "$node" up
    nginx_reload_and_wait || true
    die "rollout stopped: $node is not healthy on $release and is stopped (the packaged binary has no older release to go back to); the other nodes serve"
  fi
  if [ -n "$previous" ]; then
    point_slot "$node" "$previous"
    say "starting $node again on $previous"
    if start_slot "$node" && wait_healthy "$node" "$node"; then
      mark_node "$node" up
      nginx_reload_and_wait || true
      die "rollout stopped at $node: it is back on $previous and serves; the nodes before it run release $release"
    fi
    stop_slot "$node" || true
  else
    rm -f "$lib_dir/current-$node"
  fi
  mark_node "$node" up
  nginx_reload_and_wait || true
  die "rollout stopped at $node: it is not running (no healthy release to go back to); the other nodes serve"
}

# Rolls every node out in turn, then points current-live at the release; exits 0.
roll_out_nodes() {
  local node order=()
  pick_status_client
  [ -n "$status_client" ] || die "rollout stopped before any node: health cannot be asked"
  # Nodes that are not running first: starting them takes nothing out of service, and
  # once healthy they serve while the others are taken out.
  for node in "${nodes[@]}"; do slot_running "$node" || order+=("$node"); done
  for node in "${nodes[@]}"; do slot_running "$node" && order+=("$node"); done
  for node in "${order[@]}"; do roll_out_node "$node"; done
  [ "$installed" -eq 0 ] && point_live "releases/$release"
  [ "$installed" -eq 0 ] && prune_releases
  say "done: ${nodes[*]} serve release $release"
  exit 0
}
