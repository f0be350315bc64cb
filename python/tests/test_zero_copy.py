"""Zero-copy: the library reads the caller's memory. The C entry points are wrapped (the
binding calls them through ``libsdpa._capi.API``) to record the views the wrapper
passes: their data pointers must be the caller's arrays' own, with the caller's element
strides, for strided, transposed and broadcast views; and no allocation of the inputs'
size happens during a call."""
from __future__ import annotations

import ctypes
import tracemalloc

import numpy as np
import pytest

import libsdpa
from libsdpa import _capi
from conftest import assert_ref_close


class Spy:
    """Wraps one C function of the API object; keeps copies of the structs it was given."""

    def __init__(self, monkeypatch, name):
        self.real = getattr(_capi.API, name)
        self.calls = []
        monkeypatch.setattr(_capi.API, name, self)
        self.__name__ = name

    def __call__(self, *args):
        copied = []
        for a in args:
            obj = getattr(a, "_obj", None)  # ctypes.byref(...) -> the struct
            copied.append(type(obj).from_buffer_copy(obj) if isinstance(obj, ctypes.Structure)
                          else a)
        self.calls.append(copied)
        return self.real(*args)


def view_of(t):
    return (t.data, t.stride_b, t.stride_h, t.stride_t)


def test_numpy_strided_views_are_read_in_place(monkeypatch, rng):
    spy = Spy(monkeypatch, "sdpa_forward")
    cache_k = rng.standard_normal((2, 4, 100, 32)).astype(np.float32)  # spare capacity
    cache_v = rng.standard_normal((2, 4, 100, 32)).astype(np.float32)
    x = rng.standard_normal((2, 7, 8, 32)).astype(np.float32)          # [B, T, H, D]
    q = x.transpose(0, 2, 1, 3)                                        # [B, H, T, D] view
    k, v = cache_k[:, :, :60], cache_v[:, :, :60]
    assert not (q.flags.c_contiguous or k.flags.c_contiguous)
    o = libsdpa.attention(q, k, v, causal=True)
    desc, tq, tk, tv, to, _ = spy.calls[-1]
    assert view_of(tq) == (x.ctypes.data, 7 * 8 * 32, 32, 8 * 32)
    assert view_of(tk) == (cache_k.ctypes.data, 4 * 100 * 32, 100 * 32, 32)
    assert view_of(tv) == (cache_v.ctypes.data, 4 * 100 * 32, 100 * 32, 32)
    assert to.data == o.ctypes.data
    assert (desc.batch, desc.heads_q, desc.heads_kv, desc.len_q, desc.len_kv) == (2, 8, 4, 7, 60)
    assert_ref_close(o, libsdpa.reference(np.ascontiguousarray(q), np.ascontiguousarray(k),
                                          np.ascontiguousarray(v), causal=True))


def test_no_input_sized_allocation(rng):
    """A 32 MiB K/V view: the call allocates the output and nothing of the inputs' size
    (numpy reports its allocations to tracemalloc)."""
    k = rng.standard_normal((1, 8, 4096, 128), dtype=np.float32)[:, :, ::2]  # strided rows
    v = rng.standard_normal((1, 8, 4096, 128), dtype=np.float32)[:, :, ::2]
    q = rng.standard_normal((1, 32, 1, 128), dtype=np.float32)
    tracemalloc.start()
    try:
        libsdpa.attention(q, k, v)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < k.nbytes // 16, f"peak {peak} bytes for a {k.nbytes}-byte K"


def test_mask_broadcast_is_stride_zero(monkeypatch, rng):
    spy = Spy(monkeypatch, "sdpa_forward")
    q = rng.standard_normal((2, 4, 9, 16)).astype(np.float32)
    keep = rng.random((9, 20)) > 0.5
    keep[:, 0] = True
    kk = rng.standard_normal((2, 4, 20, 16)).astype(np.float32)
    libsdpa.attention(q, kk, kk, mask=keep)
    m = spy.calls[-1][0].mask
    assert (m.data, m.kind, m.stride_b, m.stride_h, m.stride_q) == (
        keep.ctypes.data, libsdpa.MaskKind.BOOL, 0, 0, 20)


def test_torch_views_are_read_in_place(monkeypatch, torch):
    spy = Spy(monkeypatch, "sdpa_forward")
    qkv = torch.randn(2, 50, 3, 8, 16)  # a fused QKV projection, [B, T, 3, H, D]
    q, k, v = qkv.unbind(2)             # [B, T, H, D] views, not contiguous
    o = libsdpa.attention(q, k, v, layout="bthd")
    _, tq, tk, tv, to, _ = spy.calls[-1]
    for t, view in ((tq, q), (tk, k), (tv, v)):
        s = view.stride()
        assert view_of(t) == (view.data_ptr(), s[0], s[2], s[1])
    assert to.data == o.data_ptr()
    # bf16 tensors too: the pointer is the tensor's, the dtype code BF16
    qb = q.to(torch.bfloat16)
    libsdpa.attention(qb, qb, qb, layout="bthd")
    tq = spy.calls[-1][1]
    assert tq.data == qb.data_ptr() and tq.dtype == libsdpa.DType.BF16


def test_mha_weights_are_the_modules(monkeypatch, torch):
    spy = Spy(monkeypatch, "sdpa_mha_forward")
    m = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    layer = libsdpa.MultiHeadAttention.from_torch(m)
    x = torch.randn(2, 5, 32)
    layer(x, x, x)
    d = spy.calls[-1][0]
    assert ctypes.cast(d.in_proj_weight, ctypes.c_void_p).value == m.in_proj_weight.data_ptr()
    assert ctypes.cast(d.wo.weight, ctypes.c_void_p).value == m.out_proj.weight.data_ptr()
    # an in-place update of the module's weights is seen by the next call
    with torch.no_grad():
        m.out_proj.bias += 1.0
    m.eval()
    y, _ = layer(x, x, x)
    t, _ = m(x, x, x)
    assert torch.allclose(y, t, atol=1e-5)


def test_spy_sees_a_copy(monkeypatch, rng):
    """The pointer check notices a copy: a contiguous copy of a view has another address."""
    spy = Spy(monkeypatch, "sdpa_forward")
    x = rng.standard_normal((1, 7, 2, 8)).astype(np.float32)
    q = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    libsdpa.attention(q, q, q)
    assert spy.calls[-1][1].data != x.ctypes.data
    with pytest.raises(AssertionError):
        assert view_of(spy.calls[-1][1])[0] == x.ctypes.data
