#!/usr/bin/env python3
"""Roost next to Redis 7: memory per device and restart time, the same devices, one sitting (issue 12).

    Benchmarks/peers/memory.py --roost-bin PATH [--devices 1000000] [--people 200000] [--restarts 3]
                               [--work DIR] [--markdown OUT.md] [--json OUT.json]

The same DEVICES devices (64-hex token, person user_(i mod PEOPLE), app_version,
locale, timezone and two tags, iOS production) go:

- into Roost through `POST /v1/devices/import` (CSV, 200,000 rows a request),
  `roost serve --fsync everysec` (as Redis's appendfsync) on a fresh directory (two shards: the default
  on two cores), `--snapshot-log-bytes` above the import so no snapshot is
  taken before the measured ones;
- into Redis as a hash per device (key `d:TOKEN`; fields person, platform,
  environment, app_version, locale, timezone, tag.plan, tag.cohort) plus a set
  per person (`p:user_N`, members the device keys), through `redis-cli
  --pipe`, `appendonly yes`, `appendfsync everysec`, `aof-use-rdb-preamble no`,
  no automatic AOF rewrite, no automatic RDB.

Memory: RSS (VmRSS of the process) just before the load and after it, divided
by DEVICES; again after each restart (the steady state, without the load's
transient buffers). Redis also reports used_memory_rss and used_memory.
Restart, RESTARTS times each, median:
- Roost from the log: kill -9 after the import (no snapshot), start, replay;
- Roost from a snapshot: SIGTERM (a snapshot is written at clean shutdown), start;
- Redis from the RDB (`SAVE`, then start with appendonly no) and from the AOF
  (the commands as written, start with appendonly yes).
Wall time is exec to the ready line (Roost: `listening on` on stdout; Redis:
`Ready to accept connections`), measured by this script; each server's own
figure is read from its log (Roost: `start.listening` duration.ms; Redis: `DB
loaded from disk` / `from append only file`). Every start is checked: Roost's
GET /v1/stats and Redis's DBSIZE must count every device.
Everything runs on 127.0.0.1 and is bounded in time; every process started is
stopped by its PID, and the work directory is removed at the end.
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ADMIN_KEY = os.environ.get("ROOST_ADMIN_KEY", "bench-admin-key-0123456789abcdef")
# How long one server start (recovery included) may take.
START_TIMEOUT_S = 300
# How long one HTTP request (a 200,000-row import) may take.
REQUEST_TIMEOUT_S = 600
# Rows per import request: ~30 MB of CSV, under the 64 MiB body limit.
IMPORT_ROWS = 200_000
# The most devices one run loads (the generator holds them in memory).
DEVICES_MAX = 10_000_000

APP_VERSIONS = ["2.4.0", "2.4.1", "2.5.0", "3.0.0"]
LOCALES = ["en-US", "de-DE", "fr-FR", "ja-JP", "pt-BR"]
TIMEZONES = ["Europe/Berlin", "America/New_York", "Asia/Tokyo", "America/Sao_Paulo", "Europe/Paris", "UTC"]

started_processes = []


def log(text):
    print(text, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def directory_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def device(i, people):
    token = hashlib.sha256(i.to_bytes(8, "little")).hexdigest()
    return (token, f"user_{i % people}", APP_VERSIONS[i % 4], LOCALES[(i // 4) % 5], TIMEZONES[(i // 20) % 6],
            "pro" if i % 3 == 0 else "free", f"c{i % 8}")


def stop(process, sig=signal.SIGTERM, timeout=120):
    """Signals the process by its PID and waits for it; SIGKILL after `timeout` seconds."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process in started_processes:
        started_processes.remove(process)


