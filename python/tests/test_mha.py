"""MultiHeadAttention (sdpa_mha_forward) and linear (sdpa_linear): built from
torch.nn.MultiheadAttention and called like it, and built from raw weights and checked
against the same layer composed from linear() and attention().

Tolerance against torch's fp32 layer: |y - t| <= 2 (1e-5 + 1e-4 |t|). Both compute in
fp32 with fp32 accumulation; the attention parts are each within the library's bound
1e-5 + 1e-4 |r| of the exact result (see test_torch.py), and the projections here are
dot products of at most 64 terms of unit-scale data, whose rounding (<= 64 * 2^-24 of
sum |x w|, about 1e-5 at worst for these sizes) fits in the same bound.
"""
from __future__ import annotations

import numpy as np
import pytest

import libsdpa
from conftest import assert_ref_close, to_f64


def close(got, want, what=""):
    g, w = to_f64(got), to_f64(want)
    assert g.shape == w.shape, (what, g.shape, w.shape)
    err = np.abs(g - w)
    tol = 2 * (1e-5 + 1e-4 * np.abs(w))
    assert np.all(err <= tol), f"{what}: max err {err.max():.3e}"


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_nn_mha_self_attention(torch, batch_first, bias):
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(48, 6, bias=bias, batch_first=batch_first).eval()
    layer = libsdpa.MultiHeadAttention.from_torch(m)
    x = torch.randn(3, 10, 48) if batch_first else torch.randn(10, 3, 48)
    for avg in (True, False):
        y, w = layer(x, x, x, average_attn_weights=avg)
        ty, tw = m(x, x, x, average_attn_weights=avg)
        close(y, ty, "output")
        close(w, tw, "weights")
    y, w = layer(x, x, x, need_weights=False)
    assert w is None
    close(y, m(x, x, x, need_weights=False)[0], "no weights")


# torch itself warns about a float attn_mask with a bool key_padding_mask (one case below)
@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
def test_nn_mha_masks(torch):
    torch.manual_seed(1)
    m = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    layer = libsdpa.MultiHeadAttention.from_torch(m)
    x = torch.randn(3, 9, 32)
    prefix = torch.zeros(3, 9, dtype=torch.bool)
    prefix[1, 6:] = True
    prefix[2, 2:] = True
    holes = torch.rand(3, 9) > 0.7
    holes[:, 0] = False
    causal = torch.triu(torch.ones(9, 9, dtype=torch.bool), 1)
    float_mask = torch.randn(9, 9)
    per_head = torch.rand(3 * 4, 9, 9) > 0.8
    per_head[..., 0] = False
    cases = [dict(key_padding_mask=prefix), dict(key_padding_mask=holes),
             dict(key_padding_mask=prefix.float().masked_fill(prefix, float("-inf"))),
             dict(attn_mask=causal), dict(attn_mask=float_mask), dict(attn_mask=per_head),
             dict(attn_mask=causal, key_padding_mask=holes),
             dict(attn_mask=float_mask, key_padding_mask=prefix),
             dict(attn_mask=causal, is_causal=True)]
    for opts in cases:
        y, w = layer(x, x, x, average_attn_weights=False, **opts)
        ty, tw = m(x, x, x, average_attn_weights=False, **opts)
        close(y, ty, str(sorted(opts)))
        close(w, tw, str(sorted(opts)) + " weights")


def test_nn_mha_padding_becomes_kv_lens(monkeypatch, torch):
    """A key_padding_mask that only pads the end of each row is passed as kv_lens, and no
    mask is read."""
    from libsdpa import _capi
    seen = {}
    real = _capi.API.sdpa_mha_forward

    def spy(desc, *args):
        attn = desc._obj.attn
        seen["kv_lens"] = [attn.kv_lens[b] for b in range(desc._obj.batch)]
        seen["mask_kind"] = attn.mask.kind
        return real(desc, *args)

    monkeypatch.setattr(_capi.API, "sdpa_mha_forward", spy)
    m = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    layer = libsdpa.MultiHeadAttention.from_torch(m)
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False, False, True, True, True]])
    y, _ = layer(x, x, x, key_padding_mask=pad)
    assert seen == {"kv_lens": [5, 2], "mask_kind": libsdpa.MaskKind.NONE}
    close(y, m(x, x, x, key_padding_mask=pad)[0], "kv_lens")


def test_nn_mha_cross_and_separate_inputs(torch):
    torch.manual_seed(2)
    m = torch.nn.MultiheadAttention(24, 3, batch_first=True, kdim=16, vdim=16).eval()
    layer = libsdpa.MultiHeadAttention.from_torch(m)
    x, mem, val = torch.randn(2, 7, 24), torch.randn(2, 11, 16), torch.randn(2, 11, 16)
    close(layer(x, mem, mem)[0], m(x, mem, mem)[0], "cross (kdim)")
    close(layer(x, mem, val)[0], m(x, mem, val)[0], "separate key and value")
    m2 = torch.nn.MultiheadAttention(24, 3, batch_first=True).eval()
    layer2 = libsdpa.MultiHeadAttention.from_torch(m2)
    kv, v2 = torch.randn(2, 11, 24), torch.randn(2, 11, 24)
    y, w = layer2(x, kv, v2)
    ty, tw = m2(x, kv, v2)
    close(y, ty, "packed in_proj, separate value")
    close(w, tw, "weights")


