#!/usr/bin/env python3
"""Failover time of cluster mode (spec §13.5, issue 22's target).

One etcd member (heartbeat 50 ms, election 500 ms) and three `roost serve
--cluster` nodes with `--lease-ttl-s 1` on loopback. Each cycle: a writer
registers devices on the leader without pause; the leader is killed (kill -9
or SIGSTOP), or asked to hand over (`POST /v1/cluster/step-down`, spec
§13.5: "at most 0.5 s of 503"); the time from the kill (or from sending the
step-down) to the first acknowledged write on another node is the failover
time. The old leader is started again (SIGSTOP: resumed, it must exit 75;
step-down: it must answer 200 and exit 75) before the next cycle. Prints
each cycle and p50 / max.

usage: failover.py ROOST_BINARY [--cycles N] [--signal kill|stop|step-down] [--dir DIR]
Everything runs on 127.0.0.1, stops by itself, and only the processes this
script started are signalled (by PID).
"""
import argparse, json, os, shutil, signal, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import ADMIN, Node, app_key, init_cluster, leader_of, request, start_etcd, stop_all  # noqa: E402

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--signal", choices=["kill", "stop", "step-down"], default="kill")
    parser.add_argument("--dir")
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="roost-failover-")
    etcd, etcd_url = start_etcd(directory)
    nodes = []
    try:
        init_cluster(args.binary, etcd_url)
        nodes = [Node(args.binary, directory, index, etcd_url) for index in (1, 2, 3)]
        for node in nodes:
            node.start()
        leader = leader_of(nodes)
        key = app_key(leader.port)
        times, serial = [], 0
        for cycle in range(args.cycles):
            leader = leader_of(nodes)
            for _ in range(20):  # writes flowing before the kill
                serial += 1
                request(leader.port, "POST", "/v1/devices", key,
                        json.dumps({"platform": "ios", "token": "%064x" % serial}))
            victim = leader
            killed_at = time.monotonic()
            if args.signal == "step-down":
                status, body = request(victim.port, "POST", "/v1/cluster/step-down", ADMIN, timeout=2)
                if status != 200:
                    raise SystemExit("cycle %d: step-down answered %s %r" % (cycle, status, body))
            else:
                os.kill(victim.process.pid, signal.SIGKILL if args.signal == "kill" else signal.SIGSTOP)
            acknowledged = None
            while acknowledged is None and time.monotonic() - killed_at < 30:
                for node in nodes:
                    if node is victim or not node.alive():
                        continue
                    serial += 1
                    try:
                        status, _ = request(node.port, "POST", "/v1/devices", key,
                                            json.dumps({"platform": "ios", "token": "%064x" % serial}), timeout=1.0)
                    except OSError:
                        continue
                    if status in (200, 201):
                        acknowledged = time.monotonic() - killed_at
                        break
            if acknowledged is None:
                raise SystemExit("cycle %d: no write acknowledged within 30 s" % cycle)
            times.append(acknowledged)
            if args.signal in ("stop", "step-down"):
                if args.signal == "stop":
                    os.kill(victim.process.pid, signal.SIGCONT)
                code = victim.process.wait(timeout=30)
                if code != 75:
                    raise SystemExit("cycle %d: the old leader exited %s, not 75 (%s)" % (cycle, code, args.signal))
            else:
                victim.process.wait()
            victim.start()
            print("cycle %2d: %s of n%d -> first write acknowledged after %.0f ms" %
                  (cycle + 1, args.signal, victim.index, acknowledged * 1000), flush=True)
        ordered = sorted(times)
        print("failover over %d cycles (%s): p50 %.0f ms, max %.0f ms" %
              (len(times), args.signal, ordered[len(ordered) // 2] * 1000, ordered[-1] * 1000))
    finally:
        stop_all(nodes, etcd)
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