def start(argv, ready, log_path, env=None):
    """Starts argv, its stdout and stderr merged into log_path, and waits for a line matching `ready`.
    Returns (process, seconds from exec to the line, every line read until then)."""
    out = open(log_path, "ab")
    began = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    started_processes.append(process)
    lines = []
    deadline = began + START_TIMEOUT_S
    os.set_blocking(process.stdout.fileno(), True)
    while True:
        line = process.stdout.readline()
        now = time.monotonic()
        if not line:
            out.close()
            raise RuntimeError(f"{argv[0]} exited before it was ready:\n" + b"".join(lines[-20:]).decode(errors="replace"))
        out.write(line)
        lines.append(line)
        if re.search(ready, line):
            elapsed = now - began
            break
        if now > deadline:
            stop(process, signal.SIGKILL)
            raise RuntimeError(f"{argv[0]} not ready within {START_TIMEOUT_S} s")
    # The rest of its output goes to the log without blocking anyone.
    subprocess.Popen(["cat"], stdin=process.stdout, stdout=out)
    out.close()
    return process, elapsed, [l.decode(errors="replace") for l in lines]


def request(port, method, path, key, body=None, content_type="application/json"):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    headers = {"Authorization": f"Bearer {key}"}
    if body is not None:
        headers["Content-Type"] = content_type
    connection.request(method, path, body=body, headers=headers)
    answer = connection.getresponse()
    data = answer.read()
    connection.close()
    return answer.status, json.loads(data) if data else None


class Roost:
    def __init__(self, binary, directory, devices):
        self.binary, self.directory, self.devices = binary, directory, devices
        self.process = None
        self.port = None
        self.key = None

    def start(self):
        argv = [self.binary, "serve", "--listen", "127.0.0.1:0", "--data", self.directory, "--fsync", "everysec",
                "--snapshot-log-bytes", str(1 << 34)]
        env = dict(os.environ, ROOST_ADMIN_KEY=ADMIN_KEY)
        self.process, elapsed, lines = start(argv, rb"^listening on ", self.directory + ".log", env)
        self.port = int(lines[-1].strip().rsplit(":", 1)[1])
        own = None
        phases = {}
        for line in lines:
            if "start.listening" in line:
                found = re.search(r'duration\.ms[":= ]+([0-9.]+)', line)
                own = float(found.group(1)) / 1000 if found else None
            if "recovery.phase" in line:
                phase = re.search(r'phase[":= ]+"?([a-z_]+)', line)
                duration = re.search(r'duration\.ms[":= ]+([0-9.]+)', line)
                if phase and duration:
                    phases[phase.group(1)] = float(duration.group(1)) / 1000
        return elapsed, own, phases

    def check(self):
        status, stats = request(self.port, "GET", "/v1/stats", self.key)
        if status != 200 or stats.get("devices") != self.devices:
            raise RuntimeError(f"roost holds {stats} after the restart, expected {self.devices} devices")


class Redis:
    def __init__(self, directory):
        self.directory = directory
        self.process = None
        self.port = None

    def start(self, *extra):
        self.port = free_port()
        argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.directory,
                "--daemonize", "no", "--save", "", "--logfile", "", "--auto-aof-rewrite-percentage", "0",
                "--aof-use-rdb-preamble", "no", *extra]
        self.process, elapsed, lines = start(argv, rb"Ready to accept connections", self.directory + ".log")
        own = None
        for line in lines:
            found = re.search(r"DB loaded from (?:disk|append only file): ([0-9.]+) seconds", line)
            if found:
                own = float(found.group(1))
        return elapsed, own

    def cli(self, *arguments, stdin=None):
        return subprocess.run(["redis-cli", "-p", str(self.port), *arguments], stdin=stdin, capture_output=True,
                              check=True, timeout=REQUEST_TIMEOUT_S).stdout.decode()

    def info(self, field):
        found = re.search(rf"^{field}:(\d+)", self.cli("INFO", "memory"), re.M)
        return int(found.group(1))


def resp(*parts):
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def median(values):
    return statistics.median(values) if values else float("nan")


