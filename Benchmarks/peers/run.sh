#!/usr/bin/env bash
# The peers of `make bench` alone, in rounds, with medians (make bench-peers):
#
#   Benchmarks/peers/run.sh [SECONDS] [ROUNDS]
#
# Each round runs, one after the other, each for SECONDS and on a fresh
# server: nginx (fixed 201, 1 worker), roost --fsync always / everysec /
# never (`roost-bench load --setup`), Redis appendfsync always / everysec and
# PostgreSQL synchronous_commit on / off (Benchmarks/peers/peers.sh) — the
# same registrations as `make bench`'s peers table. It prints each round's
# `roost-bench compare` table, then per peer the median answers/s and the
# median of the per-round ratios to roost --fsync always (a ratio is taken
# within a round, where the machine's load was the same). Result files in
# $BENCH_OUT/round-N/ (.build/bench-peers). Exits 1 when a run failed.
# Environment: ROOST_BIN, ROOST_BENCH_BIN, BENCH_OUT, BENCH_TOKENS, BENCH_PEOPLE.
set -euo pipefail
cd "$(dirname "$0")/../.."
. Benchmarks/lib.sh
. Benchmarks/peers/peers.sh
SECONDS_PER_RUN=${1:-10}
ROUNDS=${2:-3}
BASE_OUT=${BENCH_OUT:-.build/bench-peers}
TOKENS=${BENCH_TOKENS:-1000000}
PEOPLE=${BENCH_PEOPLE:-200000}
CONNECTIONS=64
bench_require nginx curl python3
peers_require
bench_binaries
bench_init peers
COMMAND="$0 $*"
LOAD_AT_START=$(cut -d' ' -f1-3 /proc/loadavg)
SHAPE=(--mix register=1 --android 0 --tags 0 --tokens "$TOKENS" --people "$PEOPLE")
failed=0
NAMES=(peer-nginx peer-roost-always peer-roost-everysec peer-roost-never peer-redis-always peer-redis-everysec
  peer-postgres-on peer-postgres-off)
echo "peers: ${SECONDS_PER_RUN} s × $ROUNDS rounds, roost $ROOST_BIN, load $LOAD_AT_START"
for round in $(seq "$ROUNDS"); do
  OUT=$BASE_OUT/round-$round
  rm -rf "$OUT"; mkdir -p "$OUT"
  echo "round $round:"
  peers_run_all "${SHAPE[@]}"
  files=()
  for name in "${NAMES[@]}"; do [ -f "$OUT/$name.json" ] && files+=("$OUT/$name.json"); done
  "$ROOST_BENCH_BIN" compare "${files[@]}" --baseline 2 || failed=1
done
echo
echo "Command: \`$COMMAND\` ($(date -u +%Y-%m-%d); load average $LOAD_AT_START at the start," \
  "$(cut -d' ' -f1-3 /proc/loadavg) at the end; niceness $(nice))"
echo
python3 - "$BASE_OUT" "$ROUNDS" "${NAMES[@]}" <<'PY'
import json, os, statistics, sys
base, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def read(round_, name):
    try:
        result = json.load(open(os.path.join(base, f"round-{round_}", f"{name}.json")))
    except OSError:
        return None
    return result if result["summary"].get("passed") else None
print("| peer | median answers/s | runs (answers/s) | median × roost --fsync always | median p99 ms |")
print("|---|---|---|---|---|")
for name in names:
    rates, ratios, p99s, label = [], [], [], name
    for r in range(1, rounds + 1):
        run, baseline = read(r, name), read(r, "peer-roost-always")
        if run is None:
            continue
        label = run.get("label", name)
        rates.append(run["summary"]["rate"])
        p99 = run["summary"]["latency_us"].get("p99")
        if p99 is not None:
            p99s.append(p99 / 1000)
        if baseline is not None and baseline["summary"]["rate"] > 0:
            ratios.append(run["summary"]["rate"] / baseline["summary"]["rate"])
    if not rates:
        print(f"| {label} | FAILED | - | - | - |")
        continue
    print(f"| {label} | {statistics.median(rates):,.0f} | {', '.join(f'{x:,.0f}' for x in rates)} | "
          f"{statistics.median(ratios):.2f}× | {statistics.median(p99s):.2f} |" if ratios and p99s else
          f"| {label} | {statistics.median(rates):,.0f} | {', '.join(f'{x:,.0f}' for x in rates)} | - | - |")
PY
exit $failed
