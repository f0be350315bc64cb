"""python -m libsdpa: the version, the library and ISA in use, and a self-check.

The self-check runs the fused path against the double-precision reference on a few
shapes (tile edges, GQA, Tq != Tkv, causal both ways, a mask, 16-bit storage) on every
ISA this CPU runs, prints the largest error of each, and exits with status 1 if one is
beyond the library's tolerance (|o - r| <= 1e-5 + 1e-4 |r|, plus one unit in the last
place of a 16-bit output). It is a smoke test for an installation, not the test suite.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Tuple

import numpy as np

import libsdpa
from libsdpa import DType

# (label, B, Hq, Hkv, Tq, Tkv, D, options)
CASES: List[Tuple[str, int, int, int, int, int, int, dict]] = [
    ("causal 1x4x65x65x64", 1, 4, 4, 65, 65, 64, dict(causal=True)),
    ("gqa 2x8/2x17x129x80", 2, 8, 2, 17, 129, 80, dict()),
    ("decode 1x8/1x1x300x128", 1, 8, 1, 1, 300, 128, dict(causal=True)),
    ("top-left 1x2x33x20x17", 1, 2, 2, 33, 20, 17, dict(causal="top_left")),
    ("mask+window 2x2x64x64x16", 2, 2, 2, 64, 64, 16, dict(window=(8, 0), causal=True)),
]

# Unit in the last place of a 16-bit output, relative (README: "Accuracy").
ULP = {DType.F32: 0.0, DType.F16: 2.0 ** -10, DType.BF16: 2.0 ** -7}


def _case(rng: np.random.Generator, B: int, Hq: int, Hkv: int, Tq: int, Tkv: int,
          D: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    q = rng.standard_normal((B, Hq, Tq, D), dtype=np.float32)
    k = rng.standard_normal((B, Hkv, Tkv, D), dtype=np.float32)
    v = rng.standard_normal((B, Hkv, Tkv, D), dtype=np.float32)
    return q, k, v


def self_check(verbose: bool = True) -> bool:
    rng = np.random.default_rng(2024)
    ok_all = True
    rows = []
    for label, B, Hq, Hkv, Tq, Tkv, D, opts in CASES:
        q, k, v = _case(rng, B, Hq, Hkv, Tq, Tkv, D)
        if "window" in opts:
            opts = dict(opts, mask=rng.random((Tq, Tkv)) > 0.2)
        ref = libsdpa.reference(q, k, v, **opts).astype(np.float64)
        for isa in libsdpa.supported_isas():
            for dtype in (DType.F32, DType.F16):
                out = libsdpa.attention(q, k, v, isa=isa, out_dtype=dtype, **opts)
                err = np.abs(out.astype(np.float64) - ref)
                bound = 1e-5 + (1e-4 + ULP[dtype]) * np.abs(ref)
                ok = bool(np.all(err <= bound))
                ok_all &= ok
                used = float(np.max(err / bound))
                rows.append((label, isa, dtype.name.lower(), float(err.max()), used, ok))
    if verbose:
        # err/tol: the largest error over its bound, 1e-5 + (1e-4 + ulp) |r| (ok when <= 1).
        print(f"{'case':<26} {'isa':<7} {'out':<4} {'max abs err':>12} {'err/tol':>8}  ok")
        for label, isa, dt, err, used, ok in rows:
            print(f"{label:<26} {isa:<7} {dt:<4} {err:12.3e} {used:8.3f}  {'ok' if ok else 'FAIL'}")
    return ok_all


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libsdpa", description=__doc__.split("\n")[0])
    parser.add_argument("--no-check", action="store_true", help="skip the self-check")
    args = parser.parse_args(argv)
    print(f"libsdpa {libsdpa.__version__} ({libsdpa.library_path()})")
    print(f"isa: {libsdpa.get_isa()} (usable here: {', '.join(libsdpa.supported_isas())})")
    if args.no_check:
        return 0
    ok = self_check()
    print("self-check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
