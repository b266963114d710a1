#!/bin/sh
# `make cluster`: one etcd member and three roost nodes on loopback, for a
# try-out of cluster mode (docs/cluster.md). Data in $CLUSTER_DIR (default
# ./roost-cluster); nodes on 127.0.0.1:8081..8083, etcd on 127.0.0.1:2379.
# Ctrl-C stops every process this script started (by PID) and keeps the data.
set -eu
ROOST="$1"
DIR="${CLUSTER_DIR:-./roost-cluster}"
ETCD_PORT="${ETCD_PORT:-2379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-2380}"
NAME="${CLUSTER_NAME:-demo}"
: "${ROOST_ADMIN_KEY:=roost-cluster-demo-admin-key}"
export ROOST_ADMIN_KEY
mkdir -p "$DIR"
PIDS=""
stop() {
  trap - INT TERM EXIT
  for pid in $PIDS; do kill "$pid" 2>/dev/null || true; done
  for pid in $PIDS; do wait "$pid" 2>/dev/null || true; done
  echo "stopped; data kept in $DIR"
}
trap stop INT TERM EXIT

/usr/bin/etcd --name roost-demo --data-dir "$DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "roost-demo=http://127.0.0.1:$ETCD_PEER_PORT" \
  --heartbeat-interval 50 --election-timeout 500 >"$DIR/etcd.log" 2>&1 &
PIDS="$PIDS $!"
ETCD="http://127.0.0.1:$ETCD_PORT"
tries=0
until "$ROOST" cluster init --etcd "$ETCD" --cluster "$NAME" >/dev/null 2>"$DIR/init.err"; do
  grep -q "already exists" "$DIR/init.err" && break
  tries=$((tries + 1))
  [ "$tries" -lt 100 ] || { cat "$DIR/init.err"; exit 1; }
  sleep 0.1
done
for n in 1 2 3; do
  "$ROOST" serve --listen "127.0.0.1:808$n" --data "$DIR/n$n" --cluster "$NAME" --node-id "n$n" \
    --etcd "$ETCD" --lease-ttl-s 1 >"$DIR/n$n.out" 2>"$DIR/n$n.log" &
  PIDS="$PIDS $!"
  echo "node n$n: pid $!, http://127.0.0.1:808$n, log $DIR/n$n.log"
done
cat <<TOUR

Cluster '$NAME' is starting (operator key: ROOST_ADMIN_KEY=$ROOST_ADMIN_KEY).
  curl -s 127.0.0.1:8081/v1/cluster -H "Authorization: Bearer \$ROOST_ADMIN_KEY"   # who leads
  for n in 1 2 3; do curl -s -o /dev/null -w "808\$n %{http_code}\n" 127.0.0.1:808\$n/readyz; done  # 200: the leader
Kill the leader's pid (kill -9 PID) and watch another node's /readyz turn 200 within about a second.
Ctrl-C stops everything.
TOUR
wait
