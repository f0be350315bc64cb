"""libsdpa against torch.nn.functional.scaled_dot_product_attention, for everything torch's
SDPA has: is_causal (top-left, so libsdpa's causal="top_left"), bool and float attn_mask
with broadcast, enable_gqa, scale, fp32/bf16/f16, over shapes around the tiles' edges.

Tolerances:
- fp32: torch's CPU SDPA is also an fp32 online-softmax kernel with fp32 accumulation;
  its distance from the exact result is of the same kind as libsdpa's, which the library
  bounds by 1e-5 + 1e-4 |r| (torch measured here at < 10% of that bound on these
  shapes). Two results each within that bound of the exact one are within twice it of
  each other: |o - t| <= 2 (1e-5 + 1e-4 |t|). libsdpa is also held to its own bound
  against its reference.
- bf16 / f16, unit roundoff u = 2^-8 / 2^-11: both read the same 16-bit inputs exactly
  and compute scores in fp32. libsdpa rounds only its output (<= u |r|). torch's kernel
  also rounds the softmax weights P to 16 bits before P V, each by <= u p_j, which moves
  the output by <= u sum_j p_j |v_j|, and rounds its output (<= u |r|). So
  |o - t| <= 2u |t| + u sum_j p_j |v_j| + 2 (1e-5 + 1e-4 |t|), sum_j p_j |v_j| computed
  per row as attention(q, k, |v|).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import libsdpa
from conftest import assert_ref_close, to_f64

TS = [1, 7, 16, 17, 63, 64, 65, 129]
DS = [1, 8, 17, 64, 80, 128]
U = {"float32": 0.0, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
HEADS = [(1, 1), (4, 4), (4, 2), (8, 1), (6, 3)]


def check_vs_torch(torch, o, t, q, k, v, **lib_opts):
    """|o - t| within the tolerance the module docstring derives; o and t torch tensors."""
    assert o.dtype == t.dtype and o.shape == t.shape
    name = str(t.dtype).replace("torch.", "")
    u = U[name]
    tt = to_f64(t)
    tol = 2 * (1e-5 + 1e-4 * np.abs(tt))
    if u:
        pv = to_f64(libsdpa.attention(q, k, v.abs(), out_dtype="float32", **lib_opts))
        tol = tol + 2 * u * np.abs(tt) + u * pv
    err = np.abs(to_f64(o) - tt)
    assert np.all(err <= tol), (f"{name}: max |libsdpa - torch| {err.max():.3e}, "
                                f"{int((err > tol).sum())} beyond tolerance")


def make(torch, gen, B, Hq, Hkv, Tq, Tkv, D, dtype):
    mk = lambda *s: torch.randn(*s, generator=gen).to(dtype)
    return mk(B, Hq, Tq, D), mk(B, Hkv, Tkv, D), mk(B, Hkv, Tkv, D)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("T,D", list(itertools.product(TS, DS)))
def test_sweep(torch, T, D, dtype):
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(T * 1000 + D)
    pick = np.random.default_rng(T * 1000 + D)
    B = int(pick.integers(1, 3))
    Hq, Hkv = HEADS[int(pick.integers(len(HEADS)))]
    causal = bool(pick.integers(2))
    # Tq == Tkv, or a key length from the list (Tq != Tkv: where top-left matters)
    Tkv = T if pick.integers(2) else TS[int(pick.integers(len(TS)))]
    dt = getattr(torch, dtype)
    q, k, v = make(torch, gen, B, Hq, Hkv, T, Tkv, D, dt)
    t = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv)
    mode = "top_left" if causal else False
    o = libsdpa.attention(q, k, v, causal=mode)
    assert isinstance(o, torch.Tensor) and o.dtype == dt and o.shape == t.shape
    check_vs_torch(torch, o, t, q, k, v, causal=mode)
    if dtype == "float32":
        assert_ref_close(o, libsdpa.reference(q, k, v, causal=mode), "vs reference")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("shape", ["TS", "B1TS", "1HTS", "BHTS", "BH1S"])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks(torch, dtype, shape, kind):
    F = torch.nn.functional
    B, Hq, Hkv, Tq, Tkv, D = 2, 4, 2, 33, 65, 64
    gen = torch.Generator().manual_seed(7)
    dt = getattr(torch, dtype)
    q, k, v = make(torch, gen, B, Hq, Hkv, Tq, Tkv, D, dt)
    dims = {"TS": (Tq, Tkv), "B1TS": (B, 1, Tq, Tkv), "1HTS": (1, Hq, Tq, Tkv),
            "BHTS": (B, Hq, Tq, Tkv), "BH1S": (B, Hq, 1, Tkv)}[shape]
    if kind == "bool":
        m = torch.rand(*dims, generator=gen) > 0.4
        m[..., 3] = True  # every row keeps a key: torch and libsdpa differ on empty rows
    else:
        m = torch.randn(*dims, generator=gen).to(dt)
        m[..., 5] = float("-inf")
    t = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    o = libsdpa.attention(q, k, v, mask=m)
    check_vs_torch(torch, o, t, q, k, v, mask=m)
    if dtype == "float32":
        assert_ref_close(o, libsdpa.reference(q, k, v, mask=m), "vs reference")


@pytest.mark.parametrize("hq,hkv", [(8, 1), (8, 2), (8, 4), (6, 3), (5, 5)])
@pytest.mark.parametrize("scale", [None, 0.02, 1.0])
def test_gqa_and_scale(torch, hq, hkv, scale):
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(hq * 10 + hkv)
    q, k, v = make(torch, gen, 2, hq, hkv, 17, 40, 32, torch.float32)
    t = F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=hq != hkv,
                                       is_causal=True)
    o = libsdpa.attention(q, k, v, scale=scale, causal="top_left")
    check_vs_torch(torch, o, t, q, k, v, scale=scale, causal="top_left")


def test_bthd_views_and_lse(torch):
    """Tensors in [B, T, H, D] (a projection's output, viewed per head) go in as they
    are; the lse is torch's logsumexp of the scaled scores."""
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 50, 3 * 8 * 16, generator=gen)
    q, k, v = (t.view(2, 50, 8, 16) for t in x.split(8 * 16, dim=-1))
    assert not q.is_contiguous()
    o, lse = libsdpa.attention(q, k, v, layout="bthd", causal=True, return_lse=True)
    t = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True)
    check_vs_torch(torch, o.transpose(1, 2), t, q, k, v, layout="bthd", causal=True)
    s = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / 4.0
    s = s.masked_fill(torch.triu(torch.ones(50, 50, dtype=torch.bool), 1), float("-inf"))
    assert lse.dtype == torch.float32 and lse.shape == (2, 8, 50)
    assert_ref_close(lse, torch.logsumexp(s.double(), -1), "lse")


