#!/usr/bin/env bash
# Registrations per second through HTTP under each --fsync policy, and
# records per fdatasync (group commit), measured in the same run.
#
#   Benchmarks/durability/run.sh [SECONDS] [ROUNDS]
#
# For each round and each policy (always, everysec, never) it starts a fresh
# release `roost serve` on 127.0.0.1 (data in a temp dir on the same disk),
# creates an app and a secret key, drives POST /v1/devices with wrk (2 threads,
# 64 connections, a new random token per request), stops roost with SIGTERM
# and reads the group-commit counters it prints. Prints medians and the ratio
# always/never. Needs wrk (Debian: apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_RUN=${1:-10}
ROUNDS=${2:-3}
command -v wrk >/dev/null || { echo "missing wrk: sudo apt-get install -y wrk"; exit 1; }
BIN=${ROOST_BIN:-$(swift build -c release --show-bin-path)/roost}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/roost-bench-durability.XXXXXX")
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export ROOST_ADMIN_KEY=bench-admin-key-0123456789abcdef

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A rates per_sync
for round in $(seq "$ROUNDS"); do
  for policy in always everysec never; do
    rm -rf "$work/data" "$work/out" "$work/err"
    "$BIN" serve --listen 127.0.0.1:0 --data "$work/data" --fsync "$policy" > "$work/out" 2> "$work/err" &
    pid=$!
    for _ in $(seq 100); do grep -q "listening on" "$work/out" 2>/dev/null && break; sleep 0.1; done
    port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/out")
    curl -s -X POST "127.0.0.1:$port/v1/apps" -H "Authorization: Bearer $ROOST_ADMIN_KEY" \
      -d '{"name":"bench","settings":{"max_devices_per_person":1000}}' > /dev/null
    export ROOST_KEY=$(curl -s -X POST "127.0.0.1:$port/v1/apps/1/keys" -H "Authorization: Bearer $ROOST_ADMIN_KEY" \
      -d '{"kind":"secret","capabilities":["devices:write"]}' | sed -n 's/.*"key":"\([^"]*\)".*/\1/p')
    rate=$(wrk -t2 -c64 -d"${SECONDS_PER_RUN}s" -s Benchmarks/durability/register.lua "http://127.0.0.1:$port" \
      | awk '/Requests\/sec/ {print $2}')
    kill -TERM "$pid"; wait "$pid" || true; pid=""
    ratio=$(sed -n 's/.*wal.records_per_fdatasync=\([0-9]*\).*/\1/p' "$work/err")
    rates[$policy]+="$rate "
    per_sync[$policy]+="${ratio:-0} "
    echo "round $round $policy: $rate registrations/s, ${ratio:-?} records per fdatasync"
  done
done
echo
printf "%-9s %16s %22s\n" policy "median req/s" "records per fdatasync"
for policy in always everysec never; do
  printf "%-9s %16s %22s\n" "$policy" "$(echo ${rates[$policy]} | tr ' ' '\n' | median)" \
    "$(echo ${per_sync[$policy]} | tr ' ' '\n' | median)"
done
a=$(echo ${rates[always]} | tr ' ' '\n' | median); n=$(echo ${rates[never]} | tr ' ' '\n' | median)
echo "always/never = $(awk -v a="$a" -v b="$n" 'BEGIN{printf "%.2f", a/b}')"
