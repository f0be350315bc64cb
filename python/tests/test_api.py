"""attention / reference / attention_weights on numpy arrays: every descriptor feature
against the library's reference (on every ISA this CPU runs) and the semantics against
an independent numpy oracle; ISA controls, version, lse, stats, determinism. No torch
needed (test_torch.py compares with PyTorch)."""
from __future__ import annotations

import numpy as np
import pytest

import libsdpa
from conftest import assert_ref_close, causal_keep, np_attention

ISAS = libsdpa.supported_isas()


def qkv(rng, B=2, Hq=4, Hkv=2, Tq=17, Tkv=33, Dk=16, Dv=None, dtype=np.float32):
    Dv = Dk if Dv is None else Dv
    q = rng.standard_normal((B, Hq, Tq, Dk)).astype(dtype)
    k = rng.standard_normal((B, Hkv, Tkv, Dk)).astype(dtype)
    v = rng.standard_normal((B, Hkv, Tkv, Dv)).astype(dtype)
    return q, k, v


def test_version_and_isa_names():
    assert libsdpa.__version__ == libsdpa.version()
    assert libsdpa.__version__.count(".") == 2
    assert libsdpa.ISAS[0] == "auto" and "scalar" in libsdpa.ISAS
    assert libsdpa.get_isa() in libsdpa.ISAS[1:]
    assert "scalar" in ISAS and libsdpa.isa_supported("scalar")
    assert libsdpa.isa_supported(libsdpa.get_isa())


def test_set_isa_round_trip():
    before = libsdpa.get_isa()
    try:
        libsdpa.set_isa("scalar")
        assert libsdpa.get_isa() == "scalar"
        stats = libsdpa.Stats()
        q, k, v = qkv(np.random.default_rng(0))
        libsdpa.attention(q, k, v, stats=stats)
        assert stats.isa == libsdpa.Isa.SCALAR
    finally:
        libsdpa.set_isa(None)
    assert libsdpa.get_isa() == before


def test_unusable_isa_is_an_error():
    missing = [n for n in libsdpa.ISAS[1:] if n not in ISAS]
    if not missing:
        pytest.skip("every ISA is usable here")
    with pytest.raises(libsdpa.UnsupportedIsaError) as e:
        libsdpa.set_isa(missing[0])
    assert e.value.status == libsdpa.Status.ERR_UNSUPPORTED_ISA
    q, k, v = qkv(np.random.default_rng(0))
    with pytest.raises(libsdpa.UnsupportedIsaError):
        libsdpa.attention(q, k, v, isa=missing[0])
    with pytest.raises(ValueError):
        libsdpa.isa_supported("sse9")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("causal", [False, True, "top_left"])
def test_fused_matches_reference(rng, isa, causal):
    q, k, v = qkv(rng, Dv=24)
    o, lse = libsdpa.attention(q, k, v, causal=causal, isa=isa, return_lse=True)
    r, rlse = libsdpa.reference(q, k, v, causal=causal, return_lse=True)
    assert o.shape == (2, 4, 17, 24) and lse.shape == (2, 4, 17)
    assert_ref_close(o, r, f"{isa} causal={causal}")
    assert_ref_close(lse, rlse, f"{isa} lse")


@pytest.mark.parametrize("mode", ["bottom_right", "top_left"])
@pytest.mark.parametrize("tq,tkv", [(5, 12), (12, 5), (9, 9)])
def test_causal_alignment_semantics(rng, mode, tq, tkv):
    """causal=True is bottom-right, "top_left" is PyTorch's: checked against a numpy
    oracle that builds the visible set from the definition."""
    q, k, v = qkv(rng, B=1, Hq=2, Hkv=2, Tq=tq, Tkv=tkv, Dk=8)
    keep = causal_keep(tq, tkv, mode)
    want, want_lse = np_attention(q, k, v, keep=keep)
    arg = True if mode == "bottom_right" else "top_left"
    o, lse = libsdpa.attention(q, k, v, causal=arg, return_lse=True)
    assert_ref_close(o, want, mode)
    assert np.array_equal(np.isinf(lse), np.isinf(want_lse))
    assert_ref_close(lse[np.isfinite(lse)], want_lse[np.isfinite(want_lse)], "lse")
    if tq > tkv and mode == "bottom_right":
        # rows above the shifted diagonal see nothing: exact zeros, lse -inf
        assert np.all(o[:, :, : tq - tkv] == 0) and np.all(np.isneginf(lse[:, :, : tq - tkv]))


