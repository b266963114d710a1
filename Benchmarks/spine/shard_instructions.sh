#!/usr/bin/env bash
# Instructions the shard's thread spends per in-process re-registration
# (issue 25's in-process target), counted by valgrind's callgrind: steady to a
# few instructions from run to run, where the wall clock of
# `roost-bench registry` moves by 10 % on a shared 2-core machine.
#
#   Benchmarks/spine/shard_instructions.sh ROOST_BENCH OUTDIR [DEVICES (200000)] [TOP (40)]
#
# Runs `ROOST_BENCH registry --devices DEVICES --through re-register` under
# `valgrind --tool=callgrind --separate-threads=yes` from a copy without its
# DWARF (valgrind 3.19 cannot read a link-time-optimised build's, decision
# 0094), dumps the counters (`callgrind_control -d`) once the populate line is
# printed, so that the last dump holds the re-registration phase alone, and
# prints the instructions per re-registration of the thread that spent the
# most in it (the shard's; the submitters build requests on the other threads)
# and its TOP functions by their own instructions, demangled. 200,000 devices
# pass the change feed's retention (100,000) as a million do. Takes about two
# and a half minutes. The callgrind files stay in OUTDIR for
# `callgrind_annotate --tree=caller`.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 ROOST_BENCH OUTDIR [DEVICES] [TOP]" >&2
  exit 2
fi
bench=$1
out=$2
devices=${3:-200000}
top=${4:-40}
for tool in valgrind callgrind_control callgrind_annotate objcopy swift-demangle; do
  command -v "$tool" > /dev/null || { echo "$0: $tool not found" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"
objcopy --strip-debug "$bench" "$out/roost-bench"
valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/callgrind" \
  "$out/roost-bench" registry --devices "$devices" --through re-register > "$out/log" 2>&1 &
valgrind_pid=$!
# The populate line is printed when that phase ends; stop waiting if valgrind does.
until grep -q '^populate' "$out/log" || ! kill -0 "$valgrind_pid" 2> /dev/null; do sleep 0.2; done
grep -q '^populate' "$out/log" || { cat "$out/log" >&2; exit 1; }
callgrind_control -d "$valgrind_pid" > /dev/null
wait "$valgrind_pid" || { cat "$out/log" >&2; exit 1; }
shard=""
best=0
# The final dump's files are callgrind-NN (the populate dump's are callgrind.1-NN).
for file in "$out"/callgrind-[0-9]*; do
  total=$(callgrind_annotate "$file" 2> /dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  if [[ "$total" =~ ^[0-9]+$ ]] && ((total > best)); then
    best=$total
    shard=$file
  fi
done
[[ -n "$shard" ]] || { echo "$0: no thread counted" >&2; exit 1; }
echo "shard thread: $((best / devices)) instructions per re-registration ($shard)"
callgrind_annotate --threshold=100 "$shard" 2> /dev/null \
  | awk -v n="$devices" '/^ *[0-9,]+ +\(/ && !/PROGRAM TOTALS/ {
      count = $1; gsub(",", "", count); name = $0; sub(/^ *[0-9,]+ +\([^)]*\) +[^:]*:/, "", name)
      sub(/ +\[[^]]*\]$/, "", name); printf "%8d %s\n", count / n, name }' \
  | swift-demangle --simplified | sort -rn | head -n "$top"
