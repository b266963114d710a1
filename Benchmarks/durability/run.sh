#!/usr/bin/env bash
# Registrations per second through HTTP under each --fsync policy, and
# records per fdatasync (group commit), measured in the same run.
#
#   Benchmarks/durability/run.sh [SECONDS] [ROUNDS]          (make bench-durability)
#
# For each round and each policy (always, everysec, never) it starts a fresh
# release `roost serve` on 127.0.0.1 (data in a temp dir on the same disk),
# drives it with `roost-bench load --setup` (its own app and key; register
# only, 64 connections, 1M tokens, 200k people: new devices and
# re-registrations, every answer's status checked against 201/200), stops
# roost with SIGTERM and reads the group-commit counters it prints. A run
# whose load failed (more than 0.1 % unexpected answers: a wrong key, a full
# disk) is FAILED and left out of the medians. Prints medians and the ratio
# always/never. Environment: ROOST_BIN, ROOST_BENCH_BIN (default: the release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
. Benchmarks/lib.sh
SECONDS_PER_RUN=${1:-10}
ROUNDS=${2:-3}
bench_require curl python3
bench_binaries
bench_init durability

declare -A rates per_sync
failed=0
for round in $(seq "$ROUNDS"); do
  for policy in always everysec never; do
    start_roost "$ROOST_BIN" "$policy"
    status=0
    timeout $((SECONDS_PER_RUN + 180)) "$ROOST_BENCH_BIN" load --url "http://127.0.0.1:$port" --setup \
      --admin-key "$ROOST_ADMIN_KEY" --connections 64 --seconds "$SECONDS_PER_RUN" --mix register=1 --android 0 \
      --tags 0 --tokens 1000000 --people 200000 --quiet > "$work/load.out" 2> "$work/load.err" || status=$?
    stop_server
    rate=$(sed -n 's/^result .*rate=\([0-9.]*\).*/\1/p' "$work/load.out")
    if [ "$status" != 0 ] || [ -z "$rate" ]; then
      echo "round $round $policy: FAILED (roost-bench load exit $status; not counted)"
      sed 's/^/  /' "$work/load.out" "$work/load.err" | grep -E 'UNEXPECTED|requests:|error' | head -5
      failed=1; continue
    fi
    ratio=$(sed -n 's/.*wal.records_per_fdatasync=\([0-9]*\).*/\1/p; s/.*"wal.records_per_fdatasync":\([0-9]*\).*/\1/p' \
      "$work/roost.err" | tail -1)
    rates[$policy]+="$rate "
    per_sync[$policy]+="${ratio:-0} "
    echo "round $round $policy: $rate registrations/s, ${ratio:-?} records per fdatasync"
  done
done
echo
printf "%-9s %16s %22s\n" policy "median req/s" "records per fdatasync"
for policy in always everysec never; do
  printf "%-9s %16s %22s\n" "$policy" "$(echo ${rates[$policy]:-} | tr ' ' '\n' | median)" \
    "$(echo ${per_sync[$policy]:-} | tr ' ' '\n' | median)"
done
a=$(echo ${rates[always]:-} | tr ' ' '\n' | median); n=$(echo ${rates[never]:-} | tr ' ' '\n' | median)
echo "always/never = $(ratio "$a" "$n")"
exit $failed