def run(args):
    work = args.work or tempfile.mkdtemp(prefix="roost-bench-memory.", dir=os.environ.get("TMPDIR", "/var/tmp"))
    os.makedirs(work, exist_ok=True)
    n, people = args.devices, args.people
    figures = {"devices": n, "people": people, "restarts": args.restarts}
    try:
        log(f"memory: generating {n} devices, {people} people")
        rows = [device(i, people) for i in range(n)]

        # --- Roost: import, RSS, restarts from the log, then from a snapshot.
        roost = Roost(args.roost_bin, os.path.join(work, "roost"), n)
        roost.start()
        status, app = request(roost.port, "POST", "/v1/apps", ADMIN_KEY,
                           json.dumps({"name": "memory", "settings": {"max_devices_per_person": 10}}))
        assert status == 201, (status, app)
        status, key = request(roost.port, "POST", f"/v1/apps/{app['id']}/keys", ADMIN_KEY,
                           json.dumps({"kind": "secret", "capabilities": ["devices:write", "devices:read"]}))
        assert status == 201, (status, key)
        roost.key = key["key"]
        time.sleep(1)
        before = rss_bytes(roost.process.pid)
        log("memory: roost import")
        began = time.monotonic()
        for first in range(0, n, IMPORT_ROWS):
            chunk = ["platform,token,external_id,environment,app_version,locale,timezone,tags"]
            for token, person, version, locale, zone, plan, cohort in rows[first:first + IMPORT_ROWS]:
                chunk.append(f'ios,{token},{person},production,{version},{locale},{zone},'
                             f'"{{""plan"":""{plan}"",""cohort"":""{cohort}""}}"')
            body = ("\n".join(chunk) + "\n").encode()
            status, answer = request(roost.port, "POST", "/v1/devices/import", roost.key, body, "text/csv")
            count = min(IMPORT_ROWS, n - first)
            if status != 200 or answer.get("created") != count or answer.get("rejected"):
                raise RuntimeError(f"import answered {status} {str(answer)[:300]}")
        figures["roost_import_s"] = time.monotonic() - began
        roost.check()
        time.sleep(1)
        figures["roost_rss_load"] = (rss_bytes(roost.process.pid) - before) / n
        figures["roost_rss_base"] = before
        figures["roost_log_bytes"] = directory_bytes(os.path.join(roost.directory, "wal"))
        stop(roost.process, signal.SIGKILL)
        log_starts, snapshot_starts = [], []
        for _ in range(args.restarts):
            elapsed, own, phases = roost.start()
            roost.check()
            log_starts.append({"wall_s": elapsed, "own_s": own, "phases": phases,
                               "rss_per_device": (rss_bytes(roost.process.pid) - before) / n})
            stop(roost.process, signal.SIGKILL)
        # One start, then SIGTERM: the snapshot written at clean shutdown.
        roost.start()
        began = time.monotonic()
        stop(roost.process)
        figures["roost_shutdown_snapshot_s"] = time.monotonic() - began
        figures["roost_snapshot_bytes"] = directory_bytes(os.path.join(roost.directory, "snapshots"))
        for _ in range(args.restarts):
            elapsed, own, phases = roost.start()
            roost.check()
            snapshot_starts.append({"wall_s": elapsed, "own_s": own, "phases": phases,
                                    "rss_per_device": (rss_bytes(roost.process.pid) - before) / n})
            stop(roost.process)
        figures["roost_from_log"] = log_starts
        figures["roost_from_snapshot"] = snapshot_starts
        shutil.rmtree(roost.directory, ignore_errors=True)

        # --- Redis: load through redis-cli --pipe, RSS, RDB and AOF restarts.
        redis = Redis(os.path.join(work, "redis"))
        os.makedirs(redis.directory)
        redis.start("--appendonly", "yes", "--appendfsync", "everysec")
        time.sleep(1)
        before = rss_bytes(redis.process.pid)
        before_rss_info, before_used = redis.info("used_memory_rss"), redis.info("used_memory")
        log("memory: redis load")
        commands = os.path.join(work, "redis.resp")
        with open(commands, "wb") as out:
            for token, person, version, locale, zone, plan, cohort in rows:
                out.write(resp("HSET", f"d:{token}", "person", person, "platform", "ios", "environment", "production",
                               "app_version", version, "locale", locale, "timezone", zone, "tag.plan", plan,
                               "tag.cohort", cohort))
                out.write(resp("SADD", f"p:{person}", f"d:{token}"))
        began = time.monotonic()
        with open(commands, "rb") as source:
            piped = redis.cli("--pipe", stdin=source)
        figures["redis_load_s"] = time.monotonic() - began
        os.remove(commands)
        if "errors: 0," not in piped:
            raise RuntimeError(f"redis-cli --pipe: {piped}")
        expected_keys = n + min(n, people)
        if int(redis.cli("DBSIZE")) != expected_keys:
            raise RuntimeError(f"redis holds {redis.cli('DBSIZE')} keys, expected {expected_keys}")
        time.sleep(1)
        figures["redis_rss_load"] = (rss_bytes(redis.process.pid) - before) / n
        figures["redis_rss_info_load"] = (redis.info("used_memory_rss") - before_rss_info) / n
        figures["redis_used_load"] = (redis.info("used_memory") - before_used) / n
        figures["redis_rss_base"] = before
        began = time.monotonic()
        redis.cli("SAVE")
        figures["redis_save_s"] = time.monotonic() - began
        figures["redis_rdb_bytes"] = os.path.getsize(os.path.join(redis.directory, "dump.rdb"))
        figures["redis_aof_bytes"] = directory_bytes(os.path.join(redis.directory, "appendonlydir"))
        stop(redis.process)

        def redis_restarts(*extra):
            starts = []
            for _ in range(args.restarts):
                elapsed, own = redis.start(*extra)
                if int(redis.cli("DBSIZE")) != expected_keys:
                    raise RuntimeError(f"redis holds {redis.cli('DBSIZE')} keys after the restart")
                starts.append({"wall_s": elapsed, "own_s": own,
                               "rss_per_device": (rss_bytes(redis.process.pid) - before) / n,
                               "rss_info_per_device": (redis.info("used_memory_rss") - before_rss_info) / n})
                stop(redis.process)
            return starts

        figures["redis_from_rdb"] = redis_restarts("--appendonly", "no", "--dbfilename", "dump.rdb")
        figures["redis_from_aof"] = redis_restarts("--appendonly", "yes", "--appendfsync", "everysec",
                                                   "--dbfilename", "absent.rdb")
        figures["roost_version"] = subprocess.run([args.roost_bin, "--version"], capture_output=True,
                                                  timeout=30).stdout.decode().strip().split("\n")[0]
        figures["redis_version"] = subprocess.run(["redis-server", "--version"], capture_output=True,
                                                  timeout=30).stdout.decode().split()[2].removeprefix("v=")
        return figures
    finally:
        for process in list(started_processes):
            stop(process, signal.SIGKILL)
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def markdown(f, command):
    n = f["devices"]

    def med(key, field):
        return median([s[field] for s in f[key] if s[field] is not None])

    def us(seconds):
        return f"{seconds / n * 1e6:.2f} µs"

    def ratio(a, b):
        return f"{a / b:.2f}" if b else "-"

    rows = [
        ("RSS per device after the load (B)", f"{f['roost_rss_load']:.0f}", f"{f['redis_rss_load']:.0f}",
         ratio(f["roost_rss_load"], f["redis_rss_load"])),
        ("RSS per device after a restart (B; Roost: snapshot, Redis: RDB)",
         f"{med('roost_from_snapshot', 'rss_per_device'):.0f}", f"{med('redis_from_rdb', 'rss_per_device'):.0f}",
         ratio(med("roost_from_snapshot", "rss_per_device"), med("redis_from_rdb", "rss_per_device"))),
        ("Redis used_memory_rss / used_memory per device after the load (B)", "",
         f"{f['redis_rss_info_load']:.0f} / {f['redis_used_load']:.0f}", ""),
        ("on disk per device (B; snapshot / RDB)", f"{f['roost_snapshot_bytes'] / n:.0f}",
         f"{f['redis_rdb_bytes'] / n:.0f}", ratio(f["roost_snapshot_bytes"], f["redis_rdb_bytes"])),
        ("restart, exec to ready, per device (Roost: snapshot, Redis: RDB)",
         us(med("roost_from_snapshot", "wall_s")), us(med("redis_from_rdb", "wall_s")),
         ratio(med("roost_from_snapshot", "wall_s"), med("redis_from_rdb", "wall_s"))),
        ("restart, the server's own figure, per device (Roost: start.listening; Redis: DB loaded from disk)",
         us(med("roost_from_snapshot", "own_s")), us(med("redis_from_rdb", "own_s")),
         ratio(med("roost_from_snapshot", "own_s"), med("redis_from_rdb", "own_s"))),
        ("restart from the log, exec to ready, per device (Roost: log replay; Redis: AOF)",
         us(med("roost_from_log", "wall_s")), us(med("redis_from_aof", "wall_s")),
         ratio(med("roost_from_log", "wall_s"), med("redis_from_aof", "wall_s"))),
        ("restart from the log, own figure, per device (Roost: start.listening; Redis: DB loaded from append only file)",
         us(med("roost_from_log", "own_s")), us(med("redis_from_aof", "own_s")),
         ratio(med("roost_from_log", "own_s"), med("redis_from_aof", "own_s"))),
    ]
    lines = [
        f"Command: `{command}` ({time.strftime('%Y-%m-%d', time.gmtime())}; {f['roost_version']}, "
        f"redis-server {f['redis_version']}; {n:,} devices, {f['people']:,} people; medians of {f['restarts']} restarts each; "
        f"load average {' '.join(open('/proc/loadavg').read().split()[:3])} at the end)",
        "",
        "| figure | Roost | Redis 7 | Roost ÷ Redis |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]

    def runs(key, field):
        return ", ".join(f"{s[field]:.2f}" if s[field] is not None else "-" for s in f[key])

    lines += [
        "",
        f"Runs (s, exec to ready / own figure): Roost from a snapshot {runs('roost_from_snapshot', 'wall_s')} / "
        f"{runs('roost_from_snapshot', 'own_s')}; Roost from the log {runs('roost_from_log', 'wall_s')} / "
        f"{runs('roost_from_log', 'own_s')}; Redis from the RDB {runs('redis_from_rdb', 'wall_s')} / "
        f"{runs('redis_from_rdb', 'own_s')}; Redis from the AOF {runs('redis_from_aof', 'wall_s')} / "
        f"{runs('redis_from_aof', 'own_s')}.",
        f"Roost's recovery phases (s, median start from a snapshot): "
        + ", ".join(f"{phase} {median([s['phases'].get(phase, 0) for s in f['roost_from_snapshot']]):.2f}"
                    for phase in f["roost_from_snapshot"][0]["phases"]) + ".",
        f"Load: Roost's CSV import {f['roost_import_s']:.1f} s ({n / f['roost_import_s']:,.0f} rows/s, `--fsync everysec`), "
        f"Redis's `redis-cli --pipe` {f['redis_load_s']:.1f} s; snapshot at SIGTERM {f['roost_shutdown_snapshot_s']:.1f} s, "
        f"Redis `SAVE` {f['redis_save_s']:.1f} s. RSS before the load: Roost {f['roost_rss_base'] / 1048576:.0f} MiB, "
        f"Redis {f['redis_rss_base'] / 1048576:.0f} MiB. Log after the load: Roost's segments "
        f"{f['roost_log_bytes'] / 1048576:.0f} MiB (preallocated 64 MiB each), Redis's AOF "
        f"{f['redis_aof_bytes'] / n:.0f} B/device.",
    ]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--roost-bin", required=True)
    parser.add_argument("--devices", type=int, default=1_000_000)
    parser.add_argument("--people", type=int, default=200_000)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--work")
    parser.add_argument("--markdown")
    parser.add_argument("--json")
    args = parser.parse_args()
    if not 1 <= args.devices <= DEVICES_MAX or not 1 <= args.people or not 1 <= args.restarts <= 20:
        parser.error(f"--devices 1…{DEVICES_MAX}, --people ≥ 1, --restarts 1…20")
    if not os.access(args.roost_bin, os.X_OK):
        parser.error(f"not an executable: {args.roost_bin}")
    command = "Benchmarks/peers/memory.py " + " ".join(a for a in sys.argv[1:])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    figures = run(args)
    text = markdown(figures, command)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