@pytest.mark.parametrize("isa", ISAS)
def test_layouts_and_ranks(rng, isa):
    q, k, v = qkv(rng)
    ref = libsdpa.reference(q, k, v, causal=True)
    # [B, T, H, D]: the same data through transposed views, read in place
    o = libsdpa.attention(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3),
                          v.transpose(0, 2, 1, 3), causal=True, layout="bthd", isa=isa)
    assert o.shape == (2, 17, 4, 16)
    assert_ref_close(o.transpose(0, 2, 1, 3), ref, "bthd")
    # 3-d [H, T, D] and 2-d [T, D]
    o3 = libsdpa.attention(q[1], k[1], v[1], causal=True, isa=isa)
    assert o3.shape == (4, 17, 16)
    assert_ref_close(o3, ref[1], "3-d")
    o2 = libsdpa.attention(q[1, 2], k[1, 1], v[1, 1], causal=True, isa=isa)
    assert o2.shape == (17, 16)
    assert_ref_close(o2, ref[1, 2], "2-d")


def test_scale(rng):
    q, k, v = qkv(rng)
    for scale in (0.05, 1.0, 3.0):
        want, _ = np_attention(q, k, v, scale=scale)
        assert_ref_close(libsdpa.attention(q, k, v, scale=scale), want, f"scale {scale}")
    # None and 0 are the default 1/sqrt(Dk), the library's convention
    want, _ = np_attention(q, k, v)
    assert_ref_close(libsdpa.attention(q, k, v, scale=None), want)
    assert_ref_close(libsdpa.attention(q, k, v, scale=0.0), want)


@pytest.mark.parametrize("isa", ISAS)
def test_masks_broadcast(rng, isa):
    q, k, v = qkv(rng, B=2, Hq=4, Hkv=2, Tq=9, Tkv=20)
    keep_full = rng.random((2, 4, 9, 20)) > 0.3
    keep_full[..., 0] = True
    cases = {
        "bool [Tq,Tkv]": keep_full[0, 0],
        "bool [B,1,Tq,Tkv]": keep_full[:, :1],
        "bool [1,Hq,1,Tkv]": keep_full[:1, :, :1],
        "uint8 [B,Hq,Tq,Tkv]": keep_full.astype(np.uint8) * 7,
    }
    for name, m in cases.items():
        keep = np.broadcast_to(m != 0, keep_full.shape)
        want, _ = np_attention(q, k, v, keep=keep)
        assert_ref_close(libsdpa.attention(q, k, v, mask=m, isa=isa), want, name)
    bias = rng.standard_normal((9, 20)).astype(np.float32)
    bias[:, 3] = -np.inf
    want, _ = np_attention(q, k, v, bias=bias.astype(np.float64))
    assert_ref_close(libsdpa.attention(q, k, v, mask=bias, isa=isa), want, "additive f32")
    bias16 = bias.astype(np.float16)
    want, _ = np_attention(q, k, v, bias=bias16.astype(np.float64))
    assert_ref_close(libsdpa.attention(q, k, v, mask=bias16, isa=isa), want, "additive f16")
    # a broadcast view made by numpy itself (stride 0) is passed as it is
    view = np.broadcast_to(keep_full[0, 0], (2, 4, 9, 20))
    want, _ = np_attention(q, k, v, keep=view)
    assert_ref_close(libsdpa.attention(q, k, v, mask=view, isa=isa), want, "stride-0 view")


