# shellcheck shell=bash
# The local-stack harness shared by scripts/run-local, scripts/bench-e2e,
# scripts/bench-serve and the deployment tests (deploy-tests): processes, free
# ports, the development certificates, the nginx site rendered for loopback
# (redis-server, `siwa-endpoint serve`, nginx with the shipped site files), the one
# way serve is started (stack_start_endpoint, stack_exec_endpoint) and the one way
# redis-server is (stack_start_redis), every file in one directory. Sourced, not run. Nothing here touches /etc, /run or /var: nginx runs
# from its own prefix, Redis from its own --dir, serve from its own env file.
#
# Every process started goes into STACK_PIDS (with its name in STACK_NAMES), so
# stack_stop_all can stop exactly those, newest first.

STACK_PIDS=()
STACK_NAMES=()
# The name messages start with: the sourcing script's, unless it sets its own.
STACK_PROGRAM=${STACK_PROGRAM:-${0##*/}}

stack_log() { printf '%s\n' "$*"; }
stack_die() {
  printf '%s: %s\n' "$STACK_PROGRAM" "$*" >&2
  exit 1
}

# The ports stack_free_port handed out in this shell (and the scripts it runs), one a
# line: never handed out twice, though the first user may not have bound it yet.
STACK_PORTS_GIVEN=${STACK_PORTS_GIVEN:-${TMPDIR:-/tmp}/siwa-stack-ports.$$}
export STACK_PORTS_GIVEN

# A loopback TCP port that nobody is bound to right now and that was not handed out
# before in this shell, at most 55535: a Redis cluster node listens on its port + 10000
# for its cluster bus.
stack_free_port() {
  python3 - "$STACK_PORTS_GIVEN" <<'EOF'
import fcntl, socket, sys
with open(sys.argv[1], "a+") as given:
    fcntl.flock(given, fcntl.LOCK_EX)
    given.seek(0)
    taken = {int(line) for line in given.read().split()}
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port <= 55535 and port not in taken:
            given.write(f"{port}\n")
            print(port)
            sys.exit(0)
sys.exit("no free loopback port at or below 55535 not handed out before")
EOF
}

# True (0) when something is bound to PORT on 127.0.0.1 or ::1. SO_REUSEADDR, as
# nginx sets it, so a connection left in TIME_WAIT does not count as busy.
stack_port_busy() {
  python3 - "$1" <<'EOF'
import socket, sys
port = int(sys.argv[1])
for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    try:
        probe = socket.socket(family)
    except OSError:
        continue
    with probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            # No IPv6 on this machine is not "busy".
            if error.errno in (97, 99):
                continue
            sys.exit(0)
sys.exit(1)
EOF
}

# True when this machine can listen on ::1 (some containers have no IPv6).
stack_has_ipv6_loopback() {
  python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null
}

# Polls COMMAND every 0.1 s until it succeeds or SECONDS pass; 1 on timeout.
stack_wait_until() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# Test and development certificates, made in one place for run-local, the benchmarks,
# the deployment tests and the Swift tests. Never for production: the CA key lies beside
# them.
#
# stack_make_ca DIR [DAYS] [CN]: DIR/ca.key and DIR/ca.pem, a CA allowed to sign certificates.
stack_make_ca() {
  local dir=$1 days=${2:-30} cn=${3:-siwa-endpoint test CA}
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$days" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" -subj "/CN=$cn" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 600 "$dir/ca.key"
}

# The extensions of a leaf certificate naming SAN (DIR/NAME.ext); USAGE its extended key
# usage (serverAuth by default; clientAuth for a TLS client, serverAuth,clientAuth for both).
stack_leaf_extensions() {
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=${4:-serverAuth}" "subjectAltName=$3" >"$1/$2.ext"
}

# stack_make_leaf DIR NAME [KEY] [DIGEST] [DAYS] [SAN]: DIR/NAME.key and DIR/NAME.pem, a
# server certificate for CN=localhost signed by DIR's CA. KEY: rsa (2048, the default),
# rsa1024 (too weak for ATS) or ec (P-256); DIGEST: the CA's signature hash (sha256; sha1
# is too weak for ATS); DAYS: validity from now (90: longer than check-endpoint's 30-day
# warning); SAN: the names it holds (DNS:localhost,IP:127.0.0.1,IP:::1: the names curl
# and check-endpoint verify); USAGE: its extended key usage (serverAuth; see
# stack_leaf_extensions).
stack_make_leaf() {
  local dir=$1 name=$2 key=${3:-rsa} digest=${4:-sha256} days=${5:-90}
  local san=${6:-DNS:localhost,IP:127.0.0.1,IP:::1} usage=${7:-serverAuth}
  local algorithm
  case $key in
    rsa) algorithm=(-newkey rsa:2048) ;;
    rsa1024) algorithm=(-newkey rsa:1024) ;;
    ec) algorithm=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1) ;;
    *) stack_die "stack_make_leaf: unknown key kind $key" ;;
  esac
  stack_leaf_extensions "$dir" "$name" "$san" "$usage"
  openssl req -new "${algorithm[@]}" -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "/CN=localhost" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$days" "-$digest" -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
  chmod 600 "$dir/$name.key"
}

