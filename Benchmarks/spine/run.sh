#!/usr/bin/env bash
# The spine benchmark (issue 8): registrations over HTTP end to end, against
# nginx answering a fixed body, in one sitting.
#
#   Benchmarks/spine/run.sh [SECONDS] [ROUNDS]          (make bench-spine)
#
# Each round runs, one after the other, each for SECONDS:
#   nginx           1 worker (master_process off; SPINE_NGINX_WORKERS), POST /v1/devices answered
#                   with a fixed 201 JSON body of a device's size;
#   roost always    `roost serve --fsync always`, fresh data dir, fresh app
#                   (max_devices_per_person 1000) and devices:write key;
#   roost never     the same with `--fsync never`;
#   and, with ROOST_BIN_BASELINE set, the baseline binary's always and never
#   (alternated with the binary under test within every round).
# Load: wrk, 2 threads × 64 keep-alive connections, Benchmarks/spine/register.lua
# (tokens from a 1M space, deterministic per index, so re-registrations happen;
# people from a 200k space; platform, environment, token, external_id,
# app_version, locale, timezone). Per run it records req/s, non-2xx answers,
# answers other than 200/201 (counted by register.lua; SPINE_COUNT_STATUS=0
# turns that off) and socket errors (a run with any is FAILED and left out of
# the medians), and
# context switches per request of the server process: voluntary + nonvoluntary
# over /proc/PID/task/*/status before and after wrk (threads that exit during
# the run are lost there), and `perf stat -e context-switches -p PID` over the
# same window when perf works; and the server's CPU time per request (utime +
# stime of /proc/PID/stat, every thread, at the clock-tick resolution).
# Then, per roost binary, one open-loop run (`roost-bench load`) at half the
# median `always` rate (SPINE_P99_RATE overrides it) on a fresh `--fsync always`
# server for p99 latency from the intended send time.
# Prints a table of medians and ratios and writes a markdown block (with the
# exact command) to $SPINE_MARKDOWN (default .build/spine-report.md).
#
# Environment: ROOST_BIN (default: the release build), ROOST_BIN_BASELINE,
# ROOST_BENCH_BIN (default: the release roost-bench), SPINE_P99_RATE,
# SPINE_TOKENS (1000000), SPINE_PEOPLE (200000), SPINE_MARKDOWN, SPINE_LOOPS
# (roost's --event-loops; default its own, one per core) and
# SPINE_NGINX_WORKERS (default 1).
# Everything listens on 127.0.0.1 and is stopped by PID when the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Benchmarks/lib.sh
SECONDS_PER_RUN=${1:-10}
ROUNDS=${2:-3}
THREADS=2
CONNECTIONS=64
export SPINE_TOKENS=${SPINE_TOKENS:-1000000}
export SPINE_PEOPLE=${SPINE_PEOPLE:-200000}
# register.lua also counts answers by status (no cost measurable against nginx).
export SPINE_COUNT_STATUS=${SPINE_COUNT_STATUS:-1}
MARKDOWN=${SPINE_MARKDOWN:-.build/spine-report.md}
COMMAND="${SPINE_LOOPS:+SPINE_LOOPS=$SPINE_LOOPS }${SPINE_NGINX_WORKERS:+SPINE_NGINX_WORKERS=$SPINE_NGINX_WORKERS }$0 $*"
bench_require wrk nginx curl python3
bench_binaries
BIN=$ROOST_BIN
BENCH_BIN=$ROOST_BENCH_BIN
BASELINE=${ROOST_BIN_BASELINE:-}
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "not an executable: $BASELINE"; exit 1; }
PERF=0
if command -v perf >/dev/null && perf stat -e context-switches -x, -o /dev/null true 2>/dev/null; then PERF=1; fi

bench_init spine

for check in selftest-histogram selftest-load; do
  "$BENCH_BIN" $check > "$work/selftest" || { cat "$work/selftest"; echo "roost-bench $check failed"; exit 1; }
done
CLOCK_TICKS=$(getconf CLK_TCK)
. Benchmarks/spine/measure.sh

declare -A rates ctx perfctx cpus system_cpus failures
variants=(nginx roost-always roost-never)
[ -n "$BASELINE" ] && variants+=(baseline-always baseline-never)
binary_of() { case $1 in roost-*) echo "$BIN" ;; baseline-*) echo "$BASELINE" ;; esac; }

LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "spine: ${SECONDS_PER_RUN}s × $ROUNDS rounds; roost $BIN${BASELINE:+, baseline $BASELINE}; wrk $THREADS threads × $CONNECTIONS connections; load $(cut -d' ' -f1 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  order=("${variants[@]}")
  # Even rounds run the baseline first, so neither binary always follows nginx.
  if [ -n "$BASELINE" ] && [ $((round % 2)) = 0 ]; then
    order=(nginx baseline-always baseline-never roost-always roost-never)
  fi
  for variant in "${order[@]}"; do
    if [ "$variant" = nginx ]; then
      start_nginx "${SPINE_NGINX_WORKERS:-1}" 201 "$NGINX_BODY"
    else
      start_spine_roost "$(binary_of "$variant")" "${variant#*-}"
    fi
    measure "$variant" "$round"
    stop_server
    if [[ "$variant" == *-always ]]; then
      per_sync=$(sed -n 's/.*wal.records_per_fdatasync=\([0-9]*\).*/\1/p; s/.*"wal.records_per_fdatasync":\([0-9]*\).*/\1/p' \
        "$work/roost.err" | tail -1)
      echo "  ($variant: ${per_sync:-?} records per fdatasync at stop)"
    fi
  done
done

# p99 at half the median `always` rate, open loop, one run per roost binary.
declare -A p99line
for label in roost ${BASELINE:+baseline}; do
  peak=$(echo ${rates[$label-always]:-} | tr ' ' '\n' | median)
  rate=${SPINE_P99_RATE:-$(awk -v p="$peak" 'BEGIN{ if (p=="-") print ""; else printf "%d", p/2 }')}
  if [ -z "$rate" ] || [ "$rate" = 0 ]; then
    p99line[$label]="not run (no successful always run)"; continue
  fi
  start_spine_roost "$(binary_of "$label-always")" always
  set +e
  timeout $((SECONDS_PER_RUN + 60)) "$BENCH_BIN" load --url "http://127.0.0.1:$port" --key "$ROOST_KEY" \
    --rate "$rate" --seconds "$SECONDS_PER_RUN" --connections $CONNECTIONS \
    --tokens "$SPINE_TOKENS" --people "$SPINE_PEOPLE" --mix register=1 --android 0 --tags 0 --quiet \
    > "$work/load.out" 2> "$work/load.err"
  load_status=$?
  set -e
  stop_server
  sed "s/^/  $label: /" "$work/load.out"
  result=$(grep '^result ' "$work/load.out" || true)
  value() { echo "$result" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
  if [ "$load_status" != 0 ] || [ -z "$result" ]; then
    p99line[$label]="FAILED at $rate req/s (exit $load_status: $(tr '\n' ' ' < "$work/load.err"))"
  else
    p99line[$label]="at $rate req/s (achieved $(value rate)): p50 $(value p50_us) µs, p99 **$(value p99_us) µs**, p99.9 $(value p999_us) µs, max $(value max_us) µs; generator CPU $(value cpu_pct) %"
  fi
done

summary() {
  echo "| variant | median req/s | runs (req/s) | ctx switches/request (/proc) | (perf) | server CPU µs/request | failed runs |"
  echo "|---|---|---|---|---|---|---|"
  for variant in "${variants[@]}"; do
    echo "| $variant | $(echo ${rates[$variant]:-} | tr ' ' '\n' | median) | ${rates[$variant]:-none} |" \
      "$(echo ${ctx[$variant]:-} | tr ' ' '\n' | median) | $(echo ${perfctx[$variant]:-} | tr ' ' '\n' | median) |" \
      "$(echo ${cpus[$variant]:-} | tr ' ' '\n' | median) | ${failures[$variant]:-0} |"
  done
  echo
  for label in roost ${BASELINE:+baseline}; do
    a=$(echo ${rates[$label-always]:-} | tr ' ' '\n' | median)
    n=$(echo ${rates[$label-never]:-} | tr ' ' '\n' | median)
    x=$(echo ${rates[nginx]:-} | tr ' ' '\n' | median)
    echo "- $label: always/nginx = **$(ratio "$a" "$x")**, always/never = **$(ratio "$a" "$n")**; p99 (open loop, --fsync always) ${p99line[$label]}"
  done
}
write_report ", roost \`$BIN\`${BASELINE:+, baseline \`$BASELINE\`}"
any_failed=0
for variant in "${variants[@]}"; do [ -n "${failures[$variant]:-}" ] && any_failed=1; done
for label in roost ${BASELINE:+baseline}; do [[ "${p99line[$label]}" == FAILED* ]] && any_failed=1; done
exit $any_failed
