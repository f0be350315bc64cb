"""benchjson - reads the Google Benchmark JSON that `make bench` writes (build/bench.json)
into one row per case, for tools/bench-report.py, tools/bench-plot.py and
tools/bench-compare.py.

A case is named shape/variant/threads:N (bench/bench.cc); Google Benchmark appends
/iterations:I/repeats:R/real_time, which vary between runs and are dropped here. A case's
figure is the median of its repetitions, or its only run. This module only reads; it is
not a benchmark and knows nothing of how the numbers were made.
"""
import json
import sys

# The counters bench.cc sets on every row (or on some: None where absent).
COUNTERS = ("gflops", "pct_peak", "kv_gbps", "pct_dram", "check_max_abs", "check_max_rel",
            "threads_used")


def load(path):
    """Returns (context dict, list of rows in file order). Each row: key, shape, variant,
    threads, ms, label (what the check covered) and the COUNTERS (each None if absent)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: cannot read a bench JSON file ({e}); run `make bench` first")
    rows, seen = [], {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        median = b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median"
        single = b.get("run_type") == "iteration" and b.get("repetitions", 1) == 1
        if not (median or single):
            continue
        parts = b["run_name"].split("/")
        if len(parts) < 3 or not parts[2].startswith("threads:"):
            continue
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
        row = {
            "key": "/".join(parts[:3]),
            "shape": parts[0],
            "variant": parts[1],
            "threads": int(parts[2].split(":")[1]),
            "ms": b["real_time"] * unit,
            "label": b.get("label", ""),
        }
        row.update({c: b.get(c) for c in COUNTERS})
        if row["key"] in seen:
            rows[seen[row["key"]]] = row
        else:
            seen[row["key"]] = len(rows)
            rows.append(row)
    if not rows:
        sys.exit(f"{path}: no benchmark results in it")
    return data.get("context", {}), rows
