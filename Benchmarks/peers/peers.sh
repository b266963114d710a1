# Redis 7 and PostgreSQL 15 as peers of `make bench` (docs/benchmarking.md,
# "Peers"): source after Benchmarks/lib.sh and `bench_init`.
#
#   start_redis APPENDFSYNC [ARGS…]   redis-server on 127.0.0.1, a fresh $work/redis,
#                                     appendonly yes -> server_pid, port
#   start_postgres SYNCHRONOUS_COMMIT a throwaway cluster (initdb) in $work/pg, on
#                                     127.0.0.1 -> server_pid, port
#   peer_redis NAME LABEL APPENDFSYNC    the registration script over redis-benchmark
#   peer_postgres NAME LABEL SYNC        the upsert over pgbench
#
# Each peer_* run writes $OUT/NAME.json (a peer result file for `roost-bench
# compare`) and the exact command into it, and prints one line. The load has
# the shape of the roost peers: register only, $TOKENS devices (device i is
# user_(i mod $PEOPLE)'s), $CONNECTIONS connections, one client thread, one
# request in flight per connection, closed loop, $SECONDS_PER_RUN seconds.
# Servers are stopped by PID (stop_server); their directories go with $work.

PEERS_DIR=Benchmarks/peers
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
# The most requests one redis-benchmark run is sized to (it takes a count, not a time).
PEER_REDIS_REQUESTS_MAX=20000000
# Requests of the short run that sizes the timed one.
PEER_REDIS_CALIBRATION=20000

peers_require() {
  bench_require redis-server redis-cli redis-benchmark psql pgbench
  [ -x "$PG_BIN/postgres" ] && [ -x "$PG_BIN/initdb" ] \
    || { echo "missing: $PG_BIN/postgres, $PG_BIN/initdb (Debian: sudo apt-get install -y postgresql-15)"; exit 1; }
}

# redis-server with appendonly yes and appendfsync APPENDFSYNC (always:
# fsync before the answer, as roost --fsync always; everysec: as roost's),
# no RDB saves, no AOF rewrite during the run; ARGS override.
start_redis() { # APPENDFSYNC [ARGS…]
  local policy=$1
  shift
  port=$(free_port)
  rm -rf "$work/redis"; mkdir -p "$work/redis"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$work/redis" --daemonize no --save '' \
    --appendonly yes --appendfsync "$policy" --auto-aof-rewrite-percentage 0 --logfile "$work/redis/log" "$@" &
  server_pid=$!; pids+=("$server_pid")
  for _ in $(seq 300); do
    redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "redis-server did not start"; cat "$work/redis/log"; exit 1
}

# Runs ARGS as the user `postgres` when root (PostgreSQL refuses root), else as is.
as_postgres() {
  if [ "$(id -u)" = 0 ]; then setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; else "$@"; fi
}

# A fresh cluster (initdb, trust on 127.0.0.1 only) and postgres on it with
# synchronous_commit SYNC and fsync on (the defaults of a durable server).
start_postgres() { # SYNCHRONOUS_COMMIT
  local sync=$1
  port=$(free_port)
  # postgres (not root) must reach its directory: the work directory becomes traversable.
  chmod 711 "$work"
  rm -rf "$work/pg"; mkdir -p "$work/pg"
  [ "$(id -u)" = 0 ] && chown postgres "$work/pg"
  as_postgres "$PG_BIN/initdb" -D "$work/pg/data" -U postgres --auth=trust -E UTF8 --no-sync \
    > "$work/pg-initdb.log" 2>&1 || { cat "$work/pg-initdb.log"; exit 1; }
  as_postgres "$PG_BIN/postgres" -D "$work/pg/data" -c listen_addresses=127.0.0.1 -c port="$port" \
    -c unix_socket_directories="$work/pg" -c fsync=on -c synchronous_commit="$sync" -c max_connections=100 \
    -c shared_buffers=256MB > "$work/pg/log" 2>&1 &
  server_pid=$!; pids+=("$server_pid")
  for _ in $(seq 300); do
    psql -h 127.0.0.1 -p "$port" -U postgres -Atqc 'SELECT 1' postgres >/dev/null 2>&1 && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "postgres did not start"; cat "$work/pg/log"; exit 1
}

