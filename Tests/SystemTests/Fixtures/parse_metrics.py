"""Parses a Prometheus text exposition (version 0.0.4) from stdin with the
reference parser, prometheus_client, and prints one JSON object a line per
sample: {"family", "type", "name", "labels", "value"}.

Exits non-zero (with the parser's error on stderr) when the text does not
parse, when a family has no TYPE, or when a histogram is inconsistent
(buckets not cumulative, no +Inf bucket, _count different from +Inf).
Used by Tests/SystemTests/MetricsSystemTests.swift through the virtual
environment `make test` creates (.venv-test)."""

import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
families = list(text_string_to_metric_families(text))
problems = []
for family in families:
    if family.type == "unknown":
        problems.append(f"{family.name}: no TYPE")
    if family.type == "histogram":
        series = {}
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            entry = series.setdefault(labels, {"buckets": [], "count": None})
            if sample.name.endswith("_bucket"):
                entry["buckets"].append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                entry["count"] = sample.value
        for labels, entry in series.items():
            buckets = entry["buckets"]
            if not buckets or not math.isinf(buckets[-1][0]):
                problems.append(f"{family.name}{labels}: no +Inf bucket")
                continue
            for (bound_a, count_a), (bound_b, count_b) in zip(buckets, buckets[1:]):
                if bound_b <= bound_a or count_b < count_a:
                    problems.append(f"{family.name}{labels}: buckets not ascending and cumulative")
            if entry["count"] != buckets[-1][1]:
                problems.append(f"{family.name}{labels}: _count {entry['count']} != +Inf {buckets[-1][1]}")
    for sample in family.samples:
        print(json.dumps({"family": family.name, "type": family.type, "name": sample.name,
                          "labels": sample.labels, "value": sample.value}))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
