"""The KV-cache fields of the ctypes binding, end to end: a paged int8 cache written by
sdpa_kv_write through ``_capi.KvWriteDesc`` and read by sdpa_forward through
``Desc.k_scales``, ``Desc.v_scales`` and ``Desc.pages`` agrees with sdpa_reference on the
same cache and, within int8's rounding, with attention over the fp32 data. test_abi.py
checks the structs' offsets; this checks that the library reads what the binding means
(the enum values, the scale view, the block table)."""
from __future__ import annotations

import ctypes

import numpy as np

import libsdpa
from libsdpa import _capi
from libsdpa._capi import API, DType, Status

B, HQ, HKV, D, PAGE, MAXLEN = 2, 4, 2, 32, 16, 64
PER = MAXLEN // PAGE


def view(a: np.ndarray, dtype: DType, strides) -> _capi.Tensor:
    """A Tensor over a's memory with the given element strides (b, h, t)."""
    return _capi.Tensor(a.ctypes.data, int(dtype), *strides)


def test_paged_int8_cache(rng):
    lens = np.array([50, 23], dtype=np.int64)
    k = rng.standard_normal((B, HKV, MAXLEN, D)).astype(np.float32)
    v = rng.standard_normal((B, HKV, MAXLEN, D)).astype(np.float32)
    q = rng.standard_normal((B, HQ, 1, D)).astype(np.float32)
    # a pool with two spare pages, handed out in shuffled order: [pages, Hkv, PAGE, D]
    num_pages = B * PER + 2
    table = rng.permutation(num_pages)[:B * PER].astype(np.int32).reshape(B, PER)
    pools = [np.zeros((num_pages, HKV, PAGE, D), np.int8) for _ in range(2)]
    scales = [np.zeros((num_pages, HKV, PAGE), np.float32) for _ in range(2)]
    pool_strides = (HKV * PAGE * D, PAGE * D, D)
    scale_views = [_capi.Scales(s.ctypes.data, int(DType.F32), 0, HKV * PAGE, PAGE, 1)
                   for s in scales]
    row_strides = (HKV * MAXLEN * D, MAXLEN * D, D)
    for b in range(B):  # each sequence's prompt into its pages, scales computed
        pos = ctypes.c_int64(0)
        pages = _capi.Pages(table[b].ctypes.data_as(_capi.c_int32_p), PER, PAGE, num_pages)
        for src, pool, sv in zip((k, v), pools, scale_views):
            wd = _capi.KvWriteDesc(batch=1, heads=HKV, len=int(lens[b]), dim=D, len_kv=MAXLEN,
                                   pos=ctypes.pointer(pos), pages=pages, scales=sv,
                                   compute_scales=1)
            st = API.sdpa_kv_write(ctypes.byref(wd), ctypes.byref(view(src[b], DType.F32,
                                                                       row_strides)),
                                   ctypes.byref(view(pool, DType.I8, pool_strides)))
            assert st == Status.OK, libsdpa.strerror(st)
    # sdpa_kv_write's rule: one fp32 division amax / 127 per token and head, rounded up
    # to a float whose low 7 significand bits are 0 (every code times it exact)
    first = table[0, 0]
    div = np.float32(np.abs(k[0, 1, 3]).max()) / np.float32(127)
    bits = int(np.array(div, np.float32).view(np.uint32))
    if bits & 0x7f:
        bits = (bits | 0x7f) + 1
    assert scales[0][first, 1, 3] == np.array(bits, np.uint32).view(np.float32)
    assert np.abs(pools[0][first, 1, 3].astype(np.int32)).max() == 127

    desc = _capi.Desc(batch=B, heads_q=HQ, heads_kv=HKV, len_q=1, len_kv=MAXLEN, dim_qk=D,
                      dim_v=D, kv_lens=lens.ctypes.data_as(_capi.c_int64_p),
                      k_scales=scale_views[0], v_scales=scale_views[1],
                      pages=_capi.Pages(table.ctypes.data_as(_capi.c_int32_p), PER, PAGE,
                                        num_pages))
    tq = view(q, DType.F32, (HQ * D, D, D))
    tk, tv = (view(p, DType.I8, pool_strides) for p in pools)
    out = {}
    for name, fn in (("fused", API.sdpa_forward), ("reference", API.sdpa_reference)):
        o = np.full((B, HQ, 1, D), np.nan, np.float32)
        st = fn(ctypes.byref(desc), ctypes.byref(tq), ctypes.byref(tk), ctypes.byref(tv),
                ctypes.byref(view(o, DType.F32, (HQ * D, D, D))), None)
        assert st == Status.OK, (name, libsdpa.strerror(st))
        out[name] = o
    o, r = out["fused"], out["reference"]
    assert np.all(np.abs(o - r) <= 1e-5 + 1e-4 * np.abs(r))
    # int8 rounds each element by at most half a step, amax / 254 of its row
    plain = libsdpa.reference(q, k, v, kv_lens=lens)
    assert np.abs(o - plain).max() < 0.05
    assert not np.array_equal(o, plain)
