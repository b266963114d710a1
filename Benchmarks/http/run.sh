#!/usr/bin/env bash
# HTTP front benchmark: Roost against nginx (a minimal fixed-response server),
# measured in the same run on the same machine with the same wrk settings.
#
#   Benchmarks/http/run.sh [SECONDS] [ROUNDS]
#
# For each round and each server it runs wrk (2 threads, 64 keep-alive
# connections) on:
#   healthz  GET /healthz
#   json     PATCH /v1/apps/1 with a 90-byte JSON body (POST /v1/apps-sized):
#            Roost authenticates the operator key (SHA-256), parses and validates the
#            JSON, reads the app from the catalog and renders it (settings
#            unchanged, so no engine or disk work); nginx answers a fixed body.
# It prints requests/s per round and the median, and the ratio Roost/nginx.
# Needs wrk and nginx (Debian: apt-get install wrk nginx-light); everything
# listens on 127.0.0.1 and is stopped by PID when the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_RUN=${1:-10}
ROUNDS=${2:-3}
CONNECTIONS=64
THREADS=2
for tool in wrk nginx; do
  command -v "$tool" >/dev/null || { echo "missing $tool: sudo apt-get install -y wrk nginx-light"; exit 1; }
done

work=$(mktemp -d /tmp/roost-bench-http.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# --- nginx: 2 workers (one per core, like Roost's loops), fixed answers.
NGINX_PORT=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 2;
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
    listen 127.0.0.1:$NGINX_PORT reuseport;
    default_type application/json;
    location = /healthz { return 200 '{"status":"ok"}'; }
    location / { return 200 '{"id":1,"name":"Example","created_at":"2026-11-29T00:00:00.000Z","settings":{"max_devices_per_person":10,"require_known_person":false},"counts":{"keys":0}}'; }
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=($!)

# --- Roost, release build, operator key from the environment.
BIN=$(swift build -c release --show-bin-path)/roost
export ROOST_ADMIN_KEY=bench-admin-key-0123456789abcdef
"$BIN" serve --listen 127.0.0.1:0 --data "$work/data" > "$work/roost.out" 2> "$work/roost.err" &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$work/roost.out" 2>/dev/null && break; sleep 0.1; done
ROOST_PORT=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/roost.out")
[ -n "$ROOST_PORT" ] || { echo "roost did not start"; cat "$work/roost.err"; exit 1; }
for _ in $(seq 50); do curl -s "127.0.0.1:$NGINX_PORT/healthz" >/dev/null && break; sleep 0.1; done

curl -s -X POST "127.0.0.1:$ROOST_PORT/v1/apps" -H "Authorization: Bearer $ROOST_ADMIN_KEY" \
  -d '{"name":"Example"}' > /dev/null
BODY='{"name":"Example","settings":{"max_devices_per_person":10,"require_known_person":false}}'
cat > "$work/json.lua" <<LUA
wrk.method = "PATCH"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $ROOST_ADMIN_KEY"
LUA
check=$(curl -s -o /dev/null -w '%{http_code}' -X PATCH "127.0.0.1:$ROOST_PORT/v1/apps/1" \
  -H "Authorization: Bearer $ROOST_ADMIN_KEY" -d "$BODY")
[ "$check" = "200" ] || { echo "roost PATCH answered $check"; exit 1; }

run_wrk() { # url [script] -> requests/s
  local extra=()
  [ -n "${2:-}" ] && extra=(-s "$2")
  wrk -t$THREADS -c$CONNECTIONS -d"${SECONDS_PER_RUN}s" "${extra[@]}" "$1" | awk '/Requests\/sec/ {print $2}'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A results
for round in $(seq "$ROUNDS"); do
  for server in nginx roost; do
    port=$NGINX_PORT; [ "$server" = roost ] && port=$ROOST_PORT
    h=$(run_wrk "http://127.0.0.1:$port/healthz")
    j=$(run_wrk "http://127.0.0.1:$port/v1/apps/1" "$work/json.lua")
    results[$server-healthz]+="$h "
    results[$server-json]+="$j "
    echo "round $round $server healthz=$h json=$j"
  done
done
echo
printf "%-8s %-10s %12s\n" case server "median req/s"
for case in healthz json; do
  n=$(echo ${results[nginx-$case]} | tr ' ' '\n' | median)
  r=$(echo ${results[roost-$case]} | tr ' ' '\n' | median)
  printf "%-8s %-10s %12s\n" "$case" nginx "$n"
  printf "%-8s %-10s %12s   roost/nginx = %s\n" "$case" roost "$r" "$(awk -v a="$r" -v b="$n" 'BEGIN{printf "%.2f", a/b}')"
done
