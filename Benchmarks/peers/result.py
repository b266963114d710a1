#!/usr/bin/env python3
"""A peer's result file for `roost-bench compare` (docs/benchmarking.md, "Peer result files").

    result.py redis  --csv OUT.csv --stats INFO.txt --requests N ... --out NAME.json
    result.py pgbench --output OUT.txt --log-prefix PREFIX ... --out NAME.json

redis: OUT.csv is `redis-benchmark --csv`; INFO.txt is `INFO stats` +
`INFO commandstats` taken after the run (the server counted every call and
every error reply: those are the status check).
pgbench: OUT.txt is pgbench's report; PREFIX.* its `--log` files (one line per
transaction, latency in µs), from which the percentiles are computed exactly.

Both take --label, --server (name and version), --command (the exact command,
shell-quoted), --settings (the durability settings), --connections, --tokens,
--people, --cpu "USER SYSTEM REAL" (seconds, bash `time` of the client) and
--rows (the devices the server holds after the run, checked > 0).
The run passes when the errors are at most 0.1 % of the requests (as
`roost-bench load`, errorFractionMax) and the server holds devices.
"""
import argparse
import csv
import glob
import json
import os
import platform
import re
import sys
import time

ERROR_FRACTION_MAX = 0.001


def machine():
    cpu = "unknown"
    memory_kib = 0
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "cpu": cpu,
        "memory_kib": memory_kib,
        "load_average_at_start": " ".join(open("/proc/loadavg").read().split()[:3]),
    }


def percentile(sorted_values, fraction):
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, int(-(-fraction * len(sorted_values) // 1)) - 1))
    return sorted_values[index]


def redis(args):
    rows = list(csv.reader(open(args.csv)))
    if len(rows) < 2:
        sys.exit(f"{args.csv}: no result row")
    header, values = rows[0], rows[-1]
    figures = dict(zip(header, values))

    def us(key):
        return round(float(figures[key]) * 1000, 1)

    stats = open(args.stats).read()
    calls = re.search(r"cmdstat_evalsha:calls=(\d+)", stats)
    failed = re.search(r"cmdstat_evalsha:.*failed_calls=(\d+)", stats)
    rejected = re.search(r"cmdstat_evalsha:.*rejected_calls=(\d+)", stats)
    errors_total = re.search(r"total_error_replies:(\d+)", stats)
    calls = int(calls.group(1)) if calls else 0
    errors = max(
        int(errors_total.group(1)) if errors_total else 0,
        (int(failed.group(1)) if failed else 0) + (int(rejected.group(1)) if rejected else 0),
    )
    # Every request redis-benchmark sent must have been a script call the server counted.
    missing = max(0, args.requests - calls)
    rate = float(figures["rps"])
    latency = {
        "p50": us("p50_latency_ms"),
        "p95": us("p95_latency_ms"),
        "p99": us("p99_latency_ms"),
        "max": us("max_latency_ms"),
        "mean": us("avg_latency_ms"),
        "count": args.requests,
    }
    check = f"server counted {calls} EVALSHA calls for {args.requests} requests, {errors} error replies"
    return args.requests, calls, errors + missing, rate, args.requests / rate if rate > 0 else 0, latency, check


def pgbench(args):
    report = open(args.output).read()
    processed = re.search(r"number of transactions actually processed: (\d+)", report)
    failed = re.search(r"number of failed transactions: (\d+)", report)
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", report)
    aborted = len(re.findall(r"aborted", report))
    processed = int(processed.group(1)) if processed else 0
    latencies = []
    started, ended = None, None
    for path in glob.glob(args.log_prefix + ".*"):
        for line in open(path):
            fields = line.split()
            if len(fields) < 6 or fields[2] == "failed" or fields[2] == "skipped":
                continue
            latencies.append(int(fields[2]))
            finished = int(fields[4]) + int(fields[5]) / 1e6
            started = min(started, finished) if started is not None else finished
            ended = max(ended, finished) if ended is not None else finished
    latencies.sort()
    errors = (int(failed.group(1)) if failed else 0) + aborted + (0 if processed else 1)
    rate = float(tps.group(1)) if tps else 0.0
    latency = {
        "p50": percentile(latencies, 0.50),
        "p90": percentile(latencies, 0.90),
        "p99": percentile(latencies, 0.99),
        "p99.9": percentile(latencies, 0.999),
        "max": latencies[-1] if latencies else None,
        "mean": round(sum(latencies) / len(latencies), 1) if latencies else None,
        "count": len(latencies),
    }
    if len(latencies) != processed:
        errors += abs(processed - len(latencies))
    check = f"{processed} transactions processed, {errors} failed or aborted, {len(latencies)} logged"
    elapsed = processed / rate if rate > 0 else 0
    return processed + errors, processed, errors, rate, elapsed, latency, check


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tool", choices=["redis", "pgbench"])
    parser.add_argument("--csv")
    parser.add_argument("--stats")
    parser.add_argument("--requests", type=int, default=0)
    parser.add_argument("--output")
    parser.add_argument("--log-prefix")
    parser.add_argument("--label", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--command", required=True)
    parser.add_argument("--settings", required=True)
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--people", type=int, required=True)
    parser.add_argument("--cpu", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    sent, answered, errors, rate, elapsed, latency, check = (redis if args.tool == "redis" else pgbench)(args)
    user, system, real = (float(x) for x in args.cpu.split())
    fraction = errors / max(sent, 1)
    passed = fraction <= ERROR_FRACTION_MAX and args.rows > 0 and answered > 0
    result = {
        "roost_bench": "peer",
        "format": 1,
        "label": args.label,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool": "redis-benchmark" if args.tool == "redis" else "pgbench",
        "server": args.server,
        "command": args.command,
        "config": {
            "mode": "closed",
            "rate": None,
            "connections": args.connections,
            "threads": 1,
            "tokens": args.tokens,
            "people": args.people,
            "settings": args.settings,
        },
        "machine": machine(),
        "summary": {
            "sent": sent,
            "answered": answered,
            "unexpected": errors,
            "error_fraction": round(fraction, 6),
            "passed": passed,
            "devices_held": args.rows,
            "check": check,
            "elapsed_s": round(elapsed, 3),
            "rate": round(rate, 1),
            "latency_us": latency,
            "generator_cpu": {
                "user_s": user,
                "system_s": system,
                "percent_of_core": round((user + system) / real * 100, 1) if real > 0 else 0,
            },
        },
    }
    with open(args.out, "w") as out:
        json.dump(result, out, indent=1)
        out.write("\n")
    print(f"{args.label}: {rate:,.0f}/s, p50 {latency['p50']} µs, p99 {latency['p99']} µs; {check}"
          + ("" if passed else " — FAILED"))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
