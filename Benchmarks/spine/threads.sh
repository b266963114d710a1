#!/usr/bin/env bash
# Where a registration's server CPU is spent, by thread: user and system time
# of each thread of `roost serve --fsync POLICY` (default never) over SECONDS
# of the spine's registration load (wrk 2 threads × 64 connections,
# Benchmarks/spine/register.lua), divided by the requests wrk counted. The
# HTTP loops, the log's I/O thread (`roost-wal-io`), its completion thread
# (`roost-wal-done`) and its segment preparer (`roost-wal-prep`) each get a
# line (names as /proc shows them: 15 bytes at most).
#
#   Benchmarks/spine/threads.sh SECONDS [POLICY]
#
# ROOST_BIN picks the binary (default: the release build). Stops what it
# started, by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
source Benchmarks/lib.sh
bench_init threads
source Benchmarks/spine/measure.sh
bench_require wrk
bench_binaries
seconds=${1:?usage: $0 SECONDS [POLICY]}
policy=${2:-never}
start_spine_roost "$ROOST_BIN" "$policy"
ticks=$(getconf CLK_TCK)
per_thread() { # -> "tid name utime stime" per live thread
  local task
  for task in /proc/"$server_pid"/task/*; do
    # comm may hold spaces; the fields after it are counted from the ')'.
    awk -v tid="${task##*/}" '{ line = $0; name = substr(line, index(line, "(") + 1); name = substr(name, 1, index(name, ")") - 1);
      gsub(/ /, "_", name); rest = substr(line, index(line, ")") + 2); split(rest, f, " ");
      print tid, name, f[12], f[13] }' "$task/stat" 2>/dev/null || true
  done
}
per_thread > "$work/before"
wrk -t2 -c64 -d"${seconds}s" -s Benchmarks/spine/register.lua "http://127.0.0.1:$port/v1/devices" > "$work/wrk.out"
per_thread > "$work/after"
stop_server
requests=$(awk '/requests in/ {print $1}' "$work/wrk.out")
echo "--fsync $policy, $seconds s of wrk: $requests requests ($(awk '/Requests\/sec/ {print $2}' "$work/wrk.out") req/s)"
awk -v r="$requests" -v hz="$ticks" 'NR == FNR { u[$1] = $3; s[$1] = $4; next }
  ($1 in u) { du = ($3 - u[$1]) * 1e6 / hz / r; ds = ($4 - s[$1]) * 1e6 / hz / r; tu += du; ts += ds
    if (du + ds > 0) printf "  %-16s user %6.2f µs  system %6.2f µs a request\n", $2, du, ds }
  END { printf "  %-16s user %6.2f µs  system %6.2f µs a request\n", "all threads", tu, ts }' "$work/before" "$work/after"
