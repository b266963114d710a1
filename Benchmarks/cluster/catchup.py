#!/usr/bin/env python3
"""Catch-up of a node that joins a cluster with an empty directory (spec §13.6).

One etcd member and three nodes; wrk registers devices on the leader for
SECONDS (Benchmarks/spine/register.lua, 2 threads x 64 connections); then a
fourth node starts with an empty --data directory. Prints the group log's
size in etcd (the leader's `log.bytes` and etcd's `db_bytes`), the time the new
node took to print `listening on` (it reads the whole group log, a page of at
first page 8 batches, the next sized by their batches, decision 0091), and whether its export equals the leader's.

usage: catchup.py ROOST_BINARY [--seconds S]
"""
import argparse, json, os, shutil, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import ADMIN, Node, app_key, request, start_cluster, stop_all  # noqa: E402
import throughput  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="roost-catchup-")
    etcd, nodes = None, []
    try:
        etcd, etcd_url, nodes, leader = start_cluster(args.binary, directory)
        key = app_key(leader.port)
        os.environ["ROOST_KEY"] = key
        rate, non2xx = throughput.wrk(leader.port, args.seconds)
        _, body = request(leader.port, "GET", "/v1/cluster", ADMIN)
        status = json.loads(body)
        print(f"load: {rate:.0f} req/s for {args.seconds} s ({non2xx} non-2xx); group log through LSN "
              f"{status['committed_lsn']}, {status['log']['bytes']} bytes of batches; etcd db {status['etcd']['db_bytes']} bytes",
              flush=True)
        joining = Node(args.binary, directory, 4, etcd_url)
        started = time.monotonic()
        joining.start()
        took = time.monotonic() - started
        nodes.append(joining)
        _, joined = request(joining.port, "GET", "/v1/cluster", ADMIN)
        applied = json.loads(joined)["applied_lsn"]
        _, mine = request(joining.port, "GET", "/v1/devices/export", key, timeout=60)
        _, theirs = request(leader.port, "GET", "/v1/devices/export", key, timeout=60)
        print(f"an empty node caught up to LSN {applied} and served after {took:.2f} s; "
              f"export {'identical' if mine == theirs else 'DIFFERENT'} ({mine.count(chr(10).encode())} devices)")
    finally:
        stop_all(nodes, etcd)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
