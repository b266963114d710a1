#!/usr/bin/env python3
"""Replicated throughput and follower lag of cluster mode (issue 22's targets).

Each round, one after the other on this machine (nodes, etcd and wrk share it):
  single   one `roost serve --fsync always` (no cluster);
  cluster  one etcd member and three `roost serve --cluster ... --fsync always`
           nodes, the load sent to the leader.
Load: wrk, 2 threads x 64 keep-alive connections, SECONDS each, with
Benchmarks/spine/register.lua (the spine benchmark's registrations). Prints
req/s per run, the medians and the ratio cluster / single.

Then, on the cluster of the last round, the follower lag at half the
replicated median: an open-loop background load at that rate on the leader
(`roost-bench load --rate R`, with --roost-bench), and meanwhile SAMPLES
writes on the leader, each read on a follower with `Roost-Min-Position` set to
the write's `Roost-Position`: the lag of one sample is the time from the
leader's answer to the follower's.

usage: throughput.py ROOST_BINARY [--seconds S] [--rounds R] [--samples N] [--roost-bench PATH]
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import Node, app_key, start_cluster, stop_all  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wrk(port, seconds):
    out = subprocess.run(
        ["wrk", "-t2", "-c64", f"-d{seconds}s", "-s", os.path.join(ROOT, "Benchmarks/spine/register.lua"),
         f"http://127.0.0.1:{port}/v1/devices"], capture_output=True, text=True,
        env=dict(os.environ, SPINE_TOKENS="1000000", SPINE_PEOPLE="200000", SPINE_COUNT_STATUS="1"),
        timeout=seconds + 60).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if not rate:
        raise SystemExit("wrk printed no result:\n" + out)
    return float(rate.group(1)), int(bad.group(1)) if bad else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--roost-bench")
    args = parser.parse_args()
    rates = {"single": [], "cluster": []}
    lag_samples = []
    for round_number in range(1, args.rounds + 1):
        for variant in (["single", "cluster"] if round_number % 2 else ["cluster", "single"]):
            directory = tempfile.mkdtemp(prefix="roost-throughput-")
            etcd, nodes = None, []
            try:
                if variant == "single":
                    nodes = [Node(args.binary, directory, 1, None)]
                    nodes[0].start()
                    target = nodes[0]
                else:
                    etcd, _, nodes, target = start_cluster(args.binary, directory)
                key = app_key(target.port)
                os.environ["ROOST_KEY"] = key
                rate, non2xx = wrk(target.port, args.seconds)
                print(f"round {round_number} {variant}: {rate:.0f} req/s ({non2xx} non-2xx)", flush=True)
                if non2xx == 0:
                    rates[variant].append(rate)
                if variant == "cluster" and round_number == args.rounds:
                    lag_samples = measure_lag(args, nodes, target, key, statistics.median(rates["cluster"]) / 2)
            finally:
                stop_all(nodes, etcd)
                shutil.rmtree(directory, ignore_errors=True)
    single, cluster = statistics.median(rates["single"]), statistics.median(rates["cluster"])
    print(f"median: single {single:.0f} req/s, cluster {cluster:.0f} req/s, ratio {cluster / single:.2f}")
    if lag_samples:
        ordered = sorted(lag_samples)
        p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000
        print(f"follower lag over {len(ordered)} samples: p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, "
              f"max {ordered[-1] * 1000:.1f} ms")


def measure_lag(args, nodes, leader, key, rate):
    follower = next(node for node in nodes if node is not leader)
    background = None
    if args.roost_bench:
        background = subprocess.Popen(
            [args.roost_bench, "load", "--url", f"http://127.0.0.1:{leader.port}", "--key", key, "--rate",
             str(int(rate)), "--seconds", str(args.seconds + 60), "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
    samples = []
    try:
        import http.client
        for serial in range(args.samples):
            connection = http.client.HTTPConnection("127.0.0.1", leader.port, timeout=5)
            body = json.dumps({"platform": "ios", "token": "%056x%08x" % (7, serial), "external_id": f"lag_{serial}"})
            connection.request("POST", "/v1/devices", body=body,
                               headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            written = time.monotonic()
            position = answer.getheader("Roost-Position")
            connection.close()
            if answer.status not in (200, 201) or not position:
                continue
            connection = http.client.HTTPConnection("127.0.0.1", follower.port, timeout=5)
            connection.request("GET", f"/v1/people/lag_{serial}",
                               headers={"Authorization": "Bearer " + key, "Roost-Min-Position": position})
            read = connection.getresponse()
            read.read()
            connection.close()
            if read.status == 200:
                samples.append(time.monotonic() - written)
    finally:
        if background is not None:
            background.kill()
            background.wait()
    return samples


if __name__ == "__main__":
    main()
