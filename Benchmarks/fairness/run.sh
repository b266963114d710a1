#!/usr/bin/env bash
# Fairness between apps (issue 9, item 12): the p50 of a light client of one
# app while another app floods the server.
#
#   Benchmarks/fairness/run.sh [SECONDS] [ROUNDS]          (make bench-fairness)
#
# Per round and binary (ROOST_BIN, and ROOST_BIN_BASELINE when set, alternated:
# even rounds run the baseline first), on a fresh `roost serve --fsync always`
# (127.0.0.1, port 0) with apps 1 (A), 2 (B: the same shard as A with the
# default two shards) and 3 (C: the other shard), each with a devices:write key:
#   quiet   B alone: `roost-bench load --connections 1` (closed loop), SECONDS;
#   alone   after 1.5 s (apps no longer contend: decision 0063), the flood's
#           wrk alone on app A for SECONDS: its rate with nobody to share with;
#   flood   wrk -t2 -c200 on app A (Benchmarks/spine/register.lua), under
#           `nice -n $FAIR_NICE` (default 10), for 2 × SECONDS + 4 s; after 2 s, B then C each
#           measured for SECONDS with the same closed-loop client.
# Prints p50 / p99 of each light client and A's request rates; the last lines
# are a markdown table ready for docs/performance.md.
#
# Environment: ROOST_BIN (default: the release build), ROOST_BIN_BASELINE,
# ROOST_BENCH_BIN (default: the release roost-bench), FAIR_CONNECTIONS (200),
# FAIR_FSYNC (always), FAIR_NICE (10; 0 lets the flood compete with the server
# for the cores as an equal), FAIR_FSYNC_DELAY_US (unset: the data directory is
# on the disk; N: it is on /dev/shm and every fdatasync of the server is held N
# µs by `strace --seccomp-bpf -e inject=fdatasync:delay_exit=N`, a disk with a
# steady sync time, for a machine whose disk other tenants make noisy).
# Everything listens on 127.0.0.1 and is stopped by PID when the script ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_RUN=${1:-5}
ROUNDS=${2:-3}
CONNECTIONS=${FAIR_CONNECTIONS:-200}
FSYNC=${FAIR_FSYNC:-always}
NICE=${FAIR_NICE:-10}
DELAY=${FAIR_FSYNC_DELAY_US:-}
WRAP=()
DATA_ROOT=""
if [ -n "$DELAY" ]; then
  command -v strace >/dev/null || { echo "FAIR_FSYNC_DELAY_US needs strace: sudo apt-get install -y strace"; exit 1; }
  WRAP=(strace -f -qq -o /dev/null --seccomp-bpf -e trace=fdatasync -e "inject=fdatasync:delay_exit=$DELAY")
  DATA_ROOT=/dev/shm
fi
COMMAND="$0 $*"
for tool in wrk curl; do
  command -v "$tool" >/dev/null || { echo "missing $tool: sudo apt-get install -y wrk curl"; exit 1; }
done
BIN_DIR=""
bin_dir() { [ -n "$BIN_DIR" ] || BIN_DIR=$(swift build -c release --show-bin-path); echo "$BIN_DIR"; }
BIN=${ROOST_BIN:-$(bin_dir)/roost}
BENCH_BIN=${ROOST_BENCH_BIN:-$(bin_dir)/roost-bench}
BASELINE=${ROOST_BIN_BASELINE:-}
for b in "$BIN" "$BENCH_BIN" ${BASELINE:+"$BASELINE"}; do
  [ -x "$b" ] || { echo "not an executable: $b (build: make release)"; exit 1; }
done