# stack_make_expired_leaf DIR NAME [SAN]: as stack_make_leaf, but valid only in January
# 2020. OpenSSL 3.0's `x509 -req` takes no dates; `openssl ca` takes -startdate/-enddate.
stack_make_expired_leaf() {
  local dir=$1 name=$2 san=${3:-DNS:localhost,IP:127.0.0.1,IP:::1}
  local database=$dir/ca-db
  mkdir -p "$database"
  : >"$database/index.txt"
  echo 1000 >"$database/serial"
  stack_leaf_extensions "$dir" "$name" "$san"
  printf '%s\n' "[ca]" "default_ca = test_ca" "[test_ca]" "database = $database/index.txt" \
    "new_certs_dir = $database" "serial = $database/serial" "default_md = sha256" "policy = any_name" \
    "unique_subject = no" "copy_extensions = none" "[any_name]" "commonName = supplied" >"$dir/ca.cnf"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "/CN=localhost" 2>/dev/null
  openssl ca -batch -notext -config "$dir/ca.cnf" -cert "$dir/ca.pem" -keyfile "$dir/ca.key" \
    -in "$dir/$name.csr" -out "$dir/$name.pem" -startdate 20200101000000Z -enddate 20200201000000Z \
    -extfile "$dir/$name.ext" 2>/dev/null
  chmod 600 "$dir/$name.key"
}

# A development CA and two localhost certificates signed by it (SHA-256), as the
# shipped site serves them: RSA 2048 and ECDSA P-256, with the names curl and
# check-endpoint verify: localhost, 127.0.0.1, ::1. Writes DIR/ca.pem, DIR/ca.key,
# DIR/localhost.pem, DIR/localhost.key, DIR/localhost-ecdsa.pem, DIR/localhost-ecdsa.key.
stack_make_dev_pki() {
  stack_make_ca "$1" 30 "siwa-endpoint run-local development CA"
  stack_make_leaf "$1" localhost
  stack_make_leaf "$1" localhost-ecdsa ec
}

