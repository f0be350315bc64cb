"""Shared fixtures and checks of the libsdpa Python tests (pytest).

The tolerance of every fp32 comparison against the library's double-precision
reference is the library's own (README "Accuracy"): |o - r| <= 1e-5 + 1e-4 |r|, plus one
unit in the last place of a 16-bit output. Tests that need torch take the ``torch``
fixture, which skips them with a message where torch is not installed.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import libsdpa

ROOT = Path(__file__).resolve().parents[2]

# Relative size of one unit in the last place of each storage type (2u, u the unit
# roundoff): what rounding a 16-bit output once adds (README: 2^-10 |r| for f16, 2^-7
# |r| for bf16).
ULP = {"float32": 0.0, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def shared_dir() -> Path:
    """../shared beside the repository (where CI puts it), or $LIBSDPA_SHARED."""
    return Path(os.environ.get("LIBSDPA_SHARED", ROOT.parent / "shared"))


def pytest_report_header(config: Any) -> str:
    try:
        import torch
        tv = torch.__version__
    except ImportError:
        tv = "not installed (torch tests skip)"
    return (f"libsdpa {libsdpa.__version__} from {libsdpa.library_path()}, isa "
            f"{libsdpa.get_isa()} ({', '.join(libsdpa.supported_isas())}); torch {tv}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any):
    """With LIBSDPA_NO_SKIP=1 (CI, where torch, the seeds and the model are installed) a
    skipped test is a failure: nothing may silently not run."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("LIBSDPA_NO_SKIP") == "1" and report.skipped:
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped, and LIBSDPA_NO_SKIP=1 forbids it: {reason}"


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is not installed: the comparisons "
                               "with PyTorch skip (pip install torch==2.13.0)")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def to_f64(x: Any) -> np.ndarray:
    """Any numpy array or torch tensor (bf16 included) as float64 numpy."""
    if type(x).__module__.startswith("torch"):
        return x.detach().float().numpy().astype(np.float64)
    return np.asarray(x).astype(np.float64)


def dtype_name(x: Any) -> str:
    name = str(x.dtype).replace("torch.", "")
    return name


def assert_ref_close(out: Any, ref: Any, what: str = "", ulp: float = None) -> None:
    """|o - r| <= 1e-5 + (1e-4 + ulp) |r| elementwise, with the largest error in the
    message. ``ulp`` defaults to the output's storage type's."""
    o, r = to_f64(out), to_f64(ref)
    assert o.shape == r.shape, f"{what}: shape {o.shape} != {r.shape}"
    ulp = ULP[dtype_name(out)] if ulp is None else ulp
    same_nonfinite = (~np.isfinite(r)) & (o == r)
    err = np.where(same_nonfinite, 0.0, np.abs(o - r))
    bound = 1e-5 + (1e-4 + ulp) * np.abs(np.where(np.isfinite(r), r, 0.0))
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {o.size} beyond 1e-5 + "
                           f"{1e-4 + ulp:.3g}|r|; max err {np.nanmax(err):.3e} at "
                           f"{np.unravel_index(np.nanargmax(err), err.shape)}")


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: np.ndarray = None,
                 bias: np.ndarray = None, scale: float = None, sinks: np.ndarray = None):
    """An independent float64 oracle in numpy for [B, H, T, D] inputs (GQA by repeating
    K/V heads): softmax(scale q k^T + bias, hidden where keep is False) v, and lse. Rows
    with no visible key give zeros and -inf, as libsdpa defines."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ np.swapaxes(k, -1, -2)
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    if sinks is not None:
        sk = np.asarray(sinks, dtype=np.float64)[None, :, None, None]
        m = np.maximum(m, sk)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m_safe)
    denom = p.sum(-1, keepdims=True)
    if sinks is not None:
        denom = denom + np.exp(sk - m_safe)
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(denom > 0, (p / np.where(denom > 0, denom, 1.0)) @ v, 0.0)
        lse = np.where(denom[..., 0] > 0, np.log(denom[..., 0]) + m_safe[..., 0], -np.inf)
    return o, lse


def causal_keep(tq: int, tkv: int, mode: str) -> np.ndarray:
    """Which keys row i sees: bottom-right j <= i + tkv - tq, top-left j <= i."""
    i = np.arange(tq)[:, None]
    j = np.arange(tkv)[None, :]
    return j <= (i + tkv - tq if mode == "bottom_right" else i)
