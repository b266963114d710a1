#!/usr/bin/env python3
"""Person reads (issue 25): `GET /v1/people/{id}` under wrk (2 threads × 64
keep-alive connections, SECONDS per run) against roost and against nginx
answering a fixed body of the same size, in one sitting, ROUNDS rounds
alternated (nginx, roost, and with --baseline the baseline binary). Each
roost is a release `roost serve --fsync never` on a fresh directory loaded
with PEOPLE people of 5 devices each (`POST /v1/devices/batch`, tags
{"plan","n"}), as issue 25 measured. Reports req/s and the server's CPU per
request (utime + stime over the run, /proc/PID/stat), medians, and the
ratios to nginx. Everything listens on 127.0.0.1 and is stopped by PID.

  Benchmarks/reads/run.py --roost .build/release/roost [--baseline OLD] [--seconds 5] [--rounds 3]
                          [--profile /tmp/perf-reads.data]

With --profile, one more run against roost alone is recorded with
`perf record -F 2000 -g` for SECONDS into that file after the rounds, and
perf's top symbols are printed (read it further with `perf report -i`).
"""
import argparse, json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export"))
import export_bench as common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def load_people(server, people):
    for start in range(0, people * 5, 1000):
        items = []
        for n in range(start, min(people * 5, start + 1000)):
            items.append({"platform": "ios", "environment": "production", "token": f"{n:064x}",
                          "external_id": f"user-{n // 5}", "app_version": "4.2.0", "locale": "en-GB",
                          "timezone": "Europe/London", "tags": {"plan": "pro", "n": str(n % 97)}})
        status, body = common.request(server.port, "POST", "/v1/devices/batch", server.key,
                                      json.dumps({"devices": items}), timeout=30)
        if status != 200:
            raise SystemExit(f"batch answered {status}: {body[:200]!r}")


class Nginx:
    def __init__(self, body):
        self.directory = tempfile.mkdtemp(prefix="roost-reads-nginx-", dir="/var/tmp")
        self.port = common.free_port()
        # A fixed answer (`return`), as issue 25's baseline: the body inline, quoted for nginx.
        if b"$" in body:
            raise SystemExit("the sample answer holds a $ (an nginx variable)")
        inline = body.decode().replace(chr(92), chr(92) * 2).replace("'", chr(92) + "'")
        conf = os.path.join(self.directory, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; error_log {self.directory}/error.log;
pid {self.directory}/nginx.pid;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {self.directory};
  server {{ listen 127.0.0.1:{self.port}; keepalive_requests 1000000;
    location / {{ default_type application/json; return 200 '{inline}'; }} }} }}
""")
        self.process = subprocess.Popen(["nginx", "-c", conf, "-p", self.directory],
                                        stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.directory, "stderr"), "w"))
        for _ in range(100):
            try:
                if common.request(self.port, "GET", "/", timeout=1)[0] == 200:
                    return
            except OSError:
                time.sleep(0.05)
        raise SystemExit("nginx did not start: " + open(os.path.join(self.directory, "stderr")).read())

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        shutil.rmtree(self.directory, ignore_errors=True)


def wrk(port, key, seconds, pid, people):
    env = dict(os.environ, ROOST_KEY=key or "none", READS_PEOPLE=str(people))
    before = common.cpu_seconds(pid)
    out = subprocess.run(["wrk", "-t2", "-c64", f"-d{seconds}s", "-s", os.path.join(HERE, "people.lua"),
                          f"http://127.0.0.1:{port}"], env=env, capture_output=True, text=True, check=True).stdout
    cpu = common.cpu_seconds(pid) - before
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise SystemExit(f"{non2xx.group(1)} non-2xx answers:\n{out}")
    return requests / seconds, cpu * 1e6 / requests


def profile(server, args):
    """One wrk run against `server` under `perf record -g`; prints the top symbols."""
    recorder = subprocess.Popen(["perf", "record", "-F", "2000", "-g", "-p", str(server.process.pid),
                                 "-o", args.profile, "--", "sleep", str(args.seconds)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rate, cpu = wrk(server.port, server.key, args.seconds, server.process.pid, args.people)
    recorder.wait(timeout=args.seconds + 60)
    print(f"  profiled run: {rate:,.0f} req/s, {cpu:.1f} µs per request (under perf); {args.profile}:")
    report = subprocess.run(["perf", "report", "-i", args.profile, "--no-children", "--sort", "symbol", "--stdio"],
                            capture_output=True, text=True).stdout
    top = [line for line in report.splitlines() if re.match(r"^ +[0-9]", line)][:25]
    print("\n".join("    " + line.strip()[:160] for line in top))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roost", required=True)
    parser.add_argument("--baseline")
    parser.add_argument("--people", type=int, default=20_000)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="perf.data path for one profiled run against roost")
    args = parser.parse_args()
    servers, nginx = {}, None
    try:
        for name, binary in [("roost", args.roost)] + ([("baseline", args.baseline)] if args.baseline else []):
            server = common.Server(binary, 0)
            load_people(server, args.people)
            servers[name] = server
        sample = common.request(servers["roost"].port, "GET", "/v1/people/user-1", servers["roost"].key)[1]
        nginx = Nginx(sample)
        results = {name: [] for name in ["nginx"] + list(servers)}
        for _ in range(args.rounds):
            results["nginx"].append(wrk(nginx.port, None, args.seconds, nginx.process.pid, args.people))
            for name, server in servers.items():
                results[name].append(wrk(server.port, server.key, args.seconds, server.process.pid, args.people))
        rate = {n: statistics.median(r for r, _ in v) for n, v in results.items()}
        cpu = {n: statistics.median(c for _, c in v) for n, v in results.items()}
        print(f"person reads: {args.people} people × 5 devices, answer {len(sample)} bytes; wrk 2×64, "
              f"{args.seconds} s × {args.rounds} rounds")
        for name, runs in results.items():
            spread = " ".join(f"{r:,.0f}/{c:.1f}" for r, c in runs)
            ratio = "" if name == "nginx" else \
                f"; {rate[name] / rate['nginx']:.2f}× nginx's throughput at {cpu[name] / cpu['nginx']:.1f}× its CPU"
            print(f"  {name}: median {rate[name]:,.0f} req/s, {cpu[name]:.1f} µs server CPU per request "
                  f"(runs req/s/µs: {spread}){ratio}")
        if args.profile:
            profile(servers["roost"], args)
    finally:
        if nginx:
            nginx.stop()
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    main()
