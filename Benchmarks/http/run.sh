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
. Benchmarks/lib.sh
SECONDS_PER_RUN=${1:-10}
ROUNDS=${2:-3}
CONNECTIONS=64
THREADS=2
bench_require wrk nginx curl python3
bench_binaries
bench_init http

# --- nginx: 2 workers (one per core, like Roost's loops), fixed answers.
start_nginx 2 200 '{"id":1,"name":"Example","created_at":"2026-11-29T00:00:00.000Z","settings":{"max_devices_per_person":10,"require_known_person":false},"counts":{"keys":0}}'
NGINX_PORT=$port

# --- Roost, release build, operator key from the environment.
start_roost "$ROOST_BIN" always
ROOST_PORT=$port

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

run_wrk() { # url [script] -> requests/s; exits when any answer was not 2xx
  local extra=()
  [ -n "${2:-}" ] && extra=(-s "$2")
  timeout $((SECONDS_PER_RUN + 30)) wrk -t$THREADS -c$CONNECTIONS -d"${SECONDS_PER_RUN}s" "${extra[@]}" "$1" \
    > "$work/wrk.out" 2>&1 || true
  if grep -q "Non-2xx or 3xx responses" "$work/wrk.out"; then
    echo "FAILED: $1 answered non-2xx: $(grep 'Non-2xx' "$work/wrk.out")" >&2; exit 1
  fi
  awk '/Requests\/sec/ {print $2}' "$work/wrk.out"
}
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
