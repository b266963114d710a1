# Shared shell library of the benchmark scripts (Benchmarks/*/run.sh,
# Benchmarks/bench.sh): source it after `set -euo pipefail` and `cd` to the
# repository root.
#
#   bench_init NAME          work directory $work, process list, cleanup on exit
#   bench_require TOOL…      exit 1 with the apt-get line when a tool is missing
#   bench_binaries           ROOST_BIN, ROOST_BENCH_BIN (default: the release build)
#   start_nginx WORKERS STATUS BODY   nginx answering every path with STATUS BODY
#                            (GET /healthz: 200 {"status":"ok"}) -> server_pid, port
#   start_roost BINARY POLICY [ARGS…] roost serve on a fresh data dir -> server_pid, port
#   roost_app_key [MAX_DEVICES] [CAPABILITIES]  an app and a live secret key -> ROOST_APP, ROOST_KEY
#   stop_server / stop_pid PID        SIGTERM, up to 10 s, then SIGKILL
#   free_port, median, ratio, ctx_switches PID, cpu_ticks PID, system_ticks PID
#
# Everything listens on 127.0.0.1; every process started is stopped by its PID
# when the script ends (never by name).

export ROOST_ADMIN_KEY=${ROOST_ADMIN_KEY:-bench-admin-key-0123456789abcdef}
pids=()
server_pid=""
port=""

bench_init() { # NAME
  work=$(mktemp -d "${TMPDIR:-/var/tmp}/roost-bench-$1.XXXXXX")
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${work:-}" ] && rm -rf "$work"
}

bench_require() { # TOOL…
  local tool missing=""
  for tool in "$@"; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
  if [ -n "$missing" ]; then
    local packages=${missing//nginx/nginx-light}
    echo "missing:$missing (Debian: sudo apt-get install -y${packages})"
    exit 1
  fi
}

BIN_DIR=""
bench_bin_dir() { [ -n "$BIN_DIR" ] || BIN_DIR=$(swift build -c release --show-bin-path); echo "$BIN_DIR"; }

bench_binaries() {
  ROOST_BIN=${ROOST_BIN:-$(bench_bin_dir)/roost}
  ROOST_BENCH_BIN=${ROOST_BENCH_BIN:-$(bench_bin_dir)/roost-bench}
  local b
  for b in "$ROOST_BIN" "$ROOST_BENCH_BIN"; do
    [ -x "$b" ] || { echo "not an executable: $b (build: make release-harness)"; exit 1; }
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
median() { sort -n | awk 'NF && $1 != "-" {a[++n]=$1} END {if (n==0) print "-"; else print (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a=="-" || b=="-" || b==0) print "-"; else printf "%.2f", a/b }'; }
# Process $1 and its live children (nginx's workers under its master; roost has none).
process_tree() { echo "$1"; pgrep -P "$1" 2>/dev/null || true; }
# Sum of voluntary + nonvoluntary context switches over the live threads of $1 and its children.
ctx_switches() {
  local p
  for p in $(process_tree "$1"); do cat /proc/"$p"/task/*/status 2>/dev/null; done |
    awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s+=$2} END {print s+0}'
}
# /proc/PID/stat of process $1 and of its live children, one line each.
tree_stat() {
  local p
  for p in $(process_tree "$1"); do cat /proc/"$p"/stat 2>/dev/null; done
}
# User + system CPU ticks of process $1 and its live children (every thread, exited ones included).
cpu_ticks() { tree_stat "$1" | awk '{s += $14 + $15} END {print s+0}'; }
# System (kernel) CPU ticks of process $1 and its live children.
system_ticks() { tree_stat "$1" | awk '{s += $15} END {print s+0}'; }

stop_pid() { # PID: SIGTERM, up to 10 s, then SIGKILL
  local p=$1
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
stop_server() { [ -n "$server_pid" ] && stop_pid "$server_pid"; server_pid=""; }

# nginx with WORKERS workers (1: master_process off) answering every path with
# STATUS and BODY (application/json), GET /healthz with 200 {"status":"ok"}.
start_nginx() { # WORKERS STATUS BODY
  local workers=$1 status=$2 body=$3 master="" reuse=""
  port=$(free_port)
  rm -rf "$work/nginx"; mkdir -p "$work/nginx"
  [ "$workers" = 1 ] && master="master_process off;"
  [ "$workers" != 1 ] && reuse=" reuseport"
  cat > "$work/nginx/nginx.conf" <<CONF
worker_processes $workers;
$master
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log crit;
daemon off;
events { worker_connections 4096; use epoll; }
http {
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path $work/nginx;
  proxy_temp_path $work/nginx; fastcgi_temp_path $work/nginx; uwsgi_temp_path $work/nginx; scgi_temp_path $work/nginx;
  server {
    listen 127.0.0.1:$port$reuse;
    default_type application/json;
    location = /healthz { return 200 '{"status":"ok"}'; }
    location / { return $status '$body'; }
  }
}
CONF
  nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" 2> "$work/nginx/stderr" &
  server_pid=$!; pids+=("$server_pid")
  for _ in $(seq 100); do curl -s -o /dev/null "127.0.0.1:$port/healthz" && return 0; sleep 0.1; done
  echo "nginx did not start"; cat "$work/nginx/stderr"; exit 1
}

# roost serve BINARY on a fresh data directory with --fsync POLICY and ARGS;
# its stdout and stderr go to $work/roost.out and $work/roost.err.
start_roost() { # BINARY POLICY [ARGS…]
  local binary=$1 policy=$2
  shift 2
  rm -rf "$work/data" "$work/roost.out" "$work/roost.err"
  "$binary" serve --listen 127.0.0.1:0 --data "$work/data" --fsync "$policy" "$@" > "$work/roost.out" 2> "$work/roost.err" &
  server_pid=$!; pids+=("$server_pid")
  for _ in $(seq 300); do grep -q "listening on" "$work/roost.out" 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/roost.out")
  [ -n "$port" ] || { echo "roost did not start: $binary"; cat "$work/roost.err"; exit 1; }
}

# An app (max_devices_per_person MAX_DEVICES, default 1000) and a live secret
# key with CAPABILITIES (default devices:write) on the roost at $port.
roost_app_key() { # [MAX_DEVICES] [CAPABILITIES]
  local max=${1:-1000} capabilities=${2:-'"devices:write"'}
  ROOST_APP=$(curl -sf -X POST "127.0.0.1:$port/v1/apps" -H "Authorization: Bearer $ROOST_ADMIN_KEY" \
    -d "{\"name\":\"bench\",\"settings\":{\"max_devices_per_person\":$max}}" | sed -n 's/^{"id":\([0-9]*\),.*/\1/p')
  [ -n "$ROOST_APP" ] || { echo "could not create an app"; exit 1; }
  ROOST_KEY=$(curl -sf -X POST "127.0.0.1:$port/v1/apps/$ROOST_APP/keys" -H "Authorization: Bearer $ROOST_ADMIN_KEY" \
    -d "{\"kind\":\"secret\",\"capabilities\":[$capabilities]}" | sed -n 's/.*"key":"\([^"]*\)".*/\1/p')
  [ -n "$ROOST_KEY" ] || { echo "could not create a key"; exit 1; }
  export ROOST_APP ROOST_KEY
}