# Replaces each occurrence of OLD in the variable named by $1 with NEW, after
# checking that OLD occurs exactly COUNT times: if the shipped file changes shape,
# rendering stops loudly instead of running something else.
stack_replace() {
  local -n text_ref=$1
  local old=$2 new=$3 count=$4
  local without=${text_ref//"$old"/}
  local found=$(((${#text_ref} - ${#without}) / ${#old}))
  ((found == count)) || stack_die "shipped site file: '$old' occurs $found times, expected $count"
  text_ref=${text_ref//"$old"/"$new"}
}

# Renders the shipped nginx files into CONF_DIR for a loopback run, nginx.conf included:
#   stack_render_nginx REPO CONF_DIR LOG_DIR TEMP_DIR CERT KEY HTTPS_PORT HTTP_PORT
#                      SOCKET JWKS_PORT JWKS_FILE IPV6(yes|no)
# The site (stack_render_site) answers as localhost; nginx.conf
# (stack_render_nginx_conf) adds the test JWKS server.
stack_render_nginx() {
  local repo=$1 conf=$2 logs=$3 temp=$4 cert=$5 key=$6 https_port=$7 http_port=$8
  local socket=$9 jwks_port=${10} jwks_file=${11} ipv6=${12} ec_cert=${13:-} ec_key=${14:-}
  stack_render_site "$repo" "$conf" "$logs" "$cert" "$key" "$https_port" "$http_port" "$socket" "$ipv6" localhost \
    "$ec_cert" "$ec_key"
  stack_render_nginx_conf "$conf" "$logs" "$temp" "$jwks_port" "$jwks_file" "$cert" "$key"
}

# Renders the shipped site files into CONF_DIR: the one renderer of the site, which
# scripts/run-local, scripts/bench-e2e and the deployment tests (deploy-tests) use.
#   stack_render_site REPO CONF_DIR LOG_DIR CERT KEY HTTPS_PORT HTTP_PORT SOCKET
#                     IPV6(yes|no) [SERVER_NAME [EC_CERT EC_KEY]]
# CERT/KEY take the place of the RSA pair, EC_CERT/EC_KEY of the ECDSA pair; without
# EC_CERT the ECDSA pair is removed (CERT alone is served, whatever its kind).
# The site file keeps every directive it ships with; only the listen addresses, the
# certificate, the log paths (LOG_DIR/siwa-endpoint.access.log and .error.log), the
# upstream socket and, when SERVER_NAME is given, the server name change (without
# it the shipped name stays, so its redirect can be checked).
stack_render_site() {
  local repo=$1 conf=$2 logs=$3 cert=$4 key=$5 https_port=$6 http_port=$7
  local socket=$8 ipv6=$9 server_name=${10:-siwa.example.com} ec_cert=${11:-} ec_key=${12:-}
  mkdir -p "$conf" "$logs"

  local site
  site=$(<"$repo/nginx/siwa-endpoint.conf")
  local listen6_tls="" listen6_plain=""
  if [ "$ipv6" = yes ]; then
    listen6_tls="listen [::1]:$https_port ssl default_server;"
    listen6_plain="listen [::1]:$http_port;"
  fi
  stack_replace site "listen 443 ssl default_server;" "listen 127.0.0.1:$https_port ssl default_server;" 1
  stack_replace site "listen [::]:443 ssl default_server;" "$listen6_tls" 1
  stack_replace site "listen 80;" "listen 127.0.0.1:$http_port;" 1
  stack_replace site "listen [::]:80;" "$listen6_plain" 1
  stack_replace site "server_name siwa.example.com;" "server_name $server_name;" 2
  stack_replace site "ssl_certificate /etc/ssl/siwa-endpoint/fullchain.pem;" "ssl_certificate $cert;" 1
  stack_replace site "ssl_certificate_key /etc/ssl/siwa-endpoint/privkey.pem;" "ssl_certificate_key $key;" 1
  local ec_cert_line="" ec_key_line=""
  if [ -n "$ec_cert" ]; then
    ec_cert_line="ssl_certificate $ec_cert;"
    ec_key_line="ssl_certificate_key $ec_key;"
  fi
  stack_replace site "ssl_certificate /etc/ssl/siwa-endpoint/ecdsa-fullchain.pem;" "$ec_cert_line" 1
  stack_replace site "ssl_certificate_key /etc/ssl/siwa-endpoint/ecdsa-privkey.pem;" "$ec_key_line" 1
  stack_replace site "access_log /var/log/nginx/siwa-endpoint.access.log siwa_json;" \
    "access_log $logs/siwa-endpoint.access.log siwa_json;" 2
  stack_replace site "error_log /var/log/nginx/siwa-endpoint.error.log warn;" \
    "error_log $logs/siwa-endpoint.error.log warn;" 1
  printf '%s\n' "$site" >"$conf/siwa-endpoint.conf"

  local upstream
  upstream=$(<"$repo/nginx/siwa-endpoint-upstream.conf")
  stack_replace upstream "unix:/run/siwa-endpoint/fcgi.sock" "unix:$socket" 1
  printf '%s\n' "$upstream" >"$conf/siwa-endpoint-upstream.conf"

  cp "$repo/nginx/siwa-endpoint-http.conf" "$conf/siwa-endpoint-http.conf"
  # The site includes Debian's fastcgi_params by a relative name.
  cp /etc/nginx/fastcgi_params "$conf/fastcgi_params"
}

# Writes CONF_DIR/nginx.conf around the rendered site (pid TEMP_DIR/nginx.pid, its
# own logs LOG_DIR/nginx-error.log and nginx-access.log):
#   stack_render_nginx_conf CONF_DIR LOG_DIR TEMP_DIR [JWKS_PORT JWKS_FILE CERT KEY]
# It mirrors Debian's nginx.conf where it matters (the http-context file first, then
# the site; TLS 1.0/1.1 enabled in http, which the site must override). With
# JWKS_PORT it adds one more server: the test JWKS over HTTPS at
# https://127.0.0.1:JWKS_PORT/auth/keys, standing in for Apple's.
stack_render_nginx_conf() {
  local conf=$1 logs=$2 temp=$3 jwks_port=${4:-} jwks_file=${5:-} cert=${6:-} key=${7:-}
  mkdir -p "$conf" "$logs" "$temp"

  # As root, nginx's workers would otherwise switch to "nobody" and could not
  # enter this private directory or connect to the 0660 socket.
  local user_line=""
  if [ "$(id -u)" -eq 0 ]; then
    user_line="user root;"
  fi
  local jwks_server=""
  if [ -n "$jwks_port" ]; then
    jwks_server="
    # The test JWKS, served over HTTPS under the development CA: serve fetches it
    # as it would fetch https://appleid.apple.com/auth/keys.
    server {
        listen 127.0.0.1:$jwks_port ssl;
        server_name localhost;
        ssl_certificate $cert;
        ssl_certificate_key $key;
        access_log $logs/jwks-access.log;
        location = /auth/keys {
            default_type application/json;
            alias $jwks_file;
        }
        location / { return 404; }
    }"
  fi
  cat >"$conf/nginx.conf" <<EOF
# Rendered by scripts/lib/local-stack.sh for a loopback run; not for production.
$user_line
worker_processes 1;
daemon off;
pid $temp/nginx.pid;
error_log $logs/nginx-error.log warn;
events { worker_connections 256; }
http {
    ssl_protocols TLSv1 TLSv1.1 TLSv1.2 TLSv1.3;
    access_log $logs/nginx-access.log;
    client_body_temp_path $temp/body;
    fastcgi_temp_path $temp/fastcgi;
    proxy_temp_path $temp/proxy;
    uwsgi_temp_path $temp/uwsgi;
    scgi_temp_path $temp/scgi;

    include siwa-endpoint-http.conf;
    include siwa-endpoint.conf;
$jwks_server
}
EOF
}

# Starts NAME in the background with its output on LOG and records its pid:
#   stack_start NAME LOG COMMAND...
stack_start() {
  local name=$1 log=$2
  shift 2
  "$@" >>"$log" 2>&1 &
  STACK_PIDS+=("$!")
  STACK_NAMES+=("$name")
}

# The pid of the process started as NAME.
stack_pid() {
  local i
  for i in "${!STACK_NAMES[@]}"; do
    if [ "${STACK_NAMES[$i]}" = "$1" ]; then
      printf '%s\n' "${STACK_PIDS[$i]}"
      return 0
    fi
  done
  return 1
}

# True while PID runs; a zombie (exited, not yet reaped) does not count, which
# `kill -0` alone would miss.
stack_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  # The state is the field after the command name, which is in parentheses.
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Stops one child: SIGTERM, then SIGKILL if it has not exited within SECONDS;
# then reaps it.
stack_stop_pid() {
  local pid=$1 seconds=$2
  local deadline=$((SECONDS + seconds))
  kill -TERM "$pid" 2>/dev/null || true
  while stack_alive "$pid" && ((SECONDS < deadline)); do
    sleep 0.1
  done
  if stack_alive "$pid"; then
    printf '%s: pid %s did not stop within %s s: killing it\n' "$STACK_PROGRAM" "$pid" "$seconds" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

# stack_forget_pid PID: drops PID (and its name) from STACK_PIDS once the caller has
# stopped or killed it on purpose, so stack_stop_all does not signal that number again
# (by then the kernel may have given it to another process). The one place that edits
# the lists besides stack_start and stack_stop_all.
stack_forget_pid() {
  local i pids=() names=()
  for i in "${!STACK_PIDS[@]}"; do
    if [ "${STACK_PIDS[$i]}" != "$1" ]; then
      pids+=("${STACK_PIDS[$i]}")
      names+=("${STACK_NAMES[$i]}")
    fi
  done
  # The ${x[@]+...} form: an empty array is "unbound" to `set -u` in older bash.
  STACK_PIDS=(${pids[@]+"${pids[@]}"})
  STACK_NAMES=(${names[@]+"${names[@]}"})
}

# ---- redis-server, the one way the scripts start it --------------------------------------
#
# stack_start_redis NAME PORT DIR LOG [CONFIG] [OPTION...]: redis-server on 127.0.0.1:PORT
# in the foreground (recorded as NAME, so stack_stop_all stops it), its files in DIR (made
# when missing), its log on LOG. CONFIG, when the first word is not an option, is a file
# read first (deploy/redis-siwa.conf, a sentinel's file); OPTIONs come after ours and win
# (--save "", --appendonly yes, --replicaof ..., --sentinel). Waits until it answers PING
# (NOAUTH counts: it is up), at most 10 s; dies with the log's last lines if it exits first
# or does not answer in time.
stack_start_redis() {
  local name=$1 port=$2 dir=$3 log=$4
  shift 4
  local config=()
  if (($#)) && [[ $1 != --* ]]; then
    config=("$1")
    shift
  fi
  mkdir -p "$dir"
  stack_start "$name" "$log" redis-server ${config[@]+"${config[@]}"} --bind 127.0.0.1 --port "$port" \
    --dir "$dir" --daemonize no --logfile "$log" "$@"
  local pid answer deadline=$((SECONDS + 10))
  pid=$(stack_pid "$name")
  while :; do
    answer=$(redis-cli -h 127.0.0.1 -p "$port" PING 2>/dev/null || true)
    # Another server may hold the port (ours then exits with "Address already in use"):
    # a PONG counts when the server answering is ours.
    case $answer in
      PONG)
        [ "$(redis-cli -h 127.0.0.1 -p "$port" INFO server 2>/dev/null | sed -n 's/^process_id:\([0-9]*\).*/\1/p')" \
          != "$pid" ] || return 0
        ;;
      NOAUTH*) ! stack_alive "$pid" || return 0 ;;
    esac
    stack_alive "$pid" || stack_die "redis-server $name exited at start: $(tail -n 5 "$log")"
    ((SECONDS < deadline)) || stack_die "redis-server $name did not answer within 10 s: $(tail -n 5 "$log")"
    sleep 0.1
  done
}

# ---- siwa-endpoint serve, the one way the scripts and the deployment tests start it ----
#
# stack_write_endpoint_env FILE NAME=VALUE...: serve's settings for a local run, one per
# line (what serve --env-file reads).
stack_write_endpoint_env() {
  local file=$1
  shift
  {
    printf '# siwa-endpoint serve settings for this local run (see: siwa-endpoint serve --help)\n'
    printf '%s\n' "$@"
  } >"$file"
}

# stack_exec_endpoint BINARY ENVFILE [ARGS...]: becomes `BINARY serve --env-file ENVFILE
# ARGS...` in a clean environment: serve lets SIWA_* variables win over the file and
# refuses unknown ones, so nothing from the caller's shell may leak in. The Python
# deployment tests start serve through this too, so the process they hold is serve.
stack_exec_endpoint() {
  local binary=$1 env_file=$2
  shift 2
  exec env -i "PATH=/usr/bin:/bin" "$binary" serve --env-file "$env_file" "$@"
}

# stack_start_endpoint BINARY ENVFILE LOG [SECONDS]: starts serve in the background
# (recorded as "serve", its output on LOG) and waits until its FastCGI socket
# (SIWA_FCGI_SOCKET in ENVFILE) accepts, at most SECONDS (default 20); dies with the
# log's last lines if serve exits or does not listen in time.
stack_start_endpoint() {
  local binary=$1 env_file=$2 log=$3 seconds=${4:-20}
  local socket
  socket=$(sed -n 's/^SIWA_FCGI_SOCKET=\(unix:\)\{0,1\}//p' "$env_file" | tail -n 1)
  [ -n "$socket" ] || stack_die "$env_file names no SIWA_FCGI_SOCKET"
  stack_start serve "$log" bash -c 'source "$0"; stack_exec_endpoint "$@"' "${BASH_SOURCE[0]}" \
    "$binary" "$env_file"
  local pid deadline=$((SECONDS + seconds))
  pid=$(stack_pid serve)
  until stack_socket_accepts "$socket"; do
    stack_alive "$pid" || stack_die "serve exited at start: $(tail -n 5 "$log")"
    ((SECONDS < deadline)) || stack_die "serve did not listen within $seconds s: $(tail -n 5 "$log")"
    sleep 0.1
  done
}

# stack_stop_endpoint [SECONDS]: stops the serve stack_start_endpoint started (SIGTERM,
# then SIGKILL after SECONDS, default 15) and forgets it, so another can be started.
stack_stop_endpoint() {
  local pid
  pid=$(stack_pid serve) || return 0
  stack_stop_pid "$pid" "${1:-15}"
  stack_forget_pid "$pid"
}

# True when a unix socket at PATH accepts a connection.
stack_socket_accepts() {
  python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.settimeout(1); s.connect(sys.argv[1])' "$1" \
    2>/dev/null
}

# Stops everything started, newest first (nginx before serve before Redis, so no
# request reaches a stopped responder). serve's own shutdown bound is 10 s.
stack_stop_all() {
  local i
  for ((i = ${#STACK_PIDS[@]} - 1; i >= 0; i--)); do
    stack_stop_pid "${STACK_PIDS[$i]}" 15
  done
  STACK_PIDS=()
  STACK_NAMES=()
  rm -f "$STACK_PORTS_GIVEN"
}
