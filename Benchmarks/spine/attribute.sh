#!/usr/bin/env bash
# Where a registration's server CPU went between builds (issue 25 item 1):
# the spine's registration load against several roost binaries and nginx in
# one sitting, alternated.
#
#   Benchmarks/spine/attribute.sh SECONDS ROUNDS LABEL=BINARY…   (make bench-attribute)
#
# LABEL=BINARY pairs are given oldest first (a label is usually the commit the
# binary was built from, e.g. c1174b5=/tmp/bin/c1174b5). Every round runs nginx
# (the fixed 201 body of run.sh) and then every binary, each on a fresh data
# directory with `--fsync $SPINE_POLICY` (default never) for SECONDS of wrk
# (2 threads × 64 connections, Benchmarks/spine/register.lua); odd rounds run
# the binaries oldest first, even rounds newest first, so no binary always
# follows the same one. Per binary it prints the median server CPU per
# request (utime + stime of the whole process over wrk's run, divided by the
# requests wrk counted), its change from the binary before it in the list, its
# ratio to nginx's CPU per answer, the part of it spent in the kernel
# (stime), and the median req/s. A run with a non-2xx
# answer or a socket error is FAILED and left out of the medians.
# The markdown table goes to $SPINE_MARKDOWN (default .build/attribute-report.md).
# SPINE_LOOPS sets roost's --event-loops (default: its own, one per core) and
# SPINE_NGINX_WORKERS nginx's workers (default 1): the same number compares
# like with like.
# Everything listens on 127.0.0.1 and is stopped by PID when the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Benchmarks/lib.sh
[ $# -ge 3 ] || { echo "usage: $0 SECONDS ROUNDS LABEL=BINARY…"; exit 2; }
COMMAND="${SPINE_LOOPS:+SPINE_LOOPS=$SPINE_LOOPS }${SPINE_NGINX_WORKERS:+SPINE_NGINX_WORKERS=$SPINE_NGINX_WORKERS }$0 $*"
SECONDS_PER_RUN=$1
ROUNDS=$2
shift 2
THREADS=2
CONNECTIONS=64
POLICY=${SPINE_POLICY:-never}
export SPINE_TOKENS=${SPINE_TOKENS:-1000000}
export SPINE_PEOPLE=${SPINE_PEOPLE:-200000}
export SPINE_COUNT_STATUS=${SPINE_COUNT_STATUS:-1}
MARKDOWN=${SPINE_MARKDOWN:-.build/attribute-report.md}
bench_require wrk nginx curl python3

labels=()
declare -A binary
for pair in "$@"; do
  label=${pair%%=*}
  path=${pair#*=}
  [ "$label" != "$pair" ] && [ -n "$label" ] || { echo "not LABEL=BINARY: $pair"; exit 2; }
  [ "$label" != nginx ] || { echo "the label nginx is taken by the reference"; exit 2; }
  [ -z "${binary[$label]:-}" ] || { echo "label given twice: $label"; exit 2; }
  [ -x "$path" ] || { echo "not an executable: $path"; exit 2; }
  labels+=("$label")
  binary[$label]=$path
done
PERF=0
if command -v perf >/dev/null && perf stat -e context-switches -x, -o /dev/null true 2>/dev/null; then PERF=1; fi

bench_init attribute
CLOCK_TICKS=$(getconf CLK_TCK)
. Benchmarks/spine/measure.sh

declare -A rates ctx perfctx cpus system_cpus failures
LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "attribute: ${SECONDS_PER_RUN}s × $ROUNDS rounds, --fsync $POLICY, ${#labels[@]} binaries; load $(cut -d' ' -f1 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  order=("${labels[@]}")
  if [ $((round % 2)) = 0 ]; then
    order=()
    for ((i = ${#labels[@]} - 1; i >= 0; i--)); do order+=("${labels[$i]}"); done
  fi
  start_nginx "${SPINE_NGINX_WORKERS:-1}" 201 "$NGINX_BODY"
  measure nginx "$round"
  stop_server
  for label in "${order[@]}"; do
    start_spine_roost "${binary[$label]}" "$POLICY"
    measure "$label" "$round"
    stop_server
  done
done

summary() {
  local nginx_cpu previous="" cpu change
  nginx_cpu=$(echo ${cpus[nginx]:-} | tr ' ' '\n' | median)
  echo "| binary | server CPU µs/request (median) | change from the row above | × nginx's CPU | of it in the kernel (median µs) | median req/s | CPU runs (µs) | failed runs |"
  echo "|---|---|---|---|---|---|---|---|"
  echo "| nginx (fixed answer) | $nginx_cpu | | 1.00 | $(echo ${system_cpus[nginx]:-} | tr ' ' '\n' | median) |" \
    "$(echo ${rates[nginx]:-} | tr ' ' '\n' | median) | ${cpus[nginx]:-none} | ${failures[nginx]:-0} |"
  for label in "${labels[@]}"; do
    cpu=$(echo ${cpus[$label]:-} | tr ' ' '\n' | median)
    change=$(awk -v a="$cpu" -v b="$previous" 'BEGIN{ if (a=="-" || b=="" || b=="-") print ""; else printf "%+.1f", a-b }')
    echo "| $label | $cpu | $change | $(ratio "$cpu" "$nginx_cpu") | $(echo ${system_cpus[$label]:-} | tr ' ' '\n' | median) |" \
      "$(echo ${rates[$label]:-} | tr ' ' '\n' | median) |" \
      "${cpus[$label]:-none} | ${failures[$label]:-0} |"
    previous=$cpu
  done
}
write_report "; --fsync $POLICY"
any_failed=0
for variant in nginx "${labels[@]}"; do [ -n "${failures[$variant]:-}" ] && any_failed=1; done
exit $any_failed