def test_grad_tensors_and_outputs(torch):
    """Tensors that require grad are read (no autograd: the output is a plain tensor)."""
    q = torch.randn(1, 2, 5, 8, requires_grad=True)
    o = libsdpa.attention(q, q, q)
    assert not o.requires_grad
    t = torch.nn.functional.scaled_dot_product_attention(q, q, q).detach()
    check_vs_torch(torch, o, t, q.detach(), q.detach(), q.detach())


def test_mixed_kinds_rejected(torch):
    q = torch.randn(1, 2, 5, 8)
    with pytest.raises(TypeError):
        libsdpa.attention(q, q.numpy(), q)


def test_the_torch_check_can_fail(torch):
    gen = torch.Generator().manual_seed(1)
    q, k, v = make(torch, gen, 1, 2, 2, 16, 16, 16, torch.bfloat16)
    t = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    o = libsdpa.attention(q, k, v)
    off = o.clone()
    off[0, 1, 3, 4] += 0.05 + 0.05 * abs(float(off[0, 1, 3, 4]))
    with pytest.raises(AssertionError):
        check_vs_torch(torch, off, t, q, k, v)


@pytest.mark.parametrize("T,D", [(1, 64), (17, 80), (64, 128), (129, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_compute(torch, T, D, causal):
    """compute="bf16" is torch's bf16 arithmetic: both read the same bf16 q, k, v, compute
    scores in fp32, round the weights P to bf16 before P V (each by <= u p_j, u = 2^-8,
    at its own running max) and round the output. So |o - t| <= 2u |t| + 2u sum_j p_j
    |v_j| + the fp32 tolerance; and libsdpa against its own reference in the mode within
    the header's model, A_d <= sum_j p_j |v_j|: |o - r| <= (2^-7 + 2^-8) A + u |r|."""
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(T * 100 + D)
    q, k, v = make(torch, gen, 1, 4, 2, T, T + 31, D, torch.bfloat16)
    mode = "top_left" if causal else False
    t = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    o = libsdpa.attention(q, k, v, causal=mode, compute="bf16")
    r = libsdpa.reference(q, k, v, causal=mode, compute="bf16", out_dtype="float32")
    pv = to_f64(libsdpa.attention(q, k, v.abs(), out_dtype="float32", causal=mode))
    u = 2.0 ** -8
    tt, oo = to_f64(t), to_f64(o)
    tol = 2 * (1e-5 + 1e-4 * np.abs(tt)) + 2 * u * np.abs(tt) + 2 * u * pv
    err = np.abs(oo - tt)
    assert np.all(err <= tol), f"max |libsdpa bf16 - torch| {err.max():.3e}"
    err_r = np.abs(oo - to_f64(r))
    assert np.all(err_r <= (2 ** -7 + 2 ** -8) * pv + u * np.abs(to_f64(r)) + 1e-6), \
        f"max |o - reference(bf16)| {err_r.max():.3e}"


def test_compute_names():
    q = np.ones((1, 1, 2, 4), np.float32)
    with pytest.raises(ValueError, match="compute"):
        libsdpa.attention(q, q, q, compute="fp8")
    with pytest.raises(libsdpa.BadArgumentError):
        libsdpa.attention(q, q, q, compute=7)
