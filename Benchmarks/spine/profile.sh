#!/bin/bash
# Where a registration's server CPU goes: `perf record -g` (2,000 Hz, 8 s) of a
# release `roost serve --fsync never` while wrk (2 threads x 64 connections)
# registers through Benchmarks/spine/register.lua, after 3 s of warm-up.
# Prints wrk's rate and perf's top symbols; keeps the profile in
# /tmp/perf-reg.data for `perf report -i` or `perf script -i`. Stops what it
# started, by PID.
#
#   Benchmarks/spine/profile.sh .build/release/roost
set -euo pipefail
BIN=$(realpath "$1")
root=$(pwd)
work=$(mktemp -d /var/tmp/roost-perf-XXXXXX)
cd "$work"
export ROOST_ADMIN_KEY=prof-admin-key-0123456789abcdef
$BIN serve --listen 127.0.0.1:0 --data data --fsync never > out 2> err &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 300); do grep -q "listening on" out 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' out)
app=$(curl -sf -X POST "127.0.0.1:$port/v1/apps" -H "Authorization: Bearer $ROOST_ADMIN_KEY" -d '{"name":"b","settings":{"max_devices_per_person":1000}}' | sed -n 's/^{"id":\([0-9]*\),.*/\1/p')
export ROOST_KEY=$(curl -sf -X POST "127.0.0.1:$port/v1/apps/$app/keys" -H "Authorization: Bearer $ROOST_ADMIN_KEY" -d '{"kind":"secret","capabilities":["devices:write","devices:read"]}' | sed -n 's/.*"key":"\([^"]*\)".*/\1/p')
export SPINE_COUNT_STATUS=0
wrk -t2 -c64 -d3s -s "$root/Benchmarks/spine/register.lua" http://127.0.0.1:$port/v1/devices > /dev/null
perf record -F 2000 -g -p $pid -o $work/perf.data -- sleep 8 > /dev/null 2>&1 &
ppid=$!
wrk -t2 -c64 -d8s -s "$root/Benchmarks/spine/register.lua" http://127.0.0.1:$port/v1/devices | grep -E "requests in|Requests/sec"
wait $ppid || true
kill $pid; wait $pid || true
cp $work/perf.data /tmp/perf-reg.data
perf report -i $work/perf.data --no-children --sort symbol --stdio 2>/dev/null | grep -E "^ +[0-9]" > $work/top.txt || true; head -25 $work/top.txt
