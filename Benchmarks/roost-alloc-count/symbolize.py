#!/usr/bin/env python3
"""Symbolizes the stacks `roost-alloc-count --backtraces NAME` writes to stderr.

usage: roost-alloc-count --backtraces register_new 2> stacks.txt
       Benchmarks/roost-alloc-count/symbolize.py stacks.txt [--frames N] [--by-function [--context N]]

Each frame `path(+0xOFFSET)` or `path(symbol+0xOFFSET)` becomes a demangled
function and source line (llvm-symbolizer, then `swift demangle`). Frames of
the allocator and of the standard library's allocation entry points are
dropped, so the first frame shown is the code that asked for memory.
--by-function sums the counts by the first frame in Roost's sources (with
--context N, by the first N such frames: who called it), the "who
allocates" table of docs/performance.md.
"""
import collections
import re
import subprocess
import sys

FRAME = re.compile(r"^(?P<path>[^(]+)\((?P<symbol>[^+)]*)\+0x(?P<offset>[0-9a-f]+)\)")
HEADER = re.compile(r"^stack \d+: (?P<count>\d+) allocations")
# Allocation plumbing: the shim, the runtime's allocators, libc.
SKIPPED = ("malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "swift_slowAlloc",
           "swift_allocObject", "swift_allocBox", "swift_allocEmptyBox")


def symbolize(path, offsets):
    """Returns, for each offset of `path` (a return address: minus one), its
    frames innermost first: the inlined functions, then the one compiled."""
    query = "\n".join(hex(int(offset, 16) - 1) for offset in offsets) + "\n"
    output = subprocess.run(["llvm-symbolizer", "--obj=" + path, "--functions=linkage", "--inlines"],
                            input=query, capture_output=True, text=True).stdout
    blocks = [block.split("\n") for block in output.strip().split("\n\n")]
    mangled = [line for block in blocks for line in block[0::2]]
    demangled = subprocess.run(["swift", "demangle", "--simplified"], input="\n".join(mangled) + "\n",
                               capture_output=True, text=True).stdout.split("\n")
    names = dict(zip(mangled, demangled))
    result = []
    for block in blocks:
        frames = []
        for index in range(0, len(block) - 1, 2):
            location = re.sub(r"^.*/(Sources|Benchmarks)/", r"\1/", block[index + 1])
            frames.append((names.get(block[index], block[index]), location))
        result.append(frames or [("?", "?")])
    return result


def main():
    arguments = sys.argv[1:]
    frames_shown = 6
    by_function = "--by-function" in arguments
    context = int(arguments[arguments.index("--context") + 1]) if "--context" in arguments else 1
    if "--frames" in arguments:
        frames_shown = int(arguments[arguments.index("--frames") + 1])
    paths = [argument for argument in arguments if not argument.startswith("--") and not argument.isdigit()]
    if paths and paths[0] == arguments[-1] and len(arguments) > 1 and arguments[-2] in ("--frames", "--context"):
        paths = []
    stacks = []
    current = None
    for line in open(paths[0]) if paths else sys.stdin:
        header = HEADER.match(line)
        if header:
            current = (int(header.group("count")), [])
            stacks.append(current)
            continue
        frame = FRAME.match(line.strip())
        if frame and current is not None:
            current[1].append((frame.group("path"), frame.group("symbol"), frame.group("offset")))
    # One symbolizer run per object over every offset without a symbol.
    wanted = collections.defaultdict(set)
    for _, frames in stacks:
        for path, symbol, offset in frames:
            wanted[path].add(offset)
    names = {}
    for path, offsets in wanted.items():
        ordered = sorted(offsets)
        for offset, named in zip(ordered, symbolize(path, ordered)):
            names[(path, offset)] = named
    totals = collections.Counter()
    for count, frames in stacks:
        shown = []
        for path, symbol, offset in frames:
            for function, location in names.get((path, offset), [(symbol, "?")]):
                if any(function.startswith(skipped) for skipped in SKIPPED) or symbol in SKIPPED:
                    continue
                shown.append((function, location, path))
        if by_function:
            # The first frame in Roost's own sources: specialised standard
            # library code compiled into the binary has no such location.
            roost = [frame for frame in shown if frame[1].startswith(("Sources/", "Benchmarks/"))]
            totals[" <- ".join(f"{name} ({location})" for name, location, _ in roost[:context]) or "?"] += count
            continue
        print(f"{count} allocations")
        for function, location, _ in shown[:frames_shown]:
            print(f"    {function}  {location}")
        print()
    for name, count in totals.most_common():
        print(f"{count:>10}  {name}")


if __name__ == "__main__":
    main()