@pytest.mark.parametrize("isa", ISAS)
def test_window_softcap_alibi_sinks(rng, isa):
    q, k, v = qkv(rng, B=1, Hq=4, Hkv=4, Tq=40, Tkv=40)
    slopes = np.array([2.0 ** (-8 * (h + 1) / 4) for h in range(4)], dtype=np.float32)
    sinks = np.array([0.5, 1.0, -2.0, -np.inf], dtype=np.float32)
    options = [dict(window=(7, 0), causal=True), dict(window=(3, 5)), dict(window=(None, 2)),
               dict(softcap=2.0), dict(alibi_slopes=slopes, causal=True), dict(sinks=sinks),
               dict(window=(11, 0), causal=True, softcap=5.0, alibi_slopes=slopes,
                    sinks=sinks)]
    for opt in options:
        o, lse = libsdpa.attention(q, k, v, isa=isa, return_lse=True, **opt)
        r, rlse = libsdpa.reference(q, k, v, return_lse=True, **opt)
        assert_ref_close(o, r, f"{isa} {sorted(opt)}")
        assert_ref_close(lse, rlse, f"{isa} lse {sorted(opt)}")


def test_feature_semantics_against_numpy(rng):
    """Each option means what the README says, checked with the numpy oracle."""
    q, k, v = qkv(rng, B=1, Hq=2, Hkv=2, Tq=12, Tkv=12, Dk=8)
    i, j = np.arange(12)[:, None], np.arange(12)[None, :]
    want, _ = np_attention(q, k, v, keep=(j >= i - 3) & (j <= i + 1))
    assert_ref_close(libsdpa.attention(q, k, v, window=(3, 1)), want, "window")
    cap = 1.5
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(8)
    p = np.exp(cap * np.tanh(s / cap))
    want = (p / p.sum(-1, keepdims=True)) @ v
    assert_ref_close(libsdpa.attention(q, k, v, softcap=cap), want, "softcap")
    slopes = np.array([0.5, 0.125], dtype=np.float32)
    bias = -slopes[None, :, None, None].astype(np.float64) * np.abs(i - j)
    want, _ = np_attention(q, k, v, bias=bias)
    assert_ref_close(libsdpa.attention(q, k, v, alibi_slopes=slopes), want, "alibi")
    sinks = np.array([1.0, -0.5], dtype=np.float32)
    want, want_lse = np_attention(q, k, v, sinks=sinks)
    o, lse = libsdpa.attention(q, k, v, sinks=sinks, return_lse=True)
    assert_ref_close(o, want, "sinks")
    assert_ref_close(lse, want_lse, "sinks lse")


@pytest.mark.parametrize("heads", [1, 6, 8, 12, 32])
def test_alibi_slopes(heads):
    """sdpa_alibi_slopes: the paper's geometric slopes for a power of two, its reference
    code's interleaving otherwise; errors carry their status."""
    n = 1 << (heads.bit_length() - 1)
    want = [2.0 ** (-8 * (h + 1) / n) for h in range(n)]
    want += [2.0 ** (-8 * (2 * (h - n) + 1) / (2 * n)) for h in range(n, heads)]
    got = libsdpa.alibi_slopes(heads)
    assert got.dtype == np.float32 and got.shape == (heads,)
    assert np.array_equal(got, np.array(want, dtype=np.float32))
    assert np.array_equal(libsdpa.alibi_slopes(heads, 16.0),
                          np.array([w ** 2 for w in want], dtype=np.float32))
    with pytest.raises(libsdpa.BadArgumentError):
        libsdpa.alibi_slopes(heads, -1.0)
    with pytest.raises(libsdpa.BadDimensionError):
        libsdpa.alibi_slopes(0)


