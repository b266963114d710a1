#!/usr/bin/env python3
"""etcd's size under sustained writes (issue 22: "etcd's db size stays
bounded over 10 minutes at the peak (report it)").

One etcd member and three nodes (`--fsync always`, `--lease-ttl-s 1`, the
default `--log-retain-bytes` and `--snapshot-log-bytes` unless given); wrk
registers devices on the leader for SECONDS at its peak
(Benchmarks/spine/register.lua, 2 threads x 64 connections) while this
script samples `GET /v1/cluster` on the leader every INTERVAL seconds: the
group log's first and last position, the bytes of batches the group log holds as the leader counts them, and
etcd's `db_bytes`. Prints one line per sample and the largest db size.

usage: etcd_size.py ROOST_BINARY [--seconds S] [--interval I] [--node-flag FLAG=VALUE ...]
"""
import argparse, json, os, shutil, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import ADMIN, app_key, request, start_cluster, stop_all  # noqa: E402
import throughput  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--interval", type=int, default=30)
    parser.add_argument("--node-flag", action="append", default=[],
                        help="an extra `roost serve` flag, as --snapshot-log-bytes=67108864")
    args = parser.parse_args()
    extra = [part for flag in args.node_flag for part in flag.split("=", 1)]
    directory = tempfile.mkdtemp(prefix="roost-etcd-size-")
    etcd, nodes = None, []
    samples = []
    try:
        etcd, _, nodes, leader = start_cluster(args.binary, directory, extra=extra)
        key = app_key(leader.port)
        os.environ["ROOST_KEY"] = key
        done = threading.Event()
        started = time.monotonic()

        def sample():
            while not done.wait(args.interval):
                try:
                    _, body = request(leader.port, "GET", "/v1/cluster", ADMIN, timeout=5)
                except OSError as error:
                    print(f"{time.monotonic() - started:6.0f} s  sample failed: {error}", flush=True)
                    continue
                status = json.loads(body)
                row = (time.monotonic() - started, status["log"]["first_position"], status["log"]["last_position"],
                       status["log"]["bytes"], status["etcd"]["db_bytes"])
                samples.append(row)
                print(f"{row[0]:6.0f} s  group log {row[1]}..{row[2]}  {row[3] / 2**20:7.1f} MiB of batches held  "
                      f"etcd db {row[4] / 2**20:7.1f} MiB", flush=True)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rate, non2xx = throughput.wrk(leader.port, args.seconds)
        done.set()
        sampler.join()
        print(f"load: {rate:.0f} req/s for {args.seconds} s ({non2xx} non-2xx)")
        if samples:
            largest = max(samples, key=lambda row: row[4])
            print(f"largest etcd db: {largest[4] / 2**20:.1f} MiB at {largest[0]:.0f} s; "
                  f"last: {samples[-1][4] / 2**20:.1f} MiB")
    finally:
        stop_all(nodes, etcd)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
