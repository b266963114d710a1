#!/usr/bin/env bash
# The standard benchmark suite (`make bench`), peers side by side in one run:
#
#   Benchmarks/bench.sh [SECONDS]          (make bench BENCH_SECONDS=10)
#
# Every load is `roost-bench load` (every answer's status checked), closed
# loop over 64 keep-alive connections unless said otherwise, SECONDS each:
#
#   peers    the same registrations (register only, 1M tokens, 200k people,
#            iOS, no tags) against nginx answering a fixed 201 device body
#            (the HTTP ceiling of this machine), roost --fsync always,
#            everysec and never, and the same work in Redis 7 (a Lua script:
#            device hash, person set, the per-person cap; appendfsync always
#            and everysec, over redis-benchmark) and PostgreSQL 15 (an INSERT …
#            ON CONFLICT upsert, synchronous_commit on and off, over pgbench),
#            each with the same connections (Benchmarks/peers/peers.sh);
#   dialects the standard mix (register=80,refresh=10,rotate=4,move=3,
#            delete=1,feedback=1,read=1; 40 % Android, 2 tags) in each dialect
#            (native, barua, nativenotify, connect) on roost --fsync always,
#            each on a fresh app made by --setup (exact expectations);
#   latency  open loop at 25, 50 and 75 % of the `always` peer rate, native
#            registrations, latency from the intended send time;
#   memory   1M devices in Roost (CSV import) and in Redis (hash + set):
#            RSS per device, restart from snapshot/RDB and from log/AOF
#            (Benchmarks/peers/memory.py).
#
# It writes the result files to $BENCH_OUT (.build/bench), the plots to
# docs/img/bench-*.svg, and replaces the block between the `bench:begin` and
# `bench:end` markers of docs/performance.md with the tables (machine,
# commit, command), and the block between `peers-memory:begin` and
# `peers-memory:end` with the memory and restart table. Exits 1 when a run
# failed (its row says FAILED).
# Environment: ROOST_BIN, ROOST_BENCH_BIN (default: the release build),
# BENCH_OUT, BENCH_DOC (docs/performance.md), BENCH_TOKENS, BENCH_PEOPLE,
# BENCH_DIALECT_TOKENS (200000), BENCH_DIALECT_PEOPLE (40000),
# BENCH_MEMORY_DEVICES (1000000; 0 skips the memory part), BENCH_MEMORY_RESTARTS (3).
set -euo pipefail
cd "$(dirname "$0")/.."
. Benchmarks/lib.sh
. Benchmarks/peers/peers.sh
SECONDS_PER_RUN=${1:-10}
OUT=${BENCH_OUT:-.build/bench}
DOC=${BENCH_DOC:-docs/performance.md}
IMG=docs/img
TOKENS=${BENCH_TOKENS:-1000000}
PEOPLE=${BENCH_PEOPLE:-200000}
DIALECT_TOKENS=${BENCH_DIALECT_TOKENS:-200000}
DIALECT_PEOPLE=${BENCH_DIALECT_PEOPLE:-40000}
MEMORY_DEVICES=${BENCH_MEMORY_DEVICES:-1000000}
MEMORY_RESTARTS=${BENCH_MEMORY_RESTARTS:-3}
CONNECTIONS=64
bench_require nginx curl python3 git
peers_require
bench_binaries
bench_init suite
mkdir -p "$OUT" "$IMG"
rm -f "$OUT"/*.json
LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- Sources Benchmarks Package.swift || echo " + uncommitted changes")
started=$(date +%s)

for check in selftest-histogram selftest-load selftest-crash; do
  "$ROOST_BENCH_BIN" $check > "$work/selftest" || { cat "$work/selftest"; echo "roost-bench $check failed"; exit 1; }
done

failed=0
SPINE_SHAPE=(--mix register=1 --android 0 --tags 0 --tokens "$TOKENS" --people "$PEOPLE")

echo "bench: ${SECONDS_PER_RUN} s per run, roost $ROOST_BIN, commit $COMMIT, load $LOAD_AT_START"
echo "peers (registrations, the same load):"
peers_run_all "${SPINE_SHAPE[@]}"

echo "dialects (standard mix, --fsync always, fresh app each):"
for dialect in native barua nativenotify connect; do
  start_roost "$ROOST_BIN" always
  load "mix-$dialect" "$dialect, standard mix" --setup --admin-key "$ROOST_ADMIN_KEY" --roost-bin "$ROOST_BIN" \
    --dialect "$dialect" --tokens "$DIALECT_TOKENS" --people "$DIALECT_PEOPLE" \
    --plot "$IMG/bench-mix-$dialect.svg"
  stop_server
done

echo "latency against offered rate (open loop, --fsync always):"
peak=$(python3 -c "import json; print(int(json.load(open('$OUT/peer-roost-always.json'))['summary']['rate']))" 2>/dev/null || echo 0)
if [ "$peak" -gt 0 ]; then
  for percent in 25 50 75; do
    rate=$((peak * percent / 100))
    start_roost "$ROOST_BIN" always
    load "open-$percent" "open loop at $percent % of peak ($rate/s)" --setup --admin-key "$ROOST_ADMIN_KEY" \
      --rate "$rate" "${SPINE_SHAPE[@]}"
    stop_server
  done
else
  failed=1
  echo "  not run: no rate from the always run"
fi

compare() { # roost-bench compare arguments…
  "$ROOST_BENCH_BIN" compare "$@" 2> "$work/compare.err" || { cat "$work/compare.err" >&2; return 1; }
}
# A peer whose run failed before writing its file is left out (its FAILED line is above).
other_peers=()
for name in peer-redis-always peer-redis-everysec peer-postgres-on peer-postgres-off; do
  [ -f "$OUT/$name.json" ] && other_peers+=("$OUT/$name.json")
done
peers=$(compare "$OUT"/peer-nginx.json "$OUT"/peer-roost-{always,everysec,never}.json "${other_peers[@]}" \
  --baseline 2 --plot "$IMG/bench-peers.svg" --title "registrations/s, the same load ($CONNECTIONS connections each)") \
  || failed=1
dialects=$(compare "$OUT"/mix-{native,barua,nativenotify,connect}.json) || failed=1
latency=$(compare "$OUT"/peer-roost-always.json "$OUT"/open-{25,50,75}.json --latency-plot "$IMG/bench-latency.svg") \
  || failed=1
echo "memory and restart, Roost next to Redis ($MEMORY_DEVICES devices):"
memory="(not run: BENCH_MEMORY_DEVICES=0)"
if [ "$MEMORY_DEVICES" -gt 0 ]; then
  if timeout 1800 python3 "$PEERS_DIR/memory.py" --roost-bin "$ROOST_BIN" --devices "$MEMORY_DEVICES" \
    --restarts "$MEMORY_RESTARTS" --markdown "$OUT/memory.md" --json "$OUT/memory.json" \
    > "$work/memory.out" 2> "$work/memory.err"; then
    memory=$(cat "$OUT/memory.md")
    echo "  done"
  else
    failed=1
    memory="FAILED: $(tail -3 "$work/memory.err" | tr '\n' ' ')"
    echo "  FAILED"; tail -20 "$work/memory.err" | sed 's/^/    /'
  fi
fi
elapsed=$(( $(date +%s) - started ))
machine=$(python3 -c "
import json; m = json.load(open('$OUT/peer-nginx.json'))['machine']
print(f\"{m['cores']} cores ({m['cpu']}), {m['memory_kib'] // 1048576} GiB, {m['kernel']}\")" 2>/dev/null || echo unknown)
version=$(python3 -c "import json; print(json.load(open('$OUT/peer-roost-always.json'))['roost']['version'])" 2>/dev/null || echo unknown)

report="$OUT/report.md"
{
  echo "<!-- bench:begin — written by \`make bench\` (Benchmarks/bench.sh); do not edit by hand -->"
  echo "Last \`make bench BENCH_SECONDS=$SECONDS_PER_RUN\`: $(date -u +%Y-%m-%d), commit \`$COMMIT\`, roost version $version;"
  echo "machine: $machine; load average $LOAD_AT_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; niceness $(nice); $elapsed s in all."
  echo "Every Roost and nginx run \`roost-bench load\`, Redis \`redis-benchmark\`, PostgreSQL \`pgbench\`; $CONNECTIONS keep-alive connections, one client thread, $SECONDS_PER_RUN s; the result files are in \`$OUT/\`."
  echo
  echo "**Peers** (the same registrations: register only, $TOKENS tokens, $PEOPLE people, iOS, no tags; closed loop, $CONNECTIONS connections each; ratios against roost \`--fsync always\`; Redis and PostgreSQL as in docs/benchmarking.md, \"Peers\", with the exact commands in their result files):"
  echo
  echo "$peers"
  echo
  echo "![registrations/s per peer](img/bench-peers.svg)"
  echo
  echo "**Dialects** (the standard mix, 40 % Android, 2 tags where the dialect has tags, $DIALECT_TOKENS tokens, $DIALECT_PEOPLE people; \`--fsync always\`, a fresh app each):"
  echo
  echo "$dialects"
  echo
  echo "![native mix over time](img/bench-mix-native.svg)"
  echo
  echo "**Latency against offered rate** (open loop from the intended send time, registrations, \`--fsync always\`; the first row is the closed-loop peak):"
  echo
  echo "$latency"
  echo
  echo "![latency against offered rate](img/bench-latency.svg)"
  echo "<!-- bench:end -->"
} > "$report"
memory_report="$OUT/memory-report.md"
{
  echo "<!-- peers-memory:begin — written by \`make bench\` (Benchmarks/peers/memory.py); do not edit by hand -->"
  echo "$memory"
  echo "<!-- peers-memory:end -->"
} > "$memory_report"
python3 - "$DOC" "$report" bench "$memory_report" peers-memory <<'PY'
import sys
doc = sys.argv[1]
text = open(doc).read()
for report, name in zip(sys.argv[2::2], sys.argv[3::2]):
    block = open(report).read().rstrip("\n")
    begin = text.find(f"<!-- {name}:begin")
    end = text.find(f"<!-- {name}:end -->")
    if begin < 0 or end < 0:
        sys.exit(f"{doc}: no {name}:begin / {name}:end markers")
    end += len(f"<!-- {name}:end -->")
    text = text[:begin] + block + text[end:]
open(doc, "w").write(text)
PY
cat "$report" "$memory_report"
echo
echo "(written to $report and $DOC; plots in $IMG/bench-*.svg)"
exit $failed
