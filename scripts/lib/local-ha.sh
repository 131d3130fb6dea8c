# shellcheck shell=bash
# scripts/run-local --ha: Redis as teams run it for availability, on loopback. One
# primary and two replicas (redis-server, AOF on) and three sentinels (redis-server
# --sentinel), each on its own port, files under one directory; every process goes into
# STACK_PIDS through stack_start, so stack_stop_all stops them. Sourced after
# local-stack.sh; the failover demonstration uses run-local's variables (binary, work,
# kid, client_id, url, ca, https_port, logs).

HA_MASTER=siwa-local
HA_NODE_PORTS=()
HA_SENTINEL_PORTS=()
# Each data node's own options (AOF; the replicas' --replicaof), kept to start it again,
# and the directory their files are in.
HA_NODE_ARGS=()
HA_NODE_DIR=""

# Starts the three data nodes and the three sentinels and waits until the sentinels
# know both replicas and each other.
ha_start_redis() {
  local dir=$1 logs=$2 i port
  for i in 0 1 2; do HA_NODE_PORTS+=("$(stack_free_port)"); done
  HA_NODE_DIR=$dir
  for i in 0 1 2; do
    local args=(--appendonly yes --appendfsync everysec)
    if ((i > 0)); then args+=(--replicaof 127.0.0.1 "${HA_NODE_PORTS[0]}"); fi
    HA_NODE_ARGS+=("${args[*]}")
    stack_start_redis "redis-node-$i" "${HA_NODE_PORTS[$i]}" "$dir/node-$i" "$logs/redis-node-$i.log" --save "" \
      "${args[@]}"
  done
  step "started redis-server primary on 127.0.0.1:${HA_NODE_PORTS[0]}, replicas on ${HA_NODE_PORTS[1]} and ${HA_NODE_PORTS[2]}"
  for i in 0 1 2; do
    port=$(stack_free_port)
    HA_SENTINEL_PORTS+=("$port")
    mkdir -p "$dir/sentinel-$i"
    # A sentinel rewrites its file with what it learns: one writable file each.
    cat >"$dir/sentinel-$i/sentinel.conf" <<CONF
port $port
bind 127.0.0.1
dir $dir/sentinel-$i
logfile $logs/redis-sentinel-$i.log
sentinel monitor $HA_MASTER 127.0.0.1 ${HA_NODE_PORTS[0]} 2
sentinel down-after-milliseconds $HA_MASTER 2000
sentinel failover-timeout $HA_MASTER 10000
CONF
    stack_start_redis "redis-sentinel-$i" "$port" "$dir/sentinel-$i" "$logs/redis-sentinel-$i.log" \
      "$dir/sentinel-$i/sentinel.conf" --sentinel
  done
  step "started three sentinels on 127.0.0.1:$(ha_sentinel_list | sed 's/127.0.0.1://g; s/,/, /g') (quorum 2, down after 2 s)"
  stack_wait_until 30 ha_formed || stack_die "the sentinels did not see the replicas and each other within 30 s"
}

ha_formed() {
  local port fields
  for port in "${HA_SENTINEL_PORTS[@]}"; do
    fields=$(redis-cli -p "$port" SENTINEL master "$HA_MASTER" 2>/dev/null | paste - - | tr '\t' '=')
    grep -qx 'num-slaves=2' <<<"$fields" || return 1
    grep -qx 'num-other-sentinels=2' <<<"$fields" || return 1
  done
  # And both replicas done with their first sync, or a WAIT would time out meanwhile.
  [ "$(redis-cli -p "${HA_NODE_PORTS[0]}" INFO replication | grep -c 'state=online')" = 2 ]
}

ha_sentinel_list() {
  local port list=()
  for port in "${HA_SENTINEL_PORTS[@]}"; do list+=("127.0.0.1:$port"); done
  (IFS=,; printf '%s\n' "${list[*]}")
}

# The primary's port as the first answering sentinel names it.
ha_primary_port() {
  local port answer
  for port in "${HA_SENTINEL_PORTS[@]}"; do
    answer=$(redis-cli -p "$port" SENTINEL get-master-addr-by-name "$HA_MASTER" 2>/dev/null | sed -n 2p)
    if [ -n "$answer" ]; then
      printf '%s\n' "$answer"
      return 0
    fi
  done
  return 1
}

ha_roles() {
  local i
  for i in 0 1 2; do
    printf '  127.0.0.1:%s  %s\n' "${HA_NODE_PORTS[$i]}" \
      "$(redis-cli -p "${HA_NODE_PORTS[$i]}" ROLE 2>/dev/null | head -n 1 || true)"
  done | sed 's/  $/  (down)/'
}