def test_nn_mha_unbatched_and_dropout(torch):
    torch.manual_seed(3)
    m = torch.nn.MultiheadAttention(16, 4, dropout=0.5)
    layer = libsdpa.MultiHeadAttention.from_torch(m)
    x = torch.randn(6, 16)
    m.eval()
    y, w = layer(x, x, x)
    ty, tw = m(x, x, x)
    assert y.shape == (6, 16) and w.shape == (6, 6)
    close(y, ty, "unbatched")
    close(w, tw, "unbatched weights")
    m.train()  # the module's mode switches libsdpa's dropout on, drawn per call
    a, b = layer(x, x, x)[0], layer(x, x, x)[0]
    assert not torch.equal(a, b) and not torch.equal(a, y)


def test_self_attention_v1(torch):
    """The book's SelfAttention_v1 keeps nn.Parameter weights [d_in, d_out] used as x @ W."""
    class SelfAttention_v1(torch.nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.W_query = torch.nn.Parameter(torch.rand(d_in, d_out))
            self.W_key = torch.nn.Parameter(torch.rand(d_in, d_out))
            self.W_value = torch.nn.Parameter(torch.rand(d_in, d_out))

        def forward(self, x):
            keys, queries, values = x @ self.W_key, x @ self.W_query, x @ self.W_value
            w = torch.softmax(queries @ keys.T / keys.shape[-1] ** 0.5, dim=-1)
            return w @ values

    torch.manual_seed(123)
    module = SelfAttention_v1(3, 2)
    x = torch.rand(6, 3)
    layer = libsdpa.MultiHeadAttention.from_torch(module)
    assert not layer.causal and layer.num_heads == 1
    close(layer(x), module(x), "SelfAttention_v1")


def test_unsupported_modules(torch):
    with pytest.raises(NotImplementedError):
        libsdpa.MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError):
        libsdpa.MultiHeadAttention.from_torch(torch.nn.Linear(3, 3))


def compose(x, kv, layer, **opts):
    """The layer from the library's parts: projections, attention on [B, T, H, D] views,
    output projection."""
    B, T, _ = x.shape
    Tkv = kv.shape[1]
    H, G, Dh = layer.num_heads, layer.num_kv_heads, layer.head_dim
    q = libsdpa.linear(x, layer.wq, layer.bq).reshape(B, T, H, Dh)
    k = libsdpa.linear(kv, layer.wk, layer.bk).reshape(B, Tkv, G, Dh)
    v = libsdpa.linear(kv, layer.wv, layer.bv).reshape(B, Tkv, G, Dh)
    o = libsdpa.reference(q, k, v, layout="bthd", **opts).reshape(B, T, H * Dh)
    return o if layer.wo is None else libsdpa.linear(o, layer.wo, layer.bo)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_layer_from_weights_gqa_and_options(rng, heads, kv_heads):
    Dh, d_in, d_kv, d_out = 8, 20, 12, 10
    f = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.3
    layer = libsdpa.MultiHeadAttention(
        f(heads * Dh, d_in), f(kv_heads * Dh, d_kv), f(kv_heads * Dh, d_kv), f(d_out, heads * Dh),
        bq=f(heads * Dh), bk=f(kv_heads * Dh), bv=f(kv_heads * Dh), bo=f(d_out),
        num_heads=heads, num_kv_heads=kv_heads, causal=True, window=(5, 0), softcap=3.0)
    x, kv = f(2, 9, d_in), f(2, 14, d_kv)
    y, w = layer.forward(x, kv, need_weights=True)
    assert y.shape == (2, 9, d_out) and w.shape == (2, heads, 9, 14)
    want = compose(x, kv, layer, causal=True, window=(5, 0), softcap=3.0)
    assert_ref_close(y, want, "layer vs composition")
    assert_ref_close(w.sum(-1), np.ones((2, heads, 9)), "weights sum to 1")
    # per-call options: kv_lens and a mask
    keep = rng.random((9, 14)) > 0.3
    keep[:, 0] = True
    y = layer.forward(x, kv, kv_lens=[14, 6], mask=keep, causal=False)
    assert_ref_close(y, compose(x, kv, layer, kv_lens=[14, 6], mask=keep, window=(5, 0),
                                softcap=3.0), "kv_lens + mask")


def test_packed_in_proj_numpy(rng):
    E, H = 16, 4
    w_in = rng.standard_normal((3 * E, E)).astype(np.float32) * 0.3
    b_in = rng.standard_normal(3 * E).astype(np.float32)
    packed = libsdpa.MultiHeadAttention(in_proj_weight=w_in, in_proj_bias=b_in, num_heads=H)
    split = libsdpa.MultiHeadAttention(w_in[:E], w_in[E:2 * E], w_in[2 * E:], bq=b_in[:E],
                                       bk=b_in[E:2 * E], bv=b_in[2 * E:], num_heads=H)
    x = rng.standard_normal((2, 5, E)).astype(np.float32)
    assert np.array_equal(packed.forward(x), split.forward(x))
    y2 = packed.forward(x[0])
    assert y2.shape == (5, E)
    assert np.array_equal(y2, packed.forward(x)[0])


def test_linear(rng):
    x = rng.standard_normal((3, 4, 37)).astype(np.float32)
    w_all = rng.standard_normal((50, 37)).astype(np.float32)
    w = w_all[10:30]  # rows of a larger matrix, read in place
    b = rng.standard_normal(20).astype(np.float32)
    y = libsdpa.linear(x, w, b)
    want = x.astype(np.float64) @ w.T.astype(np.float64) + b
    # fp32 dot products of 37 terms: (K + 3) 2^-24 sum |x w| bounds the rounding
    bound = 40 * 2.0 ** -24 * (np.abs(x) @ np.abs(w).T + np.abs(b))
    assert y.shape == (3, 4, 20)
    assert np.all(np.abs(y - want) <= bound)
    assert np.all(np.abs(libsdpa.linear(x[:, 1], w) - x[:, 1].astype(np.float64) @ w.T)
                  <= bound[:, 1])
