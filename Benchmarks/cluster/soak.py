#!/usr/bin/env python3
"""The cluster soak (`make cluster-soak`, issue 22): three etcd members and
three `roost serve --cluster` nodes on loopback, writers registering devices
without pause, and FAULTS faults on a seeded schedule: kill -9 of the leader,
SIGSTOP of the leader past its lease, kill -9 of a follower, kill -9 of an
etcd member (restarted two seconds later), step-down. A node that exits (75
after a deposition, or killed) is started again. Each write carries its own
Idempotency-Key and is retried with it until answered (or the run ends).

Checks at the end, once every node applied what the leader committed:
  - every acknowledged write (a 2xx answer) is in every node's export;
  - nothing is in an export that was never sent;
  - every node's export is byte-identical to the leader's;
  - no epoch was won by two nodes (the `cluster.elected` lines of every node's log).
Exit 0 when all hold, 1 otherwise. Everything runs on 127.0.0.1 and stops by
itself; only the processes this script started are signalled, by PID.

usage: soak.py ROOST_BINARY [--faults N] [--seed S] [--dir DIR]
"""
import argparse, json, os, random, re, shutil, signal, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_lib import ADMIN, Node, app_key, free_port, request  # noqa: E402


class Etcd:
    """One member of a three-member etcd cluster."""

    def __init__(self, directory, index, peers, clients):
        self.directory, self.index, self.peers, self.clients = directory, index, peers, clients
        self.process = None

    def start(self):
        name = f"e{self.index}"
        initial = ",".join(f"e{i}=http://127.0.0.1:{port}" for i, port in enumerate(self.peers))
        self.process = subprocess.Popen(
            ["/usr/bin/etcd", "--name", name, "--data-dir", os.path.join(self.directory, name),
             "--listen-client-urls", f"http://127.0.0.1:{self.clients[self.index]}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.clients[self.index]}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.peers[self.index]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peers[self.index]}",
             "--initial-cluster", initial, "--initial-cluster-state", "new",
             "--heartbeat-interval", "50", "--election-timeout", "500"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.directory, f"{name}.log"), "ab"))


class Writers:
    """Threads that register one new token after another on whichever node leads."""

    def __init__(self, nodes, key, count=2):
        self.nodes, self.key = nodes, key
        self.lock = threading.Lock()
        self.sent, self.acknowledged = set(), set()
        self.stop = threading.Event()
        self.serial = 0
        self.threads = [threading.Thread(target=self.run, args=(worker,), daemon=True) for worker in range(count)]

    def start(self):
        for thread in self.threads:
            thread.start()

    def leader_port(self):
        for node in self.nodes:
            if node.alive():
                try:
                    if request(node.port, "GET", "/readyz", timeout=0.3)[0] == 200:
                        return node.port
                except OSError:
                    pass
        return None

    def run(self, worker):
        port = None
        while not self.stop.is_set():
            with self.lock:
                self.serial += 1
                serial = self.serial
            token = "%08x%056x" % (worker, serial)
            # No person: a person keeps at most max_devices_per_person devices and evicts the oldest,
            # which a check of lost writes would count as lost.
            body = json.dumps({"platform": "ios", "token": token})
            with self.lock:
                self.sent.add(token)
            deadline = time.monotonic() + 30
            while not self.stop.is_set() and time.monotonic() < deadline:
                if port is None:
                    port = self.leader_port()
                    if port is None:
                        time.sleep(0.05)
                        continue
                try:
                    import http.client
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
                    connection.request("POST", "/v1/devices", body=body, headers={
                        "Authorization": "Bearer " + self.key, "Content-Type": "application/json",
                        "Idempotency-Key": f"soak-{token}"})
                    answer = connection.getresponse()
                    answer.read()
                    connection.close()
                except OSError:
                    port = None
                    continue
                if answer.status in (200, 201):
                    with self.lock:
                        self.acknowledged.add(token)
                    break
                if answer.status in (409, 503):
                    port = None if answer.status == 503 else port
                    time.sleep(0.02)
                    continue
                raise SystemExit(f"unexpected answer {answer.status} to a registration")


