#!/usr/bin/env python3
"""bench-torch.py - libsdpa against PyTorch's CPU scaled_dot_product_attention, side by side.

The shapes are the benchmark suite's (bench/shim.c); each runs at 1 and 2 threads (libsdpa's
num_threads, torch.set_num_threads) in this one process, on the same torch tensors (libsdpa
reads them in place). Before timing, both outputs are checked against libsdpa's
double-precision reference on exact slices (the first and last 64 query rows of the first
and last query head, each slice a problem the reference solves on its own); a mismatch
aborts. Then libsdpa and torch alternate call by call, --repeat times, and the table gives
the medians, GFLOP/s (2 (Dk + Dv) per visible score, as `make bench`) and torch / libsdpa.

    make bench-torch                                  # the suite, 1 and 2 threads
    python3 tools/bench-torch.py --shapes prefill,decode-gqa --repeat 3 --threads 1

Needs torch (pip install torch==2.13.0) and the libsdpa package or a source checkout after
`make lib`. Timings say what this machine did at the time: take the published ones on a
quiet machine. Not a replacement for `make bench` (which has the peaks and every ISA).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

try:
    import libsdpa
except ImportError:  # a source checkout: python/ next to tools/, after `make lib`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import libsdpa


class Shape(NamedTuple):
    name: str
    B: int
    Hq: int
    Hkv: int
    Tq: int
    Tkv: int
    D: int
    causal: bool = False
    dtype: str = "float32"
    window: Optional[int] = None  # keys before the diagonal (with causal)


# bench/shim.c's suite, same order and names.
SUITE = [
    Shape("prefill-causal", 1, 32, 32, 2048, 2048, 128, causal=True),
    Shape("prefill", 4, 12, 12, 512, 512, 64),
    Shape("decode-gqa", 1, 32, 8, 1, 4096, 128),
    Shape("decode-long", 1, 32, 8, 1, 65536, 128),
    Shape("decode-long-f16", 1, 32, 8, 1, 65536, 128, dtype="float16"),
    Shape("long-causal", 1, 8, 8, 8192, 8192, 128, causal=True),
    Shape("causal-1k", 1, 8, 8, 1024, 1024, 128, causal=True),
    Shape("window-8k", 1, 8, 8, 8192, 8192, 128, causal=True, window=511),
    Shape("seed", 2, 2, 2, 11, 11, 4, causal=True),
]
# torch's SDPA has no sliding window: window-8k would give torch a dense 8192 x 8192
# boolean mask and all the work of long-causal, so it runs only when named.
DEFAULT = [s.name for s in SUITE if s.window is None]

U = {"float32": 0.0, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def visible_scores(s: Shape) -> float:
    """Keys each query row sees, summed (bottom-right causal, window left of it)."""
    total = 0
    for i in range(s.Tq):
        d = i + s.Tkv - s.Tq
        hi = min(d, s.Tkv - 1) if s.causal else s.Tkv - 1
        lo = max(d - s.window, 0) if s.window is not None else 0
        total += max(hi - lo + 1, 0)
    return float(total) * s.B * s.Hq


def make(torch, s: Shape):
    gen = torch.Generator().manual_seed(s.Tq * 131 + s.Tkv)
    dt = getattr(torch, s.dtype)
    mk = lambda h, t: torch.randn(s.B, h, t, s.D, generator=gen).to(dt)
    return mk(s.Hq, s.Tq), mk(s.Hkv, s.Tkv), mk(s.Hkv, s.Tkv)


def window_mask(torch, s: Shape):
    i = torch.arange(s.Tq)[:, None] + (s.Tkv - s.Tq)
    j = torch.arange(s.Tkv)[None, :]
    return (j <= i) & (j >= i - s.window)


def run_libsdpa(s: Shape, q, k, v, threads: int):
    return libsdpa.attention(q, k, v, causal=s.causal, threads=threads,
                             window=(s.window, 0) if s.window is not None else None)


def run_torch(torch, s: Shape, q, k, v, mask):
    F = torch.nn.functional
    with torch.inference_mode():
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=s.causal and mask is None,
            enable_gqa=s.Hq != s.Hkv)


def check(torch, s: Shape, q, k, v, outs: Dict[str, object]) -> str:
    """Both outputs against the reference on exact slices: rows [0, 64) (with the keys
    they see) and the last 64 rows (every key; bottom-right alignment keeps their
    diagonal) of the first and last query head. Returns a summary; raises on a miss."""
    g = s.Hq // s.Hkv
    n = min(64, s.Tq)
    pieces = []
    for h in sorted({0, s.Hq - 1}):
        kh = h // g
        for rows in ("first", "last"):
            if rows == "first":
                r = slice(0, n)
                keys = slice(0, n) if s.causal and s.Tq == s.Tkv else slice(0, s.Tkv)
            else:
                r, keys = slice(s.Tq - n, s.Tq), slice(0, s.Tkv)
            pieces.append((slice(h, h + 1), slice(kh, kh + 1), r, keys))
    worst = {name: 0.0 for name in outs}
    opts = dict(causal=s.causal, window=(s.window, 0) if s.window is not None else None)
    u = U[s.dtype]
    for hq, hk, r, keys in pieces:
        sq, sk, sv = q[:1, hq, r], k[:1, hk, keys], v[:1, hk, keys]
        ref = libsdpa.reference(sq, sk, sv, out_dtype="float32", **opts).double()
        pv = libsdpa.attention(sq, sk, sv.abs(), out_dtype="float32", **opts).double()
        for name, out in outs.items():
            o = out[:1, hq, r].double()
            # libsdpa: its documented bound plus one ulp of a 16-bit output; torch: twice
            # the bound in fp32, plus its rounding of P and of the output in 16 bits (the
            # derivation is in python/tests/test_torch.py)
            if name == "libsdpa":
                tol = 1e-5 + (1e-4 + 2 * u) * ref.abs()
            else:
                tol = 2 * (1e-5 + 1e-4 * ref.abs()) + 2 * u * ref.abs() + u * pv
            err = (o - ref).abs()
            worst[name] = max(worst[name], float((err / tol).max()))
            if not bool((err <= tol).all()):
                raise SystemExit(f"{s.name}: {name} differs from the reference: max error "
                                 f"{float(err.max()):.3e} (rows {r.start}..{r.stop})")
    return " ".join(f"{name} {w:.2f}" for name, w in worst.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT),
                        help="comma-separated names (default: the suite without window-8k); "
                        "all: every shape")
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per variant")
    args = parser.parse_args()
    import torch

    names = [s.name for s in SUITE] if args.shapes == "all" else args.shapes.split(",")
    unknown = [n for n in names if n not in {s.name for s in SUITE}]
    if unknown:
        parser.error(f"unknown shapes {unknown}; known: {[s.name for s in SUITE]}")
    threads = [int(t) for t in args.threads.split(",")]
    shapes = [s for s in SUITE if s.name in names]
    print(f"libsdpa {libsdpa.__version__} (isa {libsdpa.get_isa()}) vs torch {torch.__version__} "
          f"scaled_dot_product_attention; median of {args.repeat}, interleaved; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    rows: List[tuple] = []
    for s in shapes:
        q, k, v = make(torch, s)
        mask = window_mask(torch, s) if s.window is not None else None
        torch.set_num_threads(max(threads))
        outs = {"libsdpa": run_libsdpa(s, q, k, v, max(threads)),
                "torch": run_torch(torch, s, q, k, v, mask)}
        verdict = check(torch, s, q, k, v, outs)
        del outs
        flops = 2 * (2 * s.D) * visible_scores(s)
        for n in threads:
            torch.set_num_threads(n)
            times: Dict[str, List[float]] = {"libsdpa": [], "torch": []}
            run_libsdpa(s, q, k, v, n)  # warm: this thread count's team and scratch
            run_torch(torch, s, q, k, v, mask)
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                run_libsdpa(s, q, k, v, n)
                t1 = time.perf_counter()
                run_torch(torch, s, q, k, v, mask)
                t2 = time.perf_counter()
                times["libsdpa"].append(t1 - t0)
                times["torch"].append(t2 - t1)
            lib, tor = (statistics.median(times[x]) for x in ("libsdpa", "torch"))
            rows.append((s, n, lib, tor, flops, verdict))
            print(f"  {s.name:<16} {n} thread(s): libsdpa {lib * 1e3:10.3f} ms, torch "
                  f"{tor * 1e3:10.3f} ms", flush=True)
        del q, k, v
    print(f"\nload average at the end {os.getloadavg()[0]:.2f} (other jobs on the machine make "
          "the 2-thread rows noisy first)")
    head = (f"| {'shape':<16} | thr | {'libsdpa ms':>11} | {'torch ms':>11} | torch/libsdpa "
            f"| libsdpa GFLOP/s | torch GFLOP/s | check (err/tol) |")
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for s, n, lib, tor, flops, verdict in rows:
        print(f"| {s.name:<16} | {n:>3} | {lib * 1e3:11.3f} | {tor * 1e3:11.3f} | "
              f"{tor / lib:12.2f}x | {flops / lib / 1e9:15.1f} | {flops / tor / 1e9:13.1f} "
              f"| {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
