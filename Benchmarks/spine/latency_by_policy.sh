#!/usr/bin/env bash
# What the disk and the CPU each add to a registration's latency (issue 25's
# p99 target): one open-loop run (`roost-bench load`, the spine's load:
# tokens from 1M, people from 200k, 64 connections) per POLICY@RATE, each
# on a fresh `roost serve --fsync POLICY`, one after the other.
#
#   Benchmarks/spine/latency_by_policy.sh SECONDS POLICY@RATE…
#   e.g. Benchmarks/spine/latency_by_policy.sh 5 always@20000 never@20000 always@10000 never@10000
#
# Prints per run the achieved rate, p50/p99/p99.9 from the intended send
# time, the generator's own send delay (p99) and the server's service time
# (p99). `never` at the rate of an `always` run shows what the CPU alone
# (loops, threads and the generator sharing the cores) adds; the difference
# is the log's fdatasync path. ROOST_BIN and ROOST_BENCH_BIN pick the
# binaries (default: the release build). Stops what it started, by PID.
# Each line also shows the log's group commits during the run, from
# `/metrics` before and after it: fdatasyncs per second, their mean time,
# and records per fdatasync.
set -euo pipefail
cd "$(dirname "$0")/../.."
source Benchmarks/lib.sh
bench_init latency
source Benchmarks/spine/measure.sh
bench_binaries
[ $# -ge 2 ] || { echo "usage: $0 SECONDS POLICY@RATE…"; exit 2; }
SECONDS_PER_RUN=$1
shift
# fdatasyncs, their seconds and the records they covered, from /metrics.
wal_figures() {
  curl -sf "127.0.0.1:$port/metrics" -H "Authorization: Bearer $ROOST_ADMIN_KEY" | awk '
    /^roost_wal_fsync_duration_seconds_count / {n=$2} /^roost_wal_fsync_duration_seconds_sum / {t=$2}
    /^roost_wal_records_per_fsync_sum / {r=$2} END {print n+0, t+0, r+0}'
}
for spec in "$@"; do
  policy=${spec%@*}
  rate=${spec#*@}
  start_spine_roost "$ROOST_BIN" "$policy"
  wal_before=$(wal_figures)
  set +e
  timeout $((SECONDS_PER_RUN + 60)) "$ROOST_BENCH_BIN" load --url "http://127.0.0.1:$port" --key "$ROOST_KEY" \
    --rate "$rate" --seconds "$SECONDS_PER_RUN" --connections 64 --tokens 1000000 --people 200000 \
    --mix register=1 --android 0 --tags 0 --quiet > "$work/load.out" 2> "$work/load.err"
  status=$?
  set -e
  wal_after=$(wal_figures)
  stop_server
  result=$(grep '^result ' "$work/load.out" || true)
  if [ "$status" != 0 ] || [ -z "$result" ]; then
    echo "$spec: FAILED (exit $status: $(tr '\n' ' ' < "$work/load.err"))"
    continue
  fi
  value() { echo "$result" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
  echo "$spec: achieved $(value rate)/s, p50 $(value p50_us) µs, p99 $(value p99_us) µs, p99.9 $(value p999_us) µs;" \
    "send delay p99 $(value send_delay_p99_us) µs, service p99 $(value service_p99_us) µs; generator CPU $(value cpu_pct) %;" \
    "failed $(value failed), unexpected $(value unexpected);" \
    "$(echo "$wal_before $wal_after" | awk -v s="$SECONDS_PER_RUN" '{n=$4-$1; t=$5-$2; r=$6-$3;
      if (n > 0) printf "fdatasyncs %.0f/s, mean %.0f µs, %.1f records each", n/s, t/n*1e6, r/n; else print "no fdatasync"}')"
done
