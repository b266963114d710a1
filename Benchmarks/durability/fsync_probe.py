#!/usr/bin/env python3
"""fdatasync latency of the disk under a directory, in the write-ahead log's
shape: a 64 MiB file written with zeros first (as Roost's segments are),
then WRITERS threads each pwrite SIZE bytes into their own part of it and
fdatasync, in a loop, for SECONDS. With more than one writer the syncs
overlap (what a log that started the next group's sync before the last one
ended would do). Prints syncs per second and latency percentiles. The file
is removed at the end.

    python3 Benchmarks/durability/fsync_probe.py DIRECTORY WRITERS SECONDS [SIZE]
    e.g. for w in 1 2 4; do python3 Benchmarks/durability/fsync_probe.py roost-data $w 5 2048; done
"""
import os
import sys
import threading
import time

SPAN_BYTES = 64 << 20


def main() -> None:
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    directory, writers, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    size = int(sys.argv[4]) if len(sys.argv) == 5 else 4096
    if writers < 1 or size < 1 or size > SPAN_BYTES // writers:
        sys.exit("WRITERS ≥ 1 and 1 ≤ SIZE ≤ 64 MiB / WRITERS")
    path = os.path.join(directory, f"fsync-probe-{os.getpid()}.dat")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        zeros = b"\0" * (1 << 20)
        for _ in range(SPAN_BYTES >> 20):
            os.write(fd, zeros)
        os.fsync(fd)
        latencies: list[list[int]] = [[] for _ in range(writers)]
        deadline = time.monotonic() + seconds

        def write_and_sync(index: int) -> None:
            part = SPAN_BYTES // writers
            start, end = index * part, (index + 1) * part
            offset, data = start, os.urandom(size)
            while time.monotonic() < deadline:
                os.pwrite(fd, data, offset)
                offset = start if offset + 2 * size > end else offset + size
                began = time.perf_counter_ns()
                os.fdatasync(fd)
                latencies[index].append(time.perf_counter_ns() - began)

        threads = [threading.Thread(target=write_and_sync, args=(i,)) for i in range(writers)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
    finally:
        os.close(fd)
        os.unlink(path)
    values = sorted(v for per_writer in latencies for v in per_writer)
    if not values:
        sys.exit("no fdatasync completed")

    def percentile(p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))] / 1000

    print(
        f"writers {writers}, {size} B a write: {len(values) / elapsed:.0f} fdatasyncs/s; latency µs "
        f"p50 {percentile(0.5):.0f} p90 {percentile(0.9):.0f} p99 {percentile(0.99):.0f} "
        f"p99.9 {percentile(0.999):.0f} max {values[-1] / 1000:.0f}")


if __name__ == "__main__":
    main()