def test_padding_lengths(rng):
    q, k, v = qkv(rng, B=3, Hq=2, Hkv=1, Tq=10, Tkv=16)
    kv_lens, q_lens = [16, 5, 0], [10, 3, 4]
    o, lse = libsdpa.attention(q, k, v, kv_lens=kv_lens, q_lens=q_lens, causal=True,
                               return_lse=True)
    r = libsdpa.reference(q, k, v, kv_lens=kv_lens, q_lens=q_lens, causal=True)
    assert_ref_close(o, r, "padding")
    for b in range(3):
        tq, tk = q_lens[b], kv_lens[b]
        assert np.all(o[b, :, tq:] == 0) and np.all(np.isneginf(lse[b, :, tq:]))
        if tk and tq:
            # causal per sequence: bottom-right against its own lengths
            want = libsdpa.attention(q[b:b + 1, :, :tq], k[b:b + 1, :, :tk], v[b:b + 1, :, :tk],
                                     causal=True)
            assert_ref_close(o[b:b + 1, :, :tq], want, f"sequence {b}")
    assert np.all(o[2] == 0)  # no keys at all: zeros, never NaN


@pytest.mark.parametrize("layout", ["bthd", "bhtd"])
def test_packed_varlen(rng, layout):
    lens_q, lens_k = [5, 7, 1], [5, 9, 4]
    cu_q, cu_k = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    H, D = 4, 16
    q = rng.standard_normal((cu_q[-1], H, D)).astype(np.float32)
    k = rng.standard_normal((cu_k[-1], 2, D)).astype(np.float32)
    v = rng.standard_normal((cu_k[-1], 2, D)).astype(np.float32)
    if layout == "bhtd":
        q, k, v = (np.ascontiguousarray(a.transpose(1, 0, 2)) for a in (q, k, v))
    o, lse = libsdpa.attention(q, k, v, cu_seqlens=(cu_q, cu_k), causal=True, layout=layout,
                               return_lse=True)
    assert o.shape == q.shape and lse.shape == (H, cu_q[-1])
    for b in range(3):
        sq, sk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        part = (lambda a, s: a[s]) if layout == "bthd" else (lambda a, s: a[:, s])
        want, want_lse = libsdpa.reference(part(q, sq), part(k, sk), part(v, sk), causal=True,
                                           layout=layout, return_lse=True)
        assert_ref_close(part(o, sq), want, f"sequence {b}")
        assert_ref_close(lse[:, sq], want_lse, f"lse {b}")
    # one offsets array for both
    cu = np.cumsum([0, 6, 6])
    qs = q[:12] if layout == "bthd" else q[:, :12]
    ks = k[:12] if layout == "bthd" else k[:, :12]
    vs = v[:12] if layout == "bthd" else v[:, :12]
    assert_ref_close(libsdpa.attention(qs, ks, vs, cu_seqlens=cu, layout=layout),
                     libsdpa.reference(qs, ks, vs, cu_seqlens=cu, layout=layout), "shared cu")


