#!/usr/bin/env python3
"""Where the CPU of a replicated load goes: one etcd member and three nodes,
wrk registrations on the leader for SECONDS (as throughput.py), then the CPU
seconds of each process over the run (utime + stime from /proc) and the
leader's roost_cluster_commit_seconds and roost_cluster_batch_bytes figures.

usage: cpu_split.py ROOST_BINARY [--seconds S]
"""
import argparse, os, shutil, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import ADMIN, app_key, request, start_cluster, stop_all  # noqa: E402
import throughput  # noqa: E402


def ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="roost-cpu-")
    etcd, nodes = None, []
    try:
        etcd, _, nodes, leader = start_cluster(args.binary, directory)
        os.environ["ROOST_KEY"] = app_key(leader.port)
        pids = {f"n{n.index}{' (leader)' if n is leader else ''}": n.process.pid for n in nodes}
        pids["etcd"] = etcd.pid
        before = {name: ticks(pid) for name, pid in pids.items()}
        rate, non2xx = throughput.wrk(leader.port, args.seconds)
        after = {name: ticks(pid) for name, pid in pids.items()}
        hertz = os.sysconf("SC_CLK_TCK")
        print(f"{rate:.0f} req/s for {args.seconds} s ({non2xx} non-2xx); CPU seconds over the run: " + ", ".join(
            f"{name} {(after[name] - before[name]) / hertz:.2f}" for name in pids))
        _, metrics = request(leader.port, "GET", "/metrics", ADMIN)
        figures = {}
        for line in metrics.decode().splitlines():
            for name in ("roost_cluster_commit_seconds_sum", "roost_cluster_commit_seconds_count",
                         "roost_cluster_batch_bytes_sum", "roost_cluster_batch_bytes_count", "roost_wal_records_total"):
                if line.startswith(name + " "):
                    figures[name] = float(line.split()[1])
        batches = figures.get("roost_cluster_batch_bytes_count", 0) or 1
        print(f"leader: {batches:.0f} batches, mean commit {figures.get('roost_cluster_commit_seconds_sum', 0) / batches * 1000:.1f} ms, "
              f"mean batch {figures.get('roost_cluster_batch_bytes_sum', 0) / batches:.0f} payload bytes, "
              f"{figures.get('roost_wal_records_total', 0):.0f} records in its log")
    finally:
        stop_all(nodes, etcd)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
