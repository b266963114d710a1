#!/usr/bin/env python3
"""Export throughput (issue 25): devices per second of `GET /v1/devices/export`
streamed over loopback into `curl > /dev/null`, and the server's CPU per
device (utime + stime of the roost process across the export, from
/proc/PID/stat). Starts its own `roost serve` (release, --fsync never) on a
fresh directory, loads DEVICES devices with POST /v1/devices/batch (1,000 an
item list; seven fields, tags, 1 person in 5 devices), then exports ROUNDS
times. With --baseline BIN the same is done for a second binary, alternated
round by round on its own data directory. Stops what it started, by PID.

  Benchmarks/export/export_bench.py --roost .build/release/roost --devices 200000 --rounds 5
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from cluster_lib import free_port, request  # noqa: E402  (loopback helpers the benchmarks share)

ADMIN = "export-bench-admin-key-0123456789"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, binary, devices):
        self.binary = binary
        self.directory = tempfile.mkdtemp(prefix="roost-export-bench-", dir="/var/tmp")
        self.port = free_port()
        env = dict(os.environ, ROOST_ADMIN_KEY=ADMIN)
        self.log = open(os.path.join(self.directory, "stderr.log"), "w")
        self.process = subprocess.Popen(
            [binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data", os.path.join(self.directory, "data"),
             "--fsync", "never"], env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 30
        while True:
            try:
                if request(self.port, "GET", "/healthz", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline or self.process.poll() is not None:
                raise SystemExit(f"{binary} did not start (see {self.directory}/stderr.log)")
            time.sleep(0.05)
        request(self.port, "POST", "/v1/apps", ADMIN,
                json.dumps({"name": "bench", "settings": {"max_devices_per_person": 1000}}))
        _, made = request(self.port, "POST", "/v1/apps/1/keys", ADMIN,
                          json.dumps({"kind": "secret", "capabilities": ["devices:write", "devices:read"]}))
        self.key = json.loads(made)["key"]
        for start in range(0, devices, 1000):
            items = []
            for n in range(start, min(devices, start + 1000)):
                item = {"platform": "ios", "environment": "production", "token": f"{n:064x}",
                        "app_version": "4.2.0", "locale": "en-GB", "timezone": "Europe/London",
                        "tags": {"plan": "pro", "n": str(n % 97)}}
                if n % 5 == 0:
                    item["external_id"] = f"user-{n // 5}"
                items.append(item)
            status, body = request(self.port, "POST", "/v1/devices/batch", self.key, json.dumps({"devices": items}), timeout=30)
            if status != 200:
                raise SystemExit(f"batch answered {status}: {body[:200]!r}")

    def export_once(self):
        before = cpu_seconds(self.process.pid)
        started = time.perf_counter()
        out = subprocess.run(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
             "-H", "Authorization: Bearer " + self.key, f"http://127.0.0.1:{self.port}/v1/devices/export"],
            check=True, capture_output=True, text=True).stdout.split()
        elapsed = time.perf_counter() - started
        cpu = cpu_seconds(self.process.pid) - before
        if out[0] != "200":
            raise SystemExit(f"export answered {out[0]}")
        return elapsed, cpu, int(out[1])

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roost", required=True)
    parser.add_argument("--baseline")
    parser.add_argument("--devices", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    binaries = [("roost", args.roost)] + ([("baseline", args.baseline)] if args.baseline else [])
    servers = {}
    try:
        for name, binary in binaries:
            servers[name] = Server(binary, args.devices)
        results = {name: [] for name, _ in binaries}
        for round_number in range(args.rounds):
            for name, _ in binaries:
                results[name].append(servers[name].export_once())
        for name, binary in binaries:
            rates = [args.devices / e for e, _, _ in results[name]]
            cpus = [c * 1e6 / args.devices for _, c, _ in results[name]]
            size = results[name][0][2]
            print(f"{name} ({binary}): {args.devices} devices, {size} bytes; "
                  f"median {statistics.median(rates):,.0f} devices/s (min {min(rates):,.0f}, max {max(rates):,.0f}), "
                  f"{statistics.median(cpus):.2f} µs server CPU per device (min {min(cpus):.2f}, max {max(cpus):.2f}), "
                  f"{statistics.median(rates) * size / args.devices / 1e6:.0f} MB/s")
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
