#!/usr/bin/env python3
"""A follower that restarts while the leader takes a steady stream of small
writes must catch up and serve (spec §13.6): the case `make cluster-soak`
found, where a restarted follower read 8 batches of ~500 bytes a round trip,
applied them one job a batch, fell further behind a leader writing one batch
a write, and never printed `listening on`.

One etcd member and three nodes (`--snapshot-log-bytes 1048576`, as the
soak); WRITERS threads register new devices one after another on the leader,
each write its own batch (the soak's writers); after BACKLOG seconds a
follower is killed with SIGKILL, stays down DOWN seconds while the writes go
on, and starts again while they still go on. Prints how far behind it
started, how long it took to print `listening on` (or that it did not within
TIMEOUT seconds), the leader's write rate meanwhile (records and batches a
second), and, once the writers stop and every node applied what the leader
committed, whether its export equals the leader's. Every process is started
and stopped here, by PID.

With --busy-loops N, N processes spin on the cores for the whole run (the
crowd of processes a soak puts on two cores), started and stopped here.

usage: steady_catchup.py ROOST_BINARY [--writers 4] [--backlog 20] [--down 10] [--timeout 90] [--busy-loops N]
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import ADMIN, app_key, request, start_cluster, stop_all  # noqa: E402
from soak import Writers  # noqa: E402

EXTRA = ["--snapshot-log-bytes", "1048576"]


def status(port):
    return json.loads(request(port, "GET", "/v1/cluster", ADMIN, timeout=5)[1])


def batches_appended(port):
    """The leader's replicated batches so far (`roost_cluster_batch_bytes_count`)."""
    _, body = request(port, "GET", "/metrics", ADMIN, timeout=5)
    for line in body.decode().splitlines():
        if line.startswith("roost_cluster_batch_bytes_count "):
            return int(float(line.split()[1]))
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--backlog", type=float, default=20)
    parser.add_argument("--down", type=float, default=10)
    parser.add_argument("--timeout", type=float, default=90)
    parser.add_argument("--busy-loops", type=int, default=0)
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy_loops)]
    directory = tempfile.mkdtemp(prefix="roost-steady-catchup-")
    etcd, nodes, writers, passed = None, [], None, False
    try:
        etcd, etcd_url, nodes, leader = start_cluster(args.binary, directory, extra=EXTRA)
        writers = Writers(nodes, app_key(leader.port), count=args.writers)
        writers.start()
        time.sleep(args.backlog)
        follower = next(node for node in nodes if node is not leader)
        behind_from = status(follower.port)["applied_lsn"]
        follower.process.send_signal(signal.SIGKILL)
        follower.process.wait()
        time.sleep(args.down)
        at_restart = status(leader.port)["committed_lsn"]
        batches_at_restart = batches_appended(leader.port)
        restarted_at = time.monotonic()
        try:
            follower.start(EXTRA, deadline=args.timeout)
            took = time.monotonic() - restarted_at
        except SystemExit:
            took = None
        elapsed = time.monotonic() - restarted_at
        at_end = status(leader.port)["committed_lsn"]
        batches = batches_appended(leader.port) - batches_at_restart
        print(f"writers {args.writers}: the leader wrote {(at_end - at_restart) / elapsed:.0f} records/s in "
              f"{batches / elapsed:.0f} batches/s while the follower started; it was {at_restart - behind_from} "
              f"records behind (applied {behind_from}, the group log at {at_restart})", flush=True)
        if took is None:
            print(f"the restarted follower did NOT serve within {args.timeout:.0f} s", flush=True)
            return
        print(f"the restarted follower served after {took:.1f} s "
              f"({(at_end - behind_from) / took:.0f} records/s caught up)", flush=True)
        writers.stop.set()
        for thread in writers.threads:
            thread.join(timeout=40)
        committed = status(leader.port)["committed_lsn"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and min(status(node.port)["applied_lsn"] for node in nodes) < committed:
            time.sleep(0.2)
        exports = [request(node.port, "GET", "/v1/devices/export", writers.key, timeout=60)[1] for node in nodes]
        identical = all(export == exports[0] for export in exports)
        devices = exports[0].count(b"\n")
        print(f"exports {'identical' if identical else 'DIFFERENT'} on the three nodes "
              f"({devices} devices; {len(writers.acknowledged)} acknowledged)", flush=True)
        passed = identical
    finally:
        if writers is not None:
            writers.stop.set()
        stop_all(nodes, etcd)
        for loop in busy:
            loop.kill()
            loop.wait()
        shutil.rmtree(directory, ignore_errors=True)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
