#!/usr/bin/env bash
# Syscalls per registration, by thread (issue 25, decision 0095): `perf stat`
# counts the syscall tracepoints of each thread of `roost serve --fsync
# POLICY` (default never) over SECONDS of the spine's registration load (wrk
# 2 threads × 64 connections, Benchmarks/spine/register.lua) and divides by
# the requests wrk counted. `nginx` in place of a binary counts nginx's fixed
# answer the same way (SPINE_NGINX_WORKERS workers, default 1). Unlike
# strace (this script's tool until 2026-12-07), the tracepoints barely
# change the server's pace, so the counts are those of a normal run.
#
#   Benchmarks/spine/syscalls.sh SECONDS [POLICY]
#
# ROOST_BIN picks the binary (default: the release build; `nginx` for the
# reference); SPINE_LOOPS sets roost's --event-loops. Needs perf with access
# to tracepoints (perf_event_paranoid ≤ 2 as root). Stops what it started,
# by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
source Benchmarks/lib.sh
bench_init syscalls
source Benchmarks/spine/measure.sh
bench_require wrk perf
seconds=${1:?usage: $0 SECONDS [POLICY]}
policy=${2:-never}
export SPINE_TOKENS=${SPINE_TOKENS:-1000000} SPINE_PEOPLE=${SPINE_PEOPLE:-200000} SPINE_COUNT_STATUS=0
if [ "${ROOST_BIN:-}" = nginx ]; then
  bench_require nginx
  start_nginx "${SPINE_NGINX_WORKERS:-1}" 201 "$NGINX_BODY"
  label="nginx, ${SPINE_NGINX_WORKERS:-1} worker(s)"
else
  bench_binaries
  start_spine_roost "$ROOST_BIN" "$policy"
  label="roost --fsync $policy, event loops ${SPINE_LOOPS:-one per core}"
fi
calls="read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait epoll_ctl futex"
calls="$calls accept4 close pwrite64 pwritev fdatasync fsync io_uring_enter"
events=""
for call in $calls; do events="$events${events:+,}syscalls:sys_enter_$call"; done
perf stat --per-thread -e "$events" -x, -o "$work/perf.out" \
  -p "$(process_tree "$server_pid" | paste -sd,)" 2>/dev/null &
perf_pid=$!
pids+=("$perf_pid")
sleep 0.2
wrk -t2 -c64 -d"${seconds}s" -s Benchmarks/spine/register.lua "http://127.0.0.1:$port/v1/devices" > "$work/wrk.out"
kill -INT "$perf_pid" 2>/dev/null || true
wait "$perf_pid" 2>/dev/null || true
requests=$(awk '/requests in/ {print $1}' "$work/wrk.out")
[ -n "$requests" ] && [ "$requests" -gt 0 ] || { echo "wrk counted no request"; cat "$work/wrk.out"; exit 1; }
echo "$label, ${seconds} s of wrk: $requests requests ($(awk '/^Requests\/sec/ {print $2}' "$work/wrk.out") req/s)"
# perf's per-thread lines: "thread-tid,count,,event,…"; threads named as /proc shows them.
grep -v '^#' "$work/perf.out" | awk -F, -v n="$requests" '
  $2 ~ /^[0-9]+$/ && $2 > 0 {
    name = $1; sub(/-[0-9]+$/, "", name); call = $4; sub(/^syscalls:sys_enter_/, "", call)
    count[name "\t" call] += $2; total[call] += $2
  }
  END {
    # Calls of a thread below 0.0005 a request (set-up, the odd timer) are left out.
    for (key in count) {
      if (count[key] / n < 0.0005) continue
      split(key, part, "\t"); printf "  %-16s %-12s %7.3f a request\n", part[1], part[2], count[key] / n
    }
    for (call in total) {
      sum += total[call]
      if (total[call] / n >= 0.0005) printf "  %-16s %-12s %7.3f a request\n", "all threads", call, total[call] / n
    }
    printf "  %-16s %-12s %7.3f a request\n", "all threads", "all", sum / n
  }' | sort
stop_server
