#!/usr/bin/env python3
"""The top functions of a Go CPU profile (pprof's protobuf, gzipped), for a
machine without the Go toolchain: the profile.proto fields this needs
(samples, locations, functions, the string table) read with a minimal
protobuf decoder. Prints the share of the CPU samples each function is on
the stack of (cumulative), and the share it is the leaf of (flat).

usage: pprof_top.py PROFILE [--top N]
"""
import argparse, collections, gzip


def varint(data, index):
    value, shift = 0, 0
    while True:
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, index


def fields(data):
    index = 0
    while index < len(data):
        key, index = varint(data, index)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, index = varint(data, index)
        elif wire == 2:
            length, index = varint(data, index)
            value, index = data[index:index + length], index + length
        elif wire == 1:
            value, index = data[index:index + 8], index + 8
        elif wire == 5:
            value, index = data[index:index + 4], index + 4
        else:
            raise SystemExit(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def packed(value, wire):
    if wire == 0:
        return [value]
    out, index = [], 0
    while index < len(value):
        number, index = varint(value, index)
        out.append(number)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    data = open(args.profile, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    samples, locations, functions, strings = [], {}, {}, []
    for number, wire, value in fields(data):
        if number == 2:  # Sample: location_id (1), value (2)
            ids, values = [], []
            for inner, inner_wire, inner_value in fields(value):
                if inner == 1:
                    ids += packed(inner_value, inner_wire)
                elif inner == 2:
                    values += packed(inner_value, inner_wire)
            samples.append((ids, values))
        elif number == 4:  # Location: id (1), line (4) → function_id (1)
            location, lines = None, []
            for inner, _, inner_value in fields(value):
                if inner == 1:
                    location = inner_value
                elif inner == 4:
                    lines += [function for key, _, function in fields(inner_value) if key == 1]
            locations[location] = lines
        elif number == 5:  # Function: id (1), name (2, a string index)
            function, name = None, None
            for inner, _, inner_value in fields(value):
                if inner == 1:
                    function = inner_value
                elif inner == 2:
                    name = inner_value
            functions[function] = name
        elif number == 6:
            strings.append(value.decode(errors="replace"))
    # A CPU profile's sample values are (samples, nanoseconds): weigh by the last.
    total = sum(values[-1] for _, values in samples) or 1
    flat, cumulative = collections.Counter(), collections.Counter()
    for ids, values in samples:
        names = [strings[functions[function]] for location in ids for function in reversed(locations.get(location, []))]
        if names:
            flat[names[0]] += values[-1]
        for name in set(names):
            cumulative[name] += values[-1]
    print(f"{total / 1e9:.2f} s of CPU samples")
    print("cumulative:")
    for name, value in cumulative.most_common(args.top):
        print(f"  {100 * value / total:5.1f} %  {name}")
    print("flat:")
    for name, value in flat.most_common(args.top):
        print(f"  {100 * value / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