work=$(mktemp -d "${DATA_ROOT:-${TMPDIR:-/var/tmp}}/roost-bench-fairness.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export ROOST_ADMIN_KEY=bench-admin-key-0123456789abcdef

stop_pid() { # pid: SIGTERM, up to 10 s, then SIGKILL
  local p=$1
  kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}

server_pid=""
port=""
declare -A keys
start_roost() { # binary -> server_pid, port, keys[1..3]
  local binary=$1
  rm -rf "$work/data" "$work/roost.out" "$work/roost.err"
  "${WRAP[@]}" "$binary" serve --listen 127.0.0.1:0 --data "$work/data" --fsync "$FSYNC" \
    > "$work/roost.out" 2> "$work/roost.err" &
  wrapper_pid=$!; pids+=("$wrapper_pid")
  for _ in $(seq 100); do grep -q "listening on" "$work/roost.out" 2>/dev/null && break; sleep 0.1; done
  # Under strace the server is strace's child: it is the one stopped by SIGTERM.
  server_pid=$wrapper_pid
  if [ -n "$DELAY" ]; then server_pid=$(pgrep -P "$wrapper_pid" | head -1); pids+=("$server_pid"); fi
  port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$work/roost.out")
  [ -n "$port" ] || { echo "roost did not start: $binary"; cat "$work/roost.err"; exit 1; }
  for app in 1 2 3; do
    curl -sf -X POST "127.0.0.1:$port/v1/apps" -H "Authorization: Bearer $ROOST_ADMIN_KEY" \
      -d '{"name":"bench","settings":{"max_devices_per_person":1000}}' > /dev/null
    keys[$app]=$(curl -sf -X POST "127.0.0.1:$port/v1/apps/$app/keys" -H "Authorization: Bearer $ROOST_ADMIN_KEY" \
      -d '{"kind":"secret","capabilities":["devices:write"]}' | sed -n 's/.*"key":"\([^"]*\)".*/\1/p')
    [ -n "${keys[$app]}" ] || { echo "could not create a key for app $app"; exit 1; }
  done
}

# One closed-loop light client on app $1 for SECONDS; prints "p50 p99 rate".
light() {
  local out="$work/light.out"
  timeout $((SECONDS_PER_RUN + 30)) "$BENCH_BIN" load --url "http://127.0.0.1:$port" --key "${keys[$1]}" \
    --connections 1 --seconds "$SECONDS_PER_RUN" --seed "$2" > "$out" 2>&1 || true
  awk '/^result / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
       printf "%.0f %.0f %s\n", v["p50_us"], v["p99_us"], v["rate"] }' "$out" | grep . ||
    { echo "- - -"; sed 's/^/  load: /' "$out" >&2; }
}

results=()
run_one() { # label binary round
  local label=$1 binary=$2 round=$3
  start_roost "$binary"
  local quiet b c rate alone flood_pid
  quiet=$(light 2 "$((round * 10 + 1))")
  sleep 1.5
  ROOST_KEY=${keys[1]} SPINE_SEED=$((round + 100)) nice -n "$NICE" timeout $((SECONDS_PER_RUN + 30)) \
    wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" -s Benchmarks/spine/register.lua \
    "http://127.0.0.1:$port/v1/devices" > "$work/wrk-alone.out" 2>&1 || true
  alone=$(awk '/^Requests\/sec/ {printf "%d", $2}' "$work/wrk-alone.out")
  ROOST_KEY=${keys[1]} SPINE_SEED=$round nice -n "$NICE" timeout $((SECONDS_PER_RUN * 2 + 34)) \
    wrk -t2 -c"$CONNECTIONS" -d"$((SECONDS_PER_RUN * 2 + 4))s" -s Benchmarks/spine/register.lua \
    "http://127.0.0.1:$port/v1/devices" > "$work/wrk.out" 2>&1 &
  flood_pid=$!; pids+=("$flood_pid")
  sleep 2
  b=$(light 2 "$((round * 10 + 2))")
  c=$(light 3 "$((round * 10 + 3))")
  wait "$flood_pid" || true
  rate=$(awk '/^Requests\/sec/ {printf "%d", $2}' "$work/wrk.out")
  stop_pid "$server_pid"
  [ "$server_pid" = "$wrapper_pid" ] || stop_pid "$wrapper_pid"
  read -r q50 q99 _ <<< "$quiet"; read -r b50 b99 _ <<< "$b"; read -r c50 c99 _ <<< "$c"
  local line="$label round $round: B alone p50 ${q50} µs p99 ${q99} µs | A alone ${alone:-?} req/s | flood A ${rate:-?} req/s | B (A's shard) p50 ${b50} µs p99 ${b99} µs | C (other shard) p50 ${c50} µs p99 ${c99} µs"
  echo "$line"
  results+=("| $label | $round | $q50 / $q99 | ${alone:-?} | ${rate:-?} | $b50 / $b99 | $c50 / $c99 |")
}

for round in $(seq "$ROUNDS"); do
  if [ -n "$BASELINE" ] && [ $((round % 2)) = 0 ]; then
    run_one baseline "$BASELINE" "$round"; run_one roost "$BIN" "$round"
  else
    run_one roost "$BIN" "$round"; [ -n "$BASELINE" ] && run_one baseline "$BASELINE" "$round"
  fi
done

echo
echo "Command: \`FAIR_NICE=$NICE FAIR_FSYNC=$FSYNC${DELAY:+ FAIR_FSYNC_DELAY_US=$DELAY} $COMMAND\`$( [ -n "$BASELINE" ] && echo " (ROOST_BIN_BASELINE=$BASELINE)")"
echo
echo "| binary | round | B alone p50 / p99 µs | A alone req/s | A flood req/s | B under flood (A's shard) p50 / p99 µs | C under flood (other shard) p50 / p99 µs |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${results[@]}"