# `time`'s user, system and real seconds of the client, from $work/time.
client_cpu() { tail -1 "$work/time"; }

peer_redis() { # NAME LABEL APPENDFSYNC
  local name=$1 label=$2 policy=$3 sha calibration rate requests command cli
  start_redis "$policy"
  cli=(redis-cli -p "$port")
  sha=$("${cli[@]}" SCRIPT LOAD "$(cat "$PEERS_DIR/register.lua")")
  local bench=(redis-benchmark -h 127.0.0.1 -p "$port" -c "$CONNECTIONS" -r "$TOKENS" --csv)
  local script=(EVALSHA "$sha" 1 dev:__rand_int__ "$PEOPLE" 10)
  # redis-benchmark takes a request count: a short run sizes the timed one to SECONDS.
  calibration=$(timeout 120 "${bench[@]}" -n $PEER_REDIS_CALIBRATION "${script[@]}" 2>&1 | tail -1 | cut -d'"' -f4) \
    || calibration=""
  requests=$(awk -v r="${calibration:-0}" -v s="$SECONDS_PER_RUN" -v m=$PEER_REDIS_REQUESTS_MAX \
    'BEGIN{n=int(r*s); if (n<10000) n=10000; if (n>m) n=m; print n}')
  "${cli[@]}" FLUSHALL SYNC >/dev/null && "${cli[@]}" CONFIG RESETSTAT >/dev/null
  command="redis-benchmark -h 127.0.0.1 -p PORT -c $CONNECTIONS -r $TOKENS --csv -n $requests EVALSHA \$(redis-cli SCRIPT LOAD \"\$(cat $PEERS_DIR/register.lua)\") 1 dev:__rand_int__ $PEOPLE 10"
  local status=0
  TIMEFORMAT='%3U %3S %3R'
  { time timeout $((SECONDS_PER_RUN * 4 + 120)) "${bench[@]}" -n "$requests" "${script[@]}" \
      > "$work/$name.csv" 2> "$work/$name.err"; } 2> "$work/time" || status=$?
  { "${cli[@]}" INFO stats; "${cli[@]}" INFO commandstats; } > "$work/$name.stats"
  local devices
  devices=$("${cli[@]}" DBSIZE)
  stop_server
  if [ "$status" != 0 ] || ! python3 "$PEERS_DIR/result.py" redis --csv "$work/$name.csv" --stats "$work/$name.stats" \
    --requests "$requests" --label "$label" --server "$(redis-server --version | cut -d' ' -f1-3)" \
    --command "$command" --settings "appendonly yes, appendfsync $policy, save ''" --connections "$CONNECTIONS" \
    --tokens "$TOKENS" --people "$PEOPLE" --cpu "$(client_cpu)" --rows "${devices:-0}" --out "$OUT/$name.json" \
    > "$work/$name.line"; then
    failed=1
    echo "  $label: FAILED (exit $status)"; sed 's/^/    /' "$work/$name.line" "$work/$name.err" 2>/dev/null | head -20
    return 0
  fi
  echo "  $(cat "$work/$name.line")"
}

