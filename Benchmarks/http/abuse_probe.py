#!/usr/bin/env python3
"""Measures Roost issue 9 findings 2 and 3 against a built `roost` binary.

    python3 Benchmarks/http/abuse_probe.py BINARY [CONNECTIONS] [PIPELINED] [DEVICES]
    python3 Benchmarks/http/abuse_probe.py BINARY --silent [CONNECTIONS]
    python3 Benchmarks/http/abuse_probe.py BINARY --partial-heads [CONNECTIONS] [--evict-after-ms=N]

Starts `BINARY serve` on 127.0.0.1:0 with a fresh data directory, imports
DEVICES devices with one 3,800-byte tag each, then opens CONNECTIONS client
sockets (SO_RCVBUF 4096) that each pipeline PIPELINED `GET
/v1/devices?limit=DEVICES` and never read. It prints the resident set
(VmRSS) of the server before, at its peak and after the clients close, how
long the server stays busy (CPU time still growing), and /healthz latencies
during that burst (count, median, worst of the probes begun while it was
busy) and after it. With --silent it instead opens CONNECTIONS
(default 10,000, the default `--max-connections`) sockets that never send a
byte and times what new clients see. With --partial-heads (issue 24 M-2)
each of CONNECTIONS (default 10,000) sockets sends `GET /v1/stats
HTTP/1.1\r\nHost: x\r\n` and nothing more; the probe then reports /readyz,
how long an authenticated API call takes (a client that retries when closed
unanswered) and how many heads were evicted. --evict-after-ms=N passes
`--partial-head-evict-after-ms N` to the server (3600000: the rule before
decision 0073, no partial head evicted within the header timeout).
Used for the figures in docs/http.md ("Abusive clients"); the system test
Tests/SystemTests/HTTPAbuseSystemTests.swift asserts the same at a smaller scale.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ADMIN = "http-abuse-probe-admin-key-0123456789"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    binary = args[0]
    silent = "--silent" in sys.argv
    partial = "--partial-heads" in sys.argv
    connections = int(args[1]) if len(args) > 1 else (10_000 if silent or partial else 20)
    extra = []
    for a in sys.argv[1:]:
        if a.startswith("--evict-after-ms="):
            extra = ["--partial-head-evict-after-ms", a.split("=", 1)[1]]
    pipelined = int(args[2]) if len(args) > 2 else 64
    devices = int(args[3]) if len(args) > 3 else 200
    data = tempfile.mkdtemp(prefix="roost-abuse-probe-")
    env = dict(os.environ, ROOST_ADMIN_KEY=ADMIN)
    server = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--data", data + "/data"] + extra,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        port = int(server.stdout.readline().decode().strip().rsplit(":", 1)[1])
        if silent:
            silent_probe(server.pid, port, connections)
        elif partial:
            partial_head_probe(server.pid, port, connections)
        else:
            probe(server.pid, port, connections, pipelined, devices)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def request(port, method, path, key=None, body=None, content_type="application/json", timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    if key:
        head += f"Authorization: Bearer {key}\r\n"
    payload = body.encode() if body is not None else b""
    if body is not None:
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n"
    s.sendall(head.encode() + b"\r\n" + payload)
    answer = b""
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        answer += chunk
    s.close()
    status_line, _, rest = answer.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), rest


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def timed_health(port):
    started = time.monotonic()
    try:
        status, _ = request(port, "GET", "/healthz", timeout=60)
    except (OSError, IndexError, ValueError):  # reset, or closed before any answer
        return None
    return (time.monotonic() - started) * 1000 if status == 200 else None


def probe(pid, port, connections, pipelined, devices):
    _, body = request(port, "POST", "/v1/apps", ADMIN, '{"name":"probe"}')
    app = json.loads(body)["id"]
    _, body = request(port, "POST", f"/v1/apps/{app}/keys", ADMIN,
                      '{"kind":"secret","capabilities":["devices:write","devices:read"]}')
    key = json.loads(body)["key"]
    tag = "v" * 3800
    csv = "platform,token,tags\r\n" + "".join(
        f'ios,{n:064x},"{{""k"":""{tag}""}}"\r\n' for n in range(devices))
    status, _ = request(port, "POST", "/v1/devices/import", key, csv, "text/csv")
    assert status == 200, status
    path = f"/v1/devices?limit={devices}"
    started = time.monotonic()
    _, page = request(port, "GET", path, key)
    print(f"one answer: {len(page)} bytes in {(time.monotonic() - started) * 1000:.1f} ms")
    baseline = rss_mb(pid)
    print(f"resident before: {baseline:.0f} MB")

    pipeline = (f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n" * pipelined).encode()
    clients = []
    for _ in range(connections):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(("127.0.0.1", port))
        client.sendall(pipeline)
        clients.append(client)
    opened = time.monotonic()
    peak, last_cpu, quiet_since, settled = baseline, cpu_ticks(pid), None, None
    during = []
    while time.monotonic() - opened < 60 and settled is None:
        took = timed_health(port)
        if quiet_since is None:  # the server was still busy when this probe began
            during.append(took if took is not None else 60_000)
        peak = max(peak, rss_mb(pid))
        now_cpu = cpu_ticks(pid)
        if now_cpu == last_cpu:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 0.3:
                settled = quiet_since - opened
        else:
            quiet_since = None
        last_cpu = now_cpu
        time.sleep(0.05)
    burst = "did not settle within 60 s" if settled is None else f"busy for {settled:.2f} s"
    during.sort()
    print(f"{connections} connections x {pipelined} pipelined, nothing read: {burst}, "
          f"/healthz meanwhile: {len(during)} probes, median {during[len(during) // 2]:.0f} ms, "
          f"worst {during[-1]:.0f} ms, resident peak {peak:.0f} MB "
          f"(+{(peak - baseline) / max(connections, 1):.1f} MB per connection)")
    steady = [timed_health(port) for _ in range(20)]
    print(f"then, the clients still open: /healthz worst of 20 {max(t or 60_000 for t in steady):.1f} ms")
    for client in clients:
        client.close()
    closed = time.monotonic()
    for wait in (0.5, 1.0, 2.0):
        time.sleep(max(0.0, closed + wait - time.monotonic()))
        print(f"resident {wait} s after the clients closed: {rss_mb(pid):.0f} MB")


def silent_probe(pid, port, connections):
    baseline = rss_mb(pid)
    silent = []
    for _ in range(connections):
        silent.append(socket.create_connection(("127.0.0.1", port)))
    time.sleep(0.5)
    print(f"{connections} connections that never send a byte: resident {rss_mb(pid):.0f} MB "
          f"(before {baseline:.0f} MB)")
    times, failed = [], 0
    for _ in range(100):
        took = timed_health(port)
        if took is None:
            failed += 1
        else:
            times.append(took)
    times.sort()
    if times:
        print(f"100 new clients, one /healthz each: {failed} refused, median {times[len(times) // 2]:.1f} ms, "
              f"worst {times[-1]:.1f} ms")
    else:
        print(f"100 new clients, one /healthz each: all {failed} refused")
    started = time.monotonic()
    try:
        status, _ = request(port, "GET", "/v1/apps", ADMIN)
    except (OSError, IndexError, ValueError):
        status = "closed unanswered"
    print(f"a new client's GET /v1/apps: {status} in {(time.monotonic() - started) * 1000:.1f} ms")
    closed = sum(1 for s in silent if is_closed(s))
    print(f"silent connections closed by then: {closed}")
    for s in silent:
        s.close()


def partial_head_probe(pid, port, connections):
    baseline = rss_mb(pid)
    flood = []
    head = b"GET /v1/stats HTTP/1.1\r\nHost: x\r\n"

    def top_up():
        # An answered request held a place (free, or taken from an evicted
        # head) and gave it back when it closed: the flood takes it again.
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(head)
        flood.append(s)

    started = time.monotonic()
    for _ in range(connections):
        top_up()
    print(f"{connections} partial heads sent in {(time.monotonic() - started) * 1000:.0f} ms: "
          f"resident {rss_mb(pid):.0f} MB (before {baseline:.0f} MB)")
    time.sleep(0.5)  # the server reads the heads (a measurement script, not a test)
    health = socket.create_connection(("127.0.0.1", port), timeout=5)
    health.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = health.recv(4096)
    health.close()
    top_up()
    reserve = b"connection: close" in answer.lower()
    print(f"a keep-alive /healthz: {'from the reserve (nothing evictable)' if reserve else 'on a counted place'}")
    try:
        status, body = request(port, "GET", "/readyz", timeout=5)
        top_up()
        print(f"/readyz on a new connection: {status} {body.decode().strip()}")
    except (OSError, IndexError, ValueError):
        print("/readyz on a new connection: closed unanswered")
    times = []
    for _ in range(20):
        started = time.monotonic()
        attempts, status = 0, None
        while status is None and time.monotonic() - started < 15:
            attempts += 1
            try:
                status, _ = request(port, "GET", "/v1/apps", ADMIN, timeout=15)
            except (OSError, IndexError, ValueError):
                status = None
        top_up()
        took = (time.monotonic() - started) * 1000
        times.append(took)
        if len(times) == 1:
            print(f"first authenticated GET /v1/apps: {status} after {took:.1f} ms, {attempts} attempts")
    times.sort()
    print(f"20 authenticated GET /v1/apps, one new connection each (retrying when closed, the flood topped up "
          f"after each): median {times[len(times) // 2]:.1f} ms, worst {times[-1]:.1f} ms")
    try:
        status, body = request(port, "GET", "/readyz", timeout=5)
        print(f"/readyz after: {status} {body.decode().strip()}")
    except (OSError, IndexError, ValueError):
        print("/readyz after: closed unanswered")
    closed = sum(1 for s in flood if is_closed(s))
    print(f"partial heads closed by then: {closed} of {len(flood)}")
    for s in flood:
        s.close()


def is_closed(sock):
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


if __name__ == "__main__":
    main()
