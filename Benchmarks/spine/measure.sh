# The spine's shared pieces, sourced by Benchmarks/spine/run.sh and
# Benchmarks/spine/attribute.sh after Benchmarks/lib.sh and bench_init:
#   start_spine_roost BINARY POLICY  a fresh roost (server_pid, port, ROOST_KEY)
#                                    that has answered one registration;
#   measure VARIANT ROUND            one wrk run of register.lua against the
#                                    server that is up, recorded in the arrays
#                                    rates, ctx, perfctx, cpus, system_cpus and
#                                    failures
#                                    (declare -A before) under VARIANT.
#   NGINX_BODY                       the fixed 201 body nginx answers;
#   write_report DETAILS             the "Command:" line (DETAILS after the
#                                    date) and the caller's `summary` into
#                                    $MARKDOWN, printed too.
# They read SECONDS_PER_RUN, THREADS, CONNECTIONS, PERF and CLOCK_TICKS
# (write_report also COMMAND, ROUNDS, SPINE_TOKENS, SPINE_PEOPLE, LOAD_AT_START
# and MARKDOWN).

# A 201 body the size of roost's device answer (456 bytes).
NGINX_BODY='{"id":"dev_2eh44w4nmntrhzgm5kqsxkfqk8","platform":"ios","environment":"production","bundle_id":null,"installation_id":null,"external_id":"user_1","created_at":"2026-12-01T17:38:18.497Z","last_seen_at":"2026-12-01T17:38:18.497Z","bound_at":"2026-12-01T17:38:18.497Z","app_version":"2.4.0","timezone":"Europe/Berlin","locale":"en-US","push_permission":null,"opted_in":true,"tags":{},"invalidated_at":null,"invalidation_reason":null,"strikes":0,"mode":"live","version":1,"client_sequence":null}'
#   SPINE_LOOPS / SPINE_NGINX_WORKERS  roost's `--event-loops` (default: its
#                                    own, one per core) and nginx's workers
#                                    (default 1: the issue's baseline); the
#                                    same number compares like with like.
start_spine_roost() { # binary policy -> server_pid, port, ROOST_KEY
  start_roost "$1" "$2" ${SPINE_LOOPS:+--event-loops "$SPINE_LOOPS"}
  roost_app_key 1000
  # One registration by hand: the route answers 201 before any load is timed.
  local status
  status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "127.0.0.1:$port/v1/devices" \
    -H "Authorization: Bearer $ROOST_KEY" -H "Content-Type: application/json" \
    -d '{"platform":"ios","token":"00000000000000000000000000000000000000000000000000000000000000ff","external_id":"probe"}')
  [ "$status" = 201 ] || { echo "roost answered $status to a registration"; exit 1; }
}