peer_postgres() { # NAME LABEL SYNCHRONOUS_COMMIT
  local name=$1 label=$2 sync=$3 status=0 command
  start_postgres "$sync"
  local sql=(psql -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -Atq postgres)
  "${sql[@]}" -f "$PEERS_DIR/schema.sql" || { failed=1; echo "  $label: FAILED (schema)"; stop_server; return 0; }
  rm -f "$work/$name-log".*
  local bench=(pgbench -h 127.0.0.1 -p "$port" -U postgres -n -c "$CONNECTIONS" -j 1 -T "$SECONDS_PER_RUN"
    -M prepared -D tokens="$TOKENS" -D people="$PEOPLE" -f "$PEERS_DIR/register.sql" --log
    --log-prefix="$work/$name-log" postgres)
  command="pgbench -h 127.0.0.1 -p PORT -U postgres -n -c $CONNECTIONS -j 1 -T $SECONDS_PER_RUN -M prepared -D tokens=$TOKENS -D people=$PEOPLE -f $PEERS_DIR/register.sql --log postgres"
  TIMEFORMAT='%3U %3S %3R'
  { time timeout $((SECONDS_PER_RUN + 120)) "${bench[@]}" > "$work/$name.out" 2>&1; } 2> "$work/time" || status=$?
  local devices
  devices=$("${sql[@]}" -c 'SELECT count(*) FROM devices' 2>/dev/null || echo 0)
  stop_server
  if [ "$status" != 0 ] || ! python3 "$PEERS_DIR/result.py" pgbench --output "$work/$name.out" \
    --log-prefix "$work/$name-log" --label "$label" --server "$("$PG_BIN/postgres" --version)" --command "$command" \
    --settings "synchronous_commit $sync, fsync on" --connections "$CONNECTIONS" --tokens "$TOKENS" \
    --people "$PEOPLE" --cpu "$(client_cpu)" --rows "${devices:-0}" --out "$OUT/$name.json" > "$work/$name.line"; then
    failed=1
    echo "  $label: FAILED (exit $status)"; sed 's/^/    /' "$work/$name.line" "$work/$name.out" 2>/dev/null | head -20
    return 0
  fi
  echo "  $(cat "$work/$name.line")"
}

# A 201 body the size of roost's device answer, for the nginx peer.
NGINX_BODY='{"id":"dev_2eh44w4nmntrhzgm5kqsxkfqk8","platform":"ios","environment":"production","bundle_id":null,"installation_id":null,"external_id":"user_1","created_at":"2026-12-01T17:38:18.497Z","last_seen_at":"2026-12-01T17:38:18.497Z","bound_at":"2026-12-01T17:38:18.497Z","app_version":"2.4.0","timezone":"Europe/Berlin","locale":"en-US","push_permission":null,"opted_in":true,"tags":{},"invalidated_at":null,"invalidation_reason":null,"strikes":0,"mode":"live","version":1,"client_sequence":null}'

# One `roost-bench load` run into $OUT/NAME.json: NAME LABEL ARGS… (the caller
# sets SECONDS_PER_RUN, CONNECTIONS, OUT, work, port; a failure sets failed=1).
load() {
  local name=$1 label=$2
  shift 2
  if timeout $((SECONDS_PER_RUN + 180)) "$ROOST_BENCH_BIN" load --url "http://127.0.0.1:$port" --label "$label" \
    --connections $CONNECTIONS --seconds "$SECONDS_PER_RUN" --quiet --out "$OUT/$name.json" "$@" \
    > "$work/$name.out" 2> "$work/$name.err"; then
    echo "  $label: $(sed -n 's/^achieved: //p' "$work/$name.out")"
  else
    failed=1
    echo "  $label: FAILED"; sed 's/^/    /' "$work/$name.out" "$work/$name.err" | head -20
  fi
}

peers_run_all() { # LOAD-ARGS…: nginx, Roost (--fsync always, everysec, never), Redis and PostgreSQL,
  # one run each under the same load (`load` above).
  start_nginx 1 201 "$NGINX_BODY"
  # nginx knows no key and answers 201 to everything: only a non-2xx answer would be wrong.
  load peer-nginx "nginx, fixed 201 (1 worker)" --key none --any-2xx "$@"
  stop_server
  for policy in always everysec never; do
    start_roost "$ROOST_BIN" "$policy"
    load "peer-roost-$policy" "roost --fsync $policy" --setup --admin-key "$ROOST_ADMIN_KEY" --roost-bin "$ROOST_BIN" "$@"
    stop_server
  done
  for policy in always everysec; do peer_redis "peer-redis-$policy" "redis appendfsync $policy" "$policy"; done
  for sync in on off; do peer_postgres "peer-postgres-$sync" "postgres synchronous_commit $sync" "$sync"; done
}
