#!/usr/bin/env python3
"""bench-report - the human-readable report of a bench JSON file (`make bench` writes
build/bench.json and runs this on it): one table row per case (median time, the
reference's time and the speedup over it, GFLOP/s, % of the FMA peak, K/V GB/s and % of
the DRAM read bandwidth for decode, the largest error of the check before timing), then
comparisons between rows with the project's performance targets, then what the run
measured and left out.

    tools/bench-report.py [build/bench.json]

Standard library only. It reads numbers; it does not run or re-measure anything, and a
comparison whose rows were filtered out or failed is left out.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from benchjson import load  # noqa: E402 (after the line above)

# The targets the project set for the suite's best ISA (docs/PERFORMANCE.md, "Bench and
# tools measurements", says where each comes from).
TARGET_PREFILL_SCALING = 0.55  # prefill-causal: all-core time / 1-thread time, at most
TARGET_F16_SPEEDUP = 1.7       # decode-long f16 speed / fp32 speed at all cores, at least
TARGET_LINEAR_PEAK = 60.0      # linear at 1 thread: % of the FMA peak, at least
# Issue 15 (speed on every host): % of the DRAM read bandwidth at 1 thread and at all
# cores, at least ...
TARGET_DRAM = {"decode-long": 85.0, "decode-long-f16": 85.0, "mla-decode": 80.0}
# ... and % of the FMA peak, (at 1 thread, at all cores; None: no target there), at least
TARGET_PEAK = {"prefill-causal": (80.0, 78.0), "long-causal": (80.0, 78.0),
               "prefill": (75.0, None), "causal-d64": (70.0, None),
               "causal-d80": (70.0, None), "causal-d96": (70.0, None),
               "causal-d112": (70.0, None), "causal-d256": (70.0, None),
               "causal-d512": (70.0, None)}

# On a quiet machine an FMA loop scales with the cores (docs/PERFORMANCE.md, "fp32 FMA
# peak, measured"); an all-core peak below this fraction of threads x the 1-thread peak
# was measured while other jobs held cores, and % of peak at that count reads high.
CONTENDED_PEAK_RATIO = 0.8

SCALING_SHAPES = ("prefill-causal", "long-causal", "decode-gqa", "decode-long",
                  "decode-long-f16")

# KV caches (include/sdpa.h, "KV caches"): each row against the row issue 17 measures it
# by, and the speed ratio it asks for at every thread count (bench/shim.c has the
# formats): a paged cache against the same storage contiguous, a quantized one against
# f16 (the cache it replaces; decode-long-f16 is in every suite that has them), the
# paged int8 chunked prefill against a contiguous fp32 cache.
KV_CACHE_PAIRS = (("decode-long-paged16", "decode-long", 0.95),
                  ("decode-long-f16-paged16", "decode-long-f16", 0.95),
                  ("decode-long-int8", "decode-long-f16", 1.8),
                  ("decode-long-int4", "decode-long-f16", 3.2),
                  ("decode-long-fp8", "decode-long-f16", 1.8),
                  ("decode-long-fp8-e5m2", "decode-long-f16", 1.8),
                  ("chunked-prefill-int8-paged16", "chunked-prefill", 0.8),
                  # the bf16 compute mode's, by the same rules against its bf16 cache
                  ("decode-long-bf16-paged16", "decode-long-bf16", 0.95),
                  ("decode-long-int8-bf16", "decode-long-bf16", 1.8))
# Issue 17: int8 decode reads its codes and scales at this % of the DRAM read bandwidth
# or more at all cores.
TARGET_INT8_DRAM = 85.0
# KiB of one head's page in the paged rows (16 tokens x Dk 128 x the element size), the
# chunk of the shuffled read loop that bounds them (bench/peak.h, SB_PAGED_CHUNKS).
PAGE_KIB = {"decode-long-paged16": 8, "decode-long-f16-paged16": 4,
            "decode-long-bf16-paged16": 4}


def fmt_ms(ms):
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else \
        f"{ms:.2f}" if ms >= 1 else f"{ms:.4f}"


def opt(x, spec):
    return "-" if x is None else format(x, spec)


def table(rows):
    ref = {r["shape"]: r for r in rows if r["variant"] == "reference"}
    w = max([15] + [len(r["shape"]) for r in rows])
    print(f"{'shape':{w}} {'variant':9} {'thr':>5} {'time ms':>10} {'ref ms':>10} "
          f"{'speedup':>8} {'GFLOP/s':>8} {'%peak':>6} {'KV GB/s':>8} {'%DRAM':>6}  check max|err|")
    prev = None
    for r in rows:
        if prev is not None and r["shape"] != prev:
            print()
        prev = r["shape"]
        used = r["threads_used"]
        thr = str(r["threads"]) if used is None or int(used) == r["threads"] \
            else f"{r['threads']}({int(used)})"
        rr = ref.get(r["shape"])
        if r["variant"] == "reference":
            check = "(the oracle)"
        else:
            scope = r["label"].replace("checked: ", "")
            check = f"{opt(r['check_max_abs'], '.1e')} {scope}"
        ref_ms = fmt_ms(rr["ms"]) if rr else "-"
        speedup = f"{rr['ms'] / r['ms']:.1f}x" if rr else "-"
        print(f"{r['shape']:{w}} {r['variant']:9} {thr:>5} {fmt_ms(r['ms']):>10} {ref_ms:>10} "
              f"{speedup:>8} {opt(r['gflops'], '.1f'):>8} {opt(r['pct_peak'], '.1f'):>6} "
              f"{opt(r['kv_gbps'], '.1f'):>8} {opt(r['pct_dram'], '.0f'):>6}  {check}")
    print()


def targets(ctx, rows):
    isas = ctx.get("sdpa_isas", "").split()
    if not isas:
        return
    n = int(ctx.get("sdpa_threads_all", "1"))
    by = {(r["shape"], r["variant"], r["threads"]): r for r in rows}

    def get(shape, t):
        """The shape's row on the best ISA that times it: fp32 shapes run on the tables
        with fp32 tiles of their own, bf16 ones on those with bf16 tiles (bench.cc)."""
        return next((by[k] for k in ((shape, isa, t) for isa in isas) if k in by), None)

    def thr(t):
        return f"{t} thread{'s' if t > 1 else ''}"

    def verdict(met):
        return "met" if met else "NOT met"

    counts = [1] + ([n] if n > 1 else [])
    lines = []
    for shape in SCALING_SHAPES:
        r1, rn = get(shape, 1), get(shape, n)
        if n < 2 or not r1 or not rn:
            continue
        ratio = rn["ms"] / r1["ms"]
        line = (f"{shape}: {n}-thread time = {ratio:.3f}x the 1-thread time "
                f"({1 / ratio:.2f}x speedup)")
        if shape == "prefill-causal":
            line += (f"; target <= {TARGET_PREFILL_SCALING:.2f}x: "
                     f"{verdict(ratio <= TARGET_PREFILL_SCALING)}")
        lines.append(line)
    for shape, want in TARGET_DRAM.items():
        for t in counts:
            r, dram = get(shape, t), ctx.get(f"dram_read_gbps_threads{t}")
            if not r or r["kv_gbps"] is None or not dram:
                continue
            pct = 100 * r["kv_gbps"] / float(dram)
            lines.append(f"{shape}, {thr(t)}: K/V read at {r['kv_gbps']:.1f} GB/s = {pct:.0f}% "
                         f"of the {thr(t)} DRAM read bandwidth ({float(dram):.1f} GB/s); "
                         f"target >= {want:.0f}%: {verdict(pct >= want)}")
    for shape, wants in TARGET_PEAK.items():
        for t, want in zip(counts, wants):
            r = get(shape, t)
            if not r or r["pct_peak"] is None or want is None:
                continue
            lines.append(f"{shape}, {thr(t)}: {r['pct_peak']:.1f}% of the FMA peak; "
                         f"target >= {want:.0f}%: {verdict(r['pct_peak'] >= want)}")
    for t in counts:
        a, h = get("decode-long", t), get("decode-long-f16", t)
        if not a or not h:
            continue
        ratio = a["ms"] / h["ms"]
        line = (f"decode-long f16 / fp32 speed, {thr(t)}: {ratio:.2f}x "
                f"({h['ms']:.2f} vs {a['ms']:.2f} ms)")
        if t == n:
            line += f"; target >= {TARGET_F16_SPEEDUP:.1f}x: {verdict(ratio >= TARGET_F16_SPEEDUP)}"
        lines.append(line)
    for t in counts:
        w, c1, lc = get("window-8k", t), get("causal-1k", t), get("long-causal", t)
        if not w or not c1:
            continue
        line = (f"window-8k, {thr(t)}: {w['ms']:.1f} ms = {w['ms'] / (8 * c1['ms']):.2f}x "
                f"8 x causal-1k ({8 * c1['ms']:.1f} ms)")
        if lc:
            line += f", {w['ms'] / lc['ms']:.2f}x long-causal ({lc['ms']:.1f} ms)"
        lines.append(line)
    for shape, base, want in KV_CACHE_PAIRS:
        for t in counts:
            r, b = get(shape, t), get(base, t)
            if not r or not b:
                continue
            ratio = b["ms"] / r["ms"]
            line = (f"{shape} / {base} speed, {thr(t)}: {ratio:.2f}x "
                    f"({r['ms']:.2f} vs {b['ms']:.2f} ms); target >= {want:.2f}x: "
                    f"{verdict(ratio >= want)}")
            if r["pct_dram"] is not None:
                line += f", K/V read at {r['pct_dram']:.0f}% of DRAM"
                if shape == "decode-long-int8" and t == n:
                    line += (f" (target >= {TARGET_INT8_DRAM:.0f}%: "
                             f"{verdict(r['pct_dram'] >= TARGET_INT8_DRAM)})")
            kib = PAGE_KIB.get(shape)
            seq = float(ctx.get(f"dram_read_gbps_threads{t}", 0))
            shuf = float(ctx.get(f"dram_read_paged{kib}k_gbps_threads{t}", 0))
            if kib and seq > 0 and shuf > 0:
                line += (f"; the read loop over its pages' {kib} KiB chunks, shuffled, runs at "
                         f"{shuf / seq:.2f}x the streaming one")
            lines.append(line)
    for t in counts:
        r = get("linear", t)
        if not r or r["pct_peak"] is None:
            continue
        line = (f"linear, {thr(t)}: {r['gflops']:.1f} GFLOP/s = {r['pct_peak']:.1f}% of the "
                f"FMA peak")
        if t == 1:
            line += (f"; target >= {TARGET_LINEAR_PEAK:.0f}%: "
                     f"{verdict(r['pct_peak'] >= TARGET_LINEAR_PEAK)}")
        lines.append(line)
    if lines:
        print("targets and comparisons, the best ISA's rows (medians above):")
        for line in lines:
            print("  " + line)
        print()


def measured(ctx):
    isas = ctx.get("sdpa_isas", "").split()
    n = int(ctx.get("sdpa_threads_all", "1"))
    counts = [1] + ([n] if n > 1 else [])
    peaks, reads, paged_reads = [], [], []
    for isa in isas:
        p = [float(ctx.get(f"peak_gflops_{isa}_threads{t}", 0)) for t in counts]
        d = [float(ctx.get(f"dram_read_gbps_{isa}_threads{t}", 0)) for t in counts]
        peaks.append(f"{isa} " + " / ".join(f"{x:.0f}" for x in p))
        reads.append(f"{isa} loop " + " / ".join(f"{x:.1f}" for x in d))
        for kib in sorted(set(PAGE_KIB.values())):
            dp = [float(ctx.get(f"dram_read_paged{kib}k_gbps_{isa}_threads{t}", 0))
                  for t in counts]
            if any(dp):
                paged_reads.append(f"{isa} {kib} KiB " + " / ".join(f"{x:.1f}" for x in dp))
        if n > 1 and p[0] > 0 and p[-1] < CONTENDED_PEAK_RATIO * n * p[0]:
            print(f"{isa}: the {n}-thread FMA peak ({p[-1]:.0f}) is below "
                  f"{100 * CONTENDED_PEAK_RATIO:.0f}% of {n} x the 1-thread one ({p[0]:.0f}): "
                  f"other jobs held cores while it was measured; its % of peak reads high")
    counts_str = " / ".join(f"{t} thread{'s' if t > 1 else ''}" for t in counts)
    print(f"fp32 FMA peak, GFLOP/s ({counts_str}), measured in this run: " + ", ".join(peaks))
    print(f"DRAM read, GB/s ({counts_str}), streaming read of "
          f"{ctx.get('dram_buffer_mib', '?')} MiB, best of the passes: " + ", ".join(reads))
    if paged_reads:
        print("DRAM read in shuffled chunks (a paged cache's order), GB/s: " +
              ", ".join(paged_reads))


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "build/bench.json"
    ctx, rows = load(src)
    print()
    table(rows)
    targets(ctx, rows)
    print("time: median of repetitions, real time; ref: the naive reference (double, 1 "
          "thread); speedup = ref / time; thr 2(1): 2 asked, 1 used.")
    print("GFLOP/s: " + ctx.get("gflops_formula", "?") + "; %peak: of the row ISA's FMA peak "
          "at that thread count (openblas: of the best ISA's).")
    print("KV GB/s: " + ctx.get("kv_gbps_formula", "?") + "; %DRAM: of the DRAM read "
          "bandwidth at that thread count.")
    measured(ctx)
    shapes = dict.fromkeys(r["shape"] for r in rows)
    for s in shapes:
        if f"shape_{s}" in ctx:
            print(f"{s}: {ctx[f'shape_{s}']}; checked on the {ctx.get(f'check_{s}', '?')}")
    for k in sorted((k for k in ctx if k.startswith("note_")), key=lambda k: int(k[5:])):
        print(ctx[k])
    return 0


if __name__ == "__main__":
    sys.exit(main())