# One wrk run against the server that is up; prints one result line.
measure() { # variant round
  local variant=$1 round=$2 out="$work/wrk.out" perf_out="$work/perf.out" perf_pid=""
  local before after requests rate non2xx sockerr per_request perf_per_request="-" switches
  local cpu_before cpu_after cpu_per_request system_before system_after system_per_request
  before=$(ctx_switches "$server_pid")
  cpu_before=$(cpu_ticks "$server_pid")
  system_before=$(system_ticks "$server_pid")
  if [ "$PERF" = 1 ]; then
    rm -f "$perf_out"
    perf stat -e context-switches -x, -o "$perf_out" -p "$(process_tree "$server_pid" | paste -sd,)" 2>/dev/null &
    perf_pid=$!; pids+=("$perf_pid")
    sleep 0.2
  fi
  timeout $((SECONDS_PER_RUN + 30)) wrk -t$THREADS -c$CONNECTIONS -d"${SECONDS_PER_RUN}s" \
    -s Benchmarks/spine/register.lua "http://127.0.0.1:$port/v1/devices" > "$out" 2>&1 || true
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true; fi
  after=$(ctx_switches "$server_pid")
  cpu_after=$(cpu_ticks "$server_pid")
  system_after=$(system_ticks "$server_pid")
  rate=$(awk '/^Requests\/sec/ {printf "%d", $2}' "$out")
  requests=$(awk '/requests in/ {print $1}' "$out")
  non2xx=$(awk '/Non-2xx or 3xx responses/ {print $NF}' "$out"); non2xx=${non2xx:-0}
  sockerr=$(awk '/Socket errors/ {gsub(",", ""); print $4+$6+$8+$10}' "$out"); sockerr=${sockerr:-0}
  # From register.lua (SPINE_COUNT_STATUS=1): statuses other than 200/201.
  local unexpected statuses
  unexpected=$(awk '/^unexpected statuses:/ {print $3}' "$out"); unexpected=${unexpected:-0}
  statuses=$(awk '/^status [0-9]+:/ {printf "%s%s %s", sep, $2, $3; sep=", "}' "$out")
  if [ -z "$rate" ] || [ -z "$requests" ] || [ "$requests" = 0 ]; then
    failures[$variant]+="r$round(no-result) "
    echo "round $round $variant: FAILED (wrk printed no result)"; sed 's/^/  wrk: /' "$out"; return
  fi
  per_request=$(awk -v a="$before" -v b="$after" -v n="$requests" 'BEGIN{printf "%.3f", (b-a)/n}')
  cpu_per_request=$(awk -v a="$cpu_before" -v b="$cpu_after" -v n="$requests" -v hz="$CLOCK_TICKS" \
    'BEGIN{printf "%.1f", (b-a)/hz*1e6/n}')
  system_per_request=$(awk -v a="$system_before" -v b="$system_after" -v n="$requests" -v hz="$CLOCK_TICKS" \
    'BEGIN{printf "%.1f", (b-a)/hz*1e6/n}')
  if [ -n "$perf_pid" ] && [ -s "$perf_out" ]; then
    switches=$(awk -F, '/context-switches/ {print $1}' "$perf_out")
    [[ "$switches" =~ ^[0-9]+$ ]] && perf_per_request=$(awk -v s="$switches" -v n="$requests" 'BEGIN{printf "%.3f", s/n}')
  fi
  if [ "$non2xx" != 0 ] || [ "$sockerr" != 0 ] || [ "$unexpected" != 0 ]; then
    failures[$variant]+="r$round(non2xx=$non2xx,unexpected=$unexpected,socket_errors=$sockerr) "
    echo "round $round $variant: FAILED: $non2xx non-2xx answers, $unexpected not 200/201," \
      "$sockerr socket errors ($rate req/s not counted; statuses ${statuses:-?})"
    return
  fi
  rates[$variant]+="$rate "
  ctx[$variant]+="$per_request "
  perfctx[$variant]+="$perf_per_request "
  cpus[$variant]+="$cpu_per_request "
  system_cpus[$variant]+="$system_per_request "
  echo "round $round $variant: $rate req/s, $requests requests, ctx switches/request $per_request (/proc)," \
    "$perf_per_request (perf), server CPU $cpu_per_request µs/request ($system_per_request in the kernel); statuses ${statuses:-not counted}"
}

write_report() { # DETAILS
  mkdir -p "$(dirname "$MARKDOWN")"
  {
    echo "Command: \`${COMMAND}\` ($(date -u +%Y-%m-%d)$1; wrk $THREADS threads × $CONNECTIONS connections," \
      "${SECONDS_PER_RUN} s per run, $ROUNDS rounds; tokens $SPINE_TOKENS, people $SPINE_PEOPLE;" \
      "roost event loops ${SPINE_LOOPS:-one per core ($(nproc))}, nginx workers ${SPINE_NGINX_WORKERS:-1};" \
      "load average $LOAD_AT_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
    echo
    summary
  } > "$MARKDOWN"
  echo
  cat "$MARKDOWN"
  echo
  echo "(markdown written to $MARKDOWN)"
}