ha_health() { curl -sS --cacert "$ca" "https://localhost:$https_port/healthz"; }

ha_failed_over() {
  local health
  health=$(ha_health)
  grep -q '"status":"ok"' <<<"$health" && grep -q '"spool_depth":0' <<<"$health" &&
    ! grep -q "\"redis_primary\":\"127.0.0.1:$HA_OLD_PORT\"" <<<"$health"
}

ha_old_is_replica() { [ "$(redis-cli -p "$HA_OLD_PORT" ROLE 2>/dev/null | head -n 1)" = slave ]; }

ha_demonstrate_failover() {
  local count=30 i sub body status outcome answer
  step "--ha: the primary's machine is lost while notifications arrive"
  stack_log "roles now:"
  ha_roles
  stack_log "GET /healthz: $(ha_health)"
  HA_OLD_PORT=$(ha_primary_port)
  local old_index
  for i in 0 1 2; do [ "${HA_NODE_PORTS[$i]}" = "$HA_OLD_PORT" ] && old_index=$i; done

  mkdir -p "$work/kit/ha"
  for ((i = 1; i <= count; i++)); do
    "$binary" sign --key "$work/kit/test-signing-key.pem" --kid "$kid" --type consent-revoked \
      --sub "002000.ha.$(printf '%04d' "$i")" --client-id "$client_id" >"$work/kit/ha/$i.json"
  done
  stack_log "signed $count consent-revoked notifications; SIGKILL to the primary (127.0.0.1:$HA_OLD_PORT), then one POST every 0.25 s:"
  local old_pid
  old_pid=$(stack_pid "redis-node-$old_index")
  kill -KILL "$old_pid"
  { wait "$old_pid"; } 2>/dev/null || true
  stack_forget_pid "$old_pid"
  local started=$SECONDS applied=0 spooled=0 other=0
  for ((i = 1; i <= count; i++)); do
    answer=$(curl -sS --cacert "$ca" -H 'Content-Type: application/json' --data-binary "@$work/kit/ha/$i.json" \
      -w '\n%{http_code}' "$url")
    status=${answer##*$'\n'}
    outcome=$(sed -n 's/.*"status":"\([a-z_]*\)".*/\1/p' <<<"${answer%$'\n'*}")
    case "$status/$outcome" in
      200/applied) applied=$((applied + 1)) ;;
      200/spooled) spooled=$((spooled + 1)) ;;
      *) other=$((other + 1)) ;;
    esac
    printf '  +%2ss  002000.ha.%04d  HTTP %s %s\n' "$((SECONDS - started))" "$i" "$status" "$outcome"
    sleep 0.25
  done
  stack_log "answers: $applied applied, $spooled spooled (verified, fsync'd, waiting for a primary), $other other"
  ((other == 0)) || stack_die "a notification was not answered 200 (see $logs/serve.log)"

  stack_wait_until 40 ha_failed_over || stack_die "no failover, or the spool did not drain, within 40 s: $(ha_health)"
  step "failover done: the sentinels promoted 127.0.0.1:$(ha_primary_port); the spool drained"
  ha_roles
  stack_log "GET /healthz: $(ha_health)"
  local present=0
  for ((i = 1; i <= count; i++)); do
    if [ "$(redis EXISTS "siwa:user:{$client_id:002000.ha.$(printf '%04d' "$i")}")" = 1 ]; then
      present=$((present + 1))
    fi
  done
  stack_log "in the new primary: $present of $count; events stream: $(redis XLEN siwa:events) entries (4 + $count, each jti once)"
  ((present == count)) || stack_die "lost $((count - present)) notifications"
  [ "$(redis XLEN siwa:events)" = $((4 + count)) ] || stack_die "the stream does not hold each notification once"
  curl -sS --cacert "$ca" "https://localhost:$https_port/metrics" |
    grep -E '^siwa_(redis_sentinel_discoveries|redis_failovers|spool_replayed|redis_replica_shortfalls)_total ' |
    sed 's/^/  /'

  step "the old primary comes back: the sentinels make it a replica of the new one"
  # shellcheck disable=SC2086 # the saved arguments are plain words
  stack_start_redis "redis-node-$old_index" "$HA_OLD_PORT" "$HA_NODE_DIR/node-$old_index" \
    "$logs/redis-node-$old_index.log" --save "" ${HA_NODE_ARGS[$old_index]}
  stack_wait_until 30 ha_old_is_replica || stack_die "127.0.0.1:$HA_OLD_PORT did not become a replica within 30 s"
  ha_roles
}