def test_dropout(rng):
    q, k, v = qkv(rng, B=1, Hq=2, Hkv=2, Tq=64, Tkv=64, Dk=32)
    a = libsdpa.attention(q, k, v, dropout_p=0.25, seed=7, threads=1)
    b = libsdpa.attention(q, k, v, dropout_p=0.25, seed=7, threads=2)
    c = libsdpa.attention(q, k, v, dropout_p=0.25, seed=8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert_ref_close(a, libsdpa.reference(q, k, v, dropout_p=0.25, seed=7), "dropout")
    w = libsdpa.attention_weights(q, k, dropout_p=0.25, seed=7)
    dropped = np.mean(w == 0)
    assert 0.2 < dropped < 0.3, dropped
    assert np.array_equal(libsdpa.attention(q, k, v, dropout_p=0.0, seed=7),
                          libsdpa.attention(q, k, v))


def test_threads_give_the_same_bits(rng):
    q, k, v = qkv(rng, B=1, Hq=8, Hkv=2, Tq=200, Tkv=300, Dk=64)
    runs = [libsdpa.attention(q, k, v, causal=True, threads=t) for t in (1, 2, 3)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


def test_lse_and_weights(rng):
    q, k, v = qkv(rng, B=2, Hq=4, Hkv=2, Tq=6, Tkv=9, Dk=8)
    keep = causal_keep(6, 9, "bottom_right")
    _, want_lse = np_attention(q, k, v, keep=keep)
    o, lse = libsdpa.attention(q, k, v, causal=True, return_lse=True)
    assert lse.dtype == np.float32
    assert_ref_close(lse, want_lse, "lse")
    w = libsdpa.attention_weights(q, k, causal=True)
    w_lse = libsdpa.attention_weights(q, k, lse=lse, causal=True)
    w_v = libsdpa.attention_weights(q, k, v, causal=True)
    assert w.shape == (2, 4, 6, 9)
    assert np.array_equal(w, w_lse) and np.array_equal(w, w_v)
    g = np.repeat(k, 2, axis=1).astype(np.float64)
    s = np.where(keep, q.astype(np.float64) @ np.swapaxes(g, -1, -2) / np.sqrt(8), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    assert_ref_close(w, p / p.sum(-1, keepdims=True), "weights")
    assert_ref_close(w @ np.repeat(v, 2, axis=1), o, "weights @ v")
    with pytest.raises(libsdpa.BadDimensionError):
        libsdpa.attention_weights(q, k, lse=lse[:, :2], causal=True)


def test_stats_count_causal_skips(rng):
    q, k, v = qkv(rng, B=1, Hq=2, Hkv=2, Tq=512, Tkv=512, Dk=64)
    stats = libsdpa.Stats()
    libsdpa.attention(q, k, v, causal=True, stats=stats, threads=2)
    assert stats.blocks_total > 0
    assert stats.blocks_skipped > 0
    assert stats.blocks_computed + stats.blocks_skipped == stats.blocks_total
    # O(threads x tile), far below the [Hq, Tq, Tkv] score matrix it never builds
    assert 0 < stats.scratch_bytes < 2 * 512 * 512 * 4
    assert "blocks_skipped" in repr(stats)


def test_out_and_out_dtype(rng):
    q, k, v = qkv(rng)
    ref = libsdpa.reference(q, k, v)
    out = np.full(q.shape, np.nan, dtype=np.float32)
    got = libsdpa.attention(q, k, v, out=out)
    assert got is out
    assert_ref_close(out, ref, "out=")
    half = libsdpa.attention(q, k, v, out_dtype="float16")
    assert half.dtype == np.float16
    assert_ref_close(half, ref, "f16 out")
    # out in [B, T, H, D] for bhtd inputs: a transposed view is written in place
    big = np.zeros((2, 17, 4, 16), dtype=np.float32)
    libsdpa.attention(q, k, v, out=big.transpose(0, 2, 1, 3))
    assert_ref_close(big.transpose(0, 2, 1, 3), ref, "strided out")


@pytest.mark.parametrize("dt", [np.float16, "bfloat16"])
def test_16bit_numpy(rng, dt):
    if dt == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="numpy bfloat16 needs ml_dtypes")
        dt = ml_dtypes.bfloat16
    q, k, v = qkv(rng, dtype=dt)
    o = libsdpa.attention(q, k, v, causal=True)
    assert o.dtype == np.dtype(dt)
    # the reference reads the same 16-bit inputs exactly; fp32 out, then compare
    ref = libsdpa.reference(q, k, v, causal=True, out_dtype="float32")
    assert_ref_close(o, ref, str(dt))
    # mixed storage: f32 q, 16-bit k and v
    mixed = libsdpa.attention(q.astype(np.float32), k, v, causal=True)
    assert mixed.dtype == np.float32
    assert_ref_close(mixed, libsdpa.reference(q.astype(np.float32), k, v, causal=True))


def test_the_check_can_fail(rng):
    """The comparison used everywhere notices an error at the tolerance's scale."""
    q, k, v = qkv(rng)
    r = libsdpa.reference(q, k, v)
    bad = r.copy()
    bad[1, 2, 3, 4] += 1e-3 + 1e-3 * abs(bad[1, 2, 3, 4])
    with pytest.raises(AssertionError):
        assert_ref_close(bad, r)
