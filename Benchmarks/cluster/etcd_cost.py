#!/usr/bin/env python3
"""What one call through etcd 3.4's JSON gateway costs etcd in CPU, with no
Roost in the way: one etcd member (as the other cluster benchmarks start it),
one keep-alive HTTP/1.1 connection, calls one after another (one in flight,
as the leader's appends), and the CPU etcd spent over them (utime and stime
from /proc). For a range, a put, and the leader's append transaction (two
compares, one put; `ReplicationMachine.sendAppend`) with values of several
sizes, without watchers and with WATCHERS streaming the written prefix (the
followers' watches; `curl -N` processes, started and stopped here by PID).

With --profile FILE, etcd runs with --enable-pprof and a CPU profile of
etcd is taken over the last measurement (4 s of appends of the largest size
with the watchers) into FILE; `pprof_top.py FILE` reads it.

usage: etcd_cost.py [--calls N] [--watchers W] [--sizes 100,1400,4000,16000] [--profile FILE]
"""
import argparse, base64, http.client, json, os, shutil, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import start_etcd  # noqa: E402


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def b64(data):
    return base64.b64encode(data).decode()


def wait_ready(port):
    for _ in range(100):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("POST", "/v3/kv/range", json.dumps({"key": b64(b"ready")}))
            connection.getresponse().read()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("etcd did not answer within 10 s")


def measure(etcd, connection, label, path, body_of, calls):
    """Per call: etcd's user and system CPU (µs) and the wall time (µs)."""
    hertz = os.sysconf("SC_CLK_TCK")
    user0, system0 = cpu_ticks(etcd.pid)
    started = time.monotonic()
    for number in range(calls):
        connection.request("POST", path, body_of(number))
        answer = connection.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise SystemExit(f"{label}: etcd answered {answer.status}: {body[:200]!r}")
    wall = time.monotonic() - started
    user1, system1 = cpu_ticks(etcd.pid)
    user = (user1 - user0) / hertz / calls * 1e6
    system = (system1 - system0) / hertz / calls * 1e6
    print(f"| {label} | {user + system:,.0f} | {user:,.0f} | {system:,.0f} | {wall / calls * 1e6:,.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--watchers", type=int, default=2)
    parser.add_argument("--sizes", default="100,1400,4000,16000")
    parser.add_argument("--profile", help="write a CPU profile of etcd (pprof) under the last appends here")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    directory = tempfile.mkdtemp(prefix="roost-etcd-cost-")
    etcd, url = start_etcd(directory, ["--enable-pprof"] if args.profile else [])
    watchers = []
    try:
        port = int(url.rsplit(":", 1)[1])
        wait_ready(port)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        hertz = os.sysconf("SC_CLK_TCK")
        idle0 = sum(cpu_ticks(etcd.pid))
        time.sleep(2)
        idle = (sum(cpu_ticks(etcd.pid)) - idle0) / hertz / 2 * 1e3
        print(f"etcd idle: {idle:.1f} ms of CPU a second; {args.calls} calls each, one in flight")
        print("| call | etcd CPU µs per call | user | system | wall µs per call |")
        print("|---|---|---|---|---|")
        measure(etcd, connection, "range of one missing key", "/v3/kv/range",
                lambda number: json.dumps({"key": b64(b"missing")}), args.calls)
        measure(etcd, connection, "put, 100-byte value", "/v3/kv/put",
                lambda number: json.dumps({"key": b64(b"p/%016d" % number), "value": b64(os.urandom(100))}), args.calls)
        written = [0]

        def append(size):
            value = os.urandom(size)

            def body(number):
                written[0] += 1
                key = b64(b"b/%016d" % written[0])
                return json.dumps({
                    "compare": [{"key": b64(b"leader"), "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
                                {"key": key, "target": "VERSION", "result": "EQUAL", "version": "0"}],
                    "success": [{"request_put": {"key": key, "value": b64(value)}}],
                    "failure": [{"request_range": {"key": b64(b"leader"), "limit": "1"}}]})
            return body

        for watching in (0, args.watchers):
            while len(watchers) < watching:
                watchers.append(subprocess.Popen(
                    ["curl", "-sN", f"{url}/v3/watch", "-d",
                     json.dumps({"create_request": {"key": b64(b"b/"), "range_end": b64(b"b0")}})],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)
            for size in sizes:
                measure(etcd, connection, f"append txn, {size:,}-byte value, {watching} watchers", "/v3/kv/txn",
                        append(size), args.calls)
        if args.profile:
            profile = {}

            def take():
                profiler = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                profiler.request("GET", "/debug/pprof/profile?seconds=4")
                profile["bytes"] = profiler.getresponse().read()

            taker = threading.Thread(target=take)
            taker.start()
            body = append(sizes[-1])
            number = 0
            while taker.is_alive():
                connection.request("POST", "/v3/kv/txn", body(number))
                connection.getresponse().read()
                number += 1
            taker.join()
            open(args.profile, "wb").write(profile["bytes"])
            print(f"profile of {number} appends of {sizes[-1]:,} bytes in {args.profile}")
    finally:
        for watcher in watchers:
            watcher.kill()
            watcher.wait()
        etcd.kill()
        etcd.wait()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