# A node that does not serve this long after a restart fails the soak (it caught up too slowly).
START_SECONDS_MAX = 120


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20261206)
    parser.add_argument("--dir")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    directory = args.dir or tempfile.mkdtemp(prefix="roost-soak-")
    peers = [free_port() for _ in range(3)]
    clients = [free_port() for _ in range(3)]
    members = [Etcd(directory, index, peers, clients) for index in range(3)]
    nodes, writers, failed = [], None, False
    try:
        for member in members:
            member.start()
        urls = ",".join(f"http://127.0.0.1:{port}" for port in clients)
        for _ in range(200):
            if subprocess.run([args.binary, "cluster", "init", "--etcd", urls, "--cluster", "bench"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        nodes = [Node(args.binary, directory, index, urls) for index in (1, 2, 3)]
        extra = ["--snapshot-log-bytes", "1048576"]
        for node in nodes:
            node.start(extra, deadline=START_SECONDS_MAX)
        writers = Writers(nodes, None)
        leader = wait_leader(nodes)
        writers.key = app_key(leader.port)
        writers.start()
        counts = {}
        for fault in range(args.faults):
            time.sleep(rng.uniform(0.5, 1.5))
            for node in nodes:  # a node that exited (deposed, or killed) starts again
                if not node.alive():
                    node.process.wait()
                    node.start(extra, deadline=START_SECONDS_MAX)
            for member in members:
                if member.process.poll() is not None and time.monotonic() - getattr(member, "killed_at", 0) > 2:
                    member.start()
            leader = wait_leader(nodes)
            kind = rng.choice(["kill-leader", "stop-leader", "kill-follower", "kill-etcd", "step-down"])
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "kill-leader":
                leader.process.send_signal(signal.SIGKILL)
            elif kind == "stop-leader":
                leader.process.send_signal(signal.SIGSTOP)
                time.sleep(2.0)
                leader.process.send_signal(signal.SIGCONT)
            elif kind == "kill-follower":
                rng.choice([node for node in nodes if node is not leader]).process.send_signal(signal.SIGKILL)
            elif kind == "kill-etcd":
                running = [member for member in members if member.process.poll() is None]
                if len(running) == 3:
                    victim = rng.choice(running)
                    victim.process.send_signal(signal.SIGKILL)
                    victim.process.wait()
                    victim.killed_at = time.monotonic()
            else:
                try:
                    request(leader.port, "POST", "/v1/cluster/step-down", ADMIN, timeout=2)
                except OSError:
                    pass
            print(f"fault {fault + 1}/{args.faults}: {kind} (acknowledged so far {len(writers.acknowledged)})",
                  flush=True)
        writers.stop.set()
        for thread in writers.threads:
            thread.join(timeout=40)
        leader = settle(nodes, members, extra)
        exports = {}
        for node in nodes:
            status, body = request(node.port, "GET", "/v1/devices/export", writers.key, timeout=60)
            exports[node.index] = body
        reference = exports[leader.index]
        tokens = {json.loads(line)["token"] for line in reference.decode().splitlines() if line}
        lost = writers.acknowledged - tokens
        extra_tokens = tokens - writers.sent
        differing = [index for index, body in exports.items() if body != reference]
        elected = {}
        two_writers = []
        for node in nodes:
            for line in open(os.path.join(directory, f"n{node.index}.log"), errors="replace"):
                match = re.search(r'"event":"cluster.elected","epoch":(\d+)', line)
                if match:
                    epoch = int(match.group(1))
                    if elected.setdefault(epoch, node.index) != node.index:
                        two_writers.append(epoch)
        print(f"faults: {counts}")
        print(f"writes acknowledged {len(writers.acknowledged)}, sent {len(writers.sent)}, exported {len(tokens)}; "
              f"lost {len(lost)}, never sent {len(extra_tokens)}; nodes differing from the leader {differing}; "
              f"epochs {len(elected)}, epochs won by two nodes {sorted(set(two_writers))}")
        failed = bool(lost or extra_tokens or differing or two_writers)
        print("SOAK " + ("FAILED" if failed else "PASSED"))
    except SystemExit:
        failed = True  # a node that did not serve in time, no leader, no settling: the data stays for inspection
        raise
    finally:
        if writers is not None:
            writers.stop.set()
        for node in nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGCONT)
                node.process.kill()
                node.process.wait()
        for member in members:
            if member.process is not None and member.process.poll() is None:
                member.process.kill()
                member.process.wait()
        if not args.dir and not failed:
            shutil.rmtree(directory, ignore_errors=True)
        elif failed:
            print(f"kept {directory} for inspection")
    sys.exit(1 if failed else 0)


def settle(nodes, members, extra, seconds=120):
    """Restarts what is down and waits until every node applied what the leader committed; returns the leader."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for member in members:
            if member.process.poll() is not None:
                member.start()
        for node in nodes:
            if not node.alive():
                node.process.wait()
                node.start(extra, deadline=START_SECONDS_MAX)
        try:
            leader = wait_leader(nodes)
            _, body = request(leader.port, "GET", "/v1/cluster", ADMIN)
            committed = json.loads(body)["committed_lsn"]
            applied = [json.loads(request(node.port, "GET", "/v1/cluster", ADMIN)[1])["applied_lsn"] for node in nodes]
            if all(node.alive() for node in nodes) and min(applied) >= committed:
                return leader
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise SystemExit("the cluster did not settle within %d s" % seconds)


def wait_leader(nodes, seconds=30):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for node in nodes:
            if node.alive():
                try:
                    if request(node.port, "GET", "/readyz", timeout=0.3)[0] == 200:
                        return node
                except OSError:
                    pass
        time.sleep(0.05)
    raise SystemExit("no leader within %d s" % seconds)


if __name__ == "__main__":
    main()
