#!/bin/bash
# Syscalls per registration (issue 25 item 4): `strace -c -f` on a release
# `roost serve --fsync never` while wrk (2 threads x 64 connections, 5 s)
# registers through Benchmarks/spine/register.lua; prints wrk's request count
# and strace's table (divide each count by it). Stops what it started, by PID.
#
#   Benchmarks/spine/syscalls.sh .build/release/roost
set -euo pipefail
BIN=$(realpath "$1")
root=$(pwd)
work=$(mktemp -d /var/tmp/roost-syscalls-XXXXXX)
cd "$work"
trap 'rm -rf "$work"' EXIT
export ROOST_ADMIN_KEY=prof-admin-key-0123456789abcdef
rm -rf data out err
$BIN serve --listen 127.0.0.1:0 --data data --fsync never > out 2> err &
pid=$!
for _ in $(seq 300); do grep -q "listening on" out 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' out)
app=$(curl -sf -X POST "127.0.0.1:$port/v1/apps" -H "Authorization: Bearer $ROOST_ADMIN_KEY" -d '{"name":"b","settings":{"max_devices_per_person":1000}}' | sed -n 's/^{"id":\([0-9]*\),.*/\1/p')
export ROOST_KEY=$(curl -sf -X POST "127.0.0.1:$port/v1/apps/$app/keys" -H "Authorization: Bearer $ROOST_ADMIN_KEY" -d '{"kind":"secret","capabilities":["devices:write","devices:read"]}' | sed -n 's/.*"key":"\([^"]*\)".*/\1/p')
export SPINE_COUNT_STATUS=0
timeout 8 strace -c -f -p $pid -o $work/strace.txt &
spid=$!
sleep 0.5
wrk -t2 -c64 -d5s -s "$root/Benchmarks/spine/register.lua" http://127.0.0.1:$port/v1/devices | grep -E "requests in|Requests/sec"
wait $spid || true
kill $pid; wait $pid || true
head -20 "$work/strace.txt"
