#!/usr/bin/env python3
"""Rejoin of a node that restarts with a long log after its checkpoint
(spec §13.2, §13.6): before it serves, the node compares the records after
its checkpoint with the group log's batches, page by page (8 batches the first
etcd read), and cuts what etcd does not hold.

One etcd member and three nodes; wrk registers devices on the leader for
SECONDS (Benchmarks/spine/register.lua, 2 threads x 64 connections); a
follower is killed with SIGKILL (no final snapshot: everything it logged is
after its checkpoint) and started again. Prints the records it held, the
time until it printed `listening on`, the rate, and whether its export
equals the leader's. ROUNDS restarts of the same node, each timed.

usage: rejoin.py ROOST_BINARY [--seconds S] [--rounds N]
"""
import argparse, json, os, shutil, signal, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import ADMIN, app_key, request, start_cluster, stop_all  # noqa: E402
import throughput  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="roost-rejoin-")
    etcd, nodes = None, []
    try:
        etcd, _, nodes, leader = start_cluster(args.binary, directory)
        key = app_key(leader.port)
        os.environ["ROOST_KEY"] = key
        rate, non2xx = throughput.wrk(leader.port, args.seconds)
        _, body = request(leader.port, "GET", "/v1/cluster", ADMIN)
        committed = json.loads(body)["committed_lsn"]
        print(f"load: {rate:.0f} req/s for {args.seconds} s ({non2xx} non-2xx); group log through LSN {committed}",
              flush=True)
        follower = next(node for node in nodes if node is not leader)
        for round in range(1, args.rounds + 1):
            follower.process.send_signal(signal.SIGKILL)
            follower.process.wait()
            started = time.monotonic()
            follower.start()
            took = time.monotonic() - started
            _, mine = request(follower.port, "GET", "/v1/devices/export", key, timeout=60)
            _, theirs = request(leader.port, "GET", "/v1/devices/export", key, timeout=60)
            print(f"round {round}: restarted with ~{committed} records after its checkpoint, served after "
                  f"{took:.2f} s ({committed / took:.0f} records/s); export "
                  f"{'identical' if mine == theirs else 'DIFFERENT'}", flush=True)
    finally:
        stop_all(nodes, etcd)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
