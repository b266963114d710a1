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
. Benchmarks/lib.sh
SECONDS_PER_RUN=${1:-10}
ROUNDS=${2:-3}
bench_require wrk curl
BIN=${ROOST_BIN:-$(bench_bin_dir)/roost}
[ -x "$BIN" ] || { echo "not an executable: $BIN (build: swift build -c release --product roost)"; exit 1; }
bench_init durability

declare -A rates per_sync
failed=0
for round in $(seq "$ROUNDS"); do
  for policy in always everysec never; do
    start_roost "$BIN" "$policy"
    roost_app_key 1000
    timeout $((SECONDS_PER_RUN + 30)) wrk -t2 -c64 -d"${SECONDS_PER_RUN}s" -s Benchmarks/durability/register.lua \
      "http://127.0.0.1:$port" > "$work/wrk.out" 2>&1 || true
    rate=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.out")
    non2xx=$(awk '/Non-2xx or 3xx responses/ {print $NF}' "$work/wrk.out")
    stop_server
    # An answer other than 2xx (a wrong key, a full disk) is not a registration.
    if [ -z "$rate" ] || [ -n "$non2xx" ]; then
      echo "round $round $policy: FAILED (${non2xx:-no result} non-2xx answers; not counted)"; failed=1; continue
    fi
    ratio=$(sed -n 's/.*wal.records_per_fdatasync=\([0-9]*\).*/\1/p' "$work/roost.err")
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
exit $failed
