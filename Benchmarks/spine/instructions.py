#!/usr/bin/env python3
"""User-space instructions per registration, counted by valgrind's callgrind:
a steady figure for changes too small for the wall-clock benchmarks
(run.sh, attribute.sh) to resolve on a noisy 2-core machine. Not exact to
the instruction: how requests fall into the server's rounds and turns under
valgrind, and the process's random hash seed, move a run by a few hundred
instructions (about ±500 in 2026-12-07's runs), so it runs RUNS times (3)
and prints each total and their median. Kernel work
(send, recv, epoll, fdatasync) is not counted: callgrind sees user space
only, so compare builds with this and confirm with attribute.sh.

Starts `ROOST serve --fsync never` under callgrind (instrumentation off), makes an
app and a key, sends WARMUP registrations, switches collection on
(`callgrind_control -i on`), sends REQUESTS registrations, dumps, and stops
the server by PID. Requests go in waves, one on each of CONNECTIONS keep-alive
connections (64, as wrk's) before any answer is read; the bodies are those of Benchmarks/spine/register.lua (same tokens,
people and fields, drawn from a fixed seed), so two builds count the same
work. Prints the total and the top functions by inclusive count per
registration, of the run whose total is the median.

The binary is counted from a copy without its DWARF (`objcopy
--strip-debug`): valgrind 3.19 cannot read the debug information of a
link-time-optimised build (decision 0094) and gives up at start. Functions
keep their names (the symbol table stays); `--debug-info` counts the binary
as built, for a dump whose names carry file and line (a build without LTO).

usage: instructions.py ROOST [--runs R] [--requests N] [--warmup W] [--connections C] [--top K] [--keep FILE] [--debug-info]
"""
import argparse, http.client, json, os, random, re, shutil, signal, subprocess, sys, tempfile, time

ADMIN = "instructions-admin-key-0123456789abcdef"


def token(number):
    state = number + 1
    words = []
    for _ in range(8):
        state ^= (state << 13) & 0xFFFFFFFF
        state ^= state >> 17
        state ^= (state << 5) & 0xFFFFFFFF
        words.append("%08x" % state)
    return "".join(words)


def body(number, people):
    return ('{"platform":"ios","environment":"production","token":"%s","external_id":"user_%d",'
            '"app_version":"2.4.0","locale":"en-US","timezone":"Europe/Berlin"}' % (token(number), number % people))


def send(connection, method, path, key, payload):
    connection.request(method, path, body=payload,
                       headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})


def receive(connection, method, path):
    answer = connection.getresponse()
    data = answer.read()
    if answer.status not in (200, 201):
        raise SystemExit(f"{method} {path}: {answer.status} {data[:200]!r}")
    return data


def call(connection, method, path, key, payload):
    send(connection, method, path, key, payload)
    return receive(connection, method, path)


def register_in_waves(connections, key, numbers, people):
    """One registration on every connection, then every answer: the server
    finds a wave's requests together, as under wrk's concurrent load."""
    for start in range(0, len(numbers), len(connections)):
        wave = numbers[start:start + len(connections)]
        for connection, number in zip(connections, wave):
            send(connection, "POST", "/v1/devices", key, body(number, people))
        for connection, _ in zip(connections, wave):
            receive(connection, "POST", "/v1/devices")


def count_once(args, binary):
    """One server under callgrind: returns (total, rows, directory, dump)."""
    directory = tempfile.mkdtemp(prefix="roost-instructions-")
    out = os.path.join(directory, "callgrind.out")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         binary, "serve", "--listen", "127.0.0.1:0", "--data", os.path.join(directory, "data"), "--fsync", "never"],
        stdout=subprocess.PIPE, stderr=open(os.path.join(directory, "valgrind.log"), "wb"),
        env=dict(os.environ, ROOST_ADMIN_KEY=ADMIN), text=True)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = server.stdout.readline()
            if not line and server.poll() is not None:
                log = open(os.path.join(directory, "valgrind.log"), errors="replace").read()
                raise SystemExit(f"the server exited ({server.returncode}) before listening:\n{log[-1500:]}")
            match = re.match(r"listening on .*:(\d+)$", line.strip())
            if match:
                port = int(match.group(1))
        if port is None:
            raise SystemExit("the server did not listen within 120 s")
        admin = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        app = json.loads(call(admin, "POST", "/v1/apps", ADMIN,
                              '{"name":"i","settings":{"max_devices_per_person":1000}}'))["id"]
        key = json.loads(call(admin, "POST", f"/v1/apps/{app}/keys", ADMIN,
                              '{"kind":"secret","capabilities":["devices:write","devices:read"]}'))["key"]
        connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=60) for _ in range(args.connections)]
        draw = random.Random(20261207)
        numbers = [draw.randrange(args.tokens) for _ in range(args.warmup + args.requests)]
        register_in_waves(connections, key, numbers[:args.warmup], args.people)
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
        register_in_waves(connections, key, numbers[args.warmup:], args.people)
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True, capture_output=True)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    dumps = sorted(name for name in os.listdir(directory) if name.startswith("callgrind.out"))
    dump = max((os.path.join(directory, name) for name in dumps), key=os.path.getsize)
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", dump], capture_output=True, text=True).stdout
    total = None
    rows = []
    for line in annotated.splitlines():
        match = re.match(r"\s*([\d,]+)\s+\(?[\d.%\s)]*\s*PROGRAM TOTALS", line)
        if match:
            total = int(match.group(1).replace(",", ""))
        match = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$", line) or re.match(r"\s*([\d,]+)\s+(\S.*)$", line)
        if match and "PROGRAM TOTALS" not in line and total is not None:
            rows.append((int(match.group(1).replace(",", "")), match.group(2)))
    if total is None:
        raise SystemExit("callgrind_annotate printed no total:\n" + annotated[:2000])
    return total, rows, directory, dump


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--runs", type=int, default=3, help="servers counted, one after the other (median printed)")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--people", type=int, default=200_000)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--keep", help="copy the median run's callgrind dump here (for callgrind_annotate --tree=caller)")
    parser.add_argument("--debug-info", action="store_true",
                        help="count the binary as built, DWARF included (not an LTO build: valgrind cannot read it)")
    args = parser.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    binary = os.path.realpath(args.binary)
    if not args.debug_info:
        stripped = os.path.join(tempfile.mkdtemp(prefix="roost-instructions-bin-"), os.path.basename(binary))
        subprocess.run(["objcopy", "--strip-debug", binary, stripped], check=True)
        binary = stripped
    runs = []
    for _ in range(args.runs):
        runs.append(count_once(args, binary))
    runs.sort(key=lambda run: run[0])
    total, rows, directory, dump = runs[len(runs) // 2]
    if args.keep:
        shutil.copyfile(dump, args.keep)
    totals = ", ".join(f"{run[0] / args.requests:,.0f}" for run in runs)
    print(f"{total / args.requests:,.0f} user-space instructions per registration, median of {args.runs} "
          f"(runs: {totals}; {args.requests} registrations after {args.warmup} of warm-up, "
          f"{args.connections} connections)")
    demangled = subprocess.run(["swift", "demangle", "--simplified"], input="\n".join(name for _, name in rows),
                               capture_output=True, text=True).stdout.splitlines()
    for (count, _), name in list(zip(rows, demangled))[:args.top]:
        print(f"{count / args.requests:10,.0f}  {name[:150]}")
    for run in runs:
        shutil.rmtree(run[2], ignore_errors=True)
    if not args.debug_info:
        shutil.rmtree(os.path.dirname(binary), ignore_errors=True)


if __name__ == "__main__":
    main()
