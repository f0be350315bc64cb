"""Errors as exceptions carrying the status: one case per status Python can provoke
(from the library's validation or from the wrapper's shape checks), the class per status,
and outputs left untouched on failure."""
from __future__ import annotations

import numpy as np
import pytest

import libsdpa
from libsdpa import Status


def qkv(rng, B=1, Hq=2, Hkv=2, Tq=8, Tkv=8, D=8):
    return (rng.standard_normal((B, Hq, Tq, D)).astype(np.float32),
            rng.standard_normal((B, Hkv, Tkv, D)).astype(np.float32),
            rng.standard_normal((B, Hkv, Tkv, D)).astype(np.float32))


def raises(cls, status, fn, *args, **kwargs):
    with pytest.raises(cls) as e:
        fn(*args, **kwargs)
    assert isinstance(e.value, libsdpa.SdpaError)
    assert e.value.status == status, (e.value.status, e.value)
    assert e.value.strerror == libsdpa.strerror(status)
    assert e.value.strerror in str(e.value)
    return e.value


def test_every_status_has_a_class():
    for status in Status:
        if status == Status.OK:
            continue
        cls = libsdpa.ERRORS[status]
        err = cls(status, "detail")
        assert err.status == status and isinstance(err, libsdpa.SdpaError)
        assert err.strerror and err.strerror != libsdpa.strerror(Status.OK)
        assert str(err).startswith("detail: ")
    assert issubclass(libsdpa.BadDtypeError, TypeError)
    assert issubclass(libsdpa.SdpaMemoryError, MemoryError)
    assert issubclass(libsdpa.BadArgumentError, ValueError)


def test_shapes(rng):
    q, k, v = qkv(rng)
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q, k[..., :4], v)                       # Dk of k != Dk of q
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q, k, v[:, :, :5])                      # Tkv of v != Tkv of k
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q, np.concatenate([k, k]), np.concatenate([v, v]))  # batch
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q[:, :, :0], k, v)                      # Tq = 0: the library's own check
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q[0, 0, 0], k, v)                       # 1-d
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q, k, v, mask=np.ones((3, 8), dtype=bool))
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q, k, v, alibi_slopes=[0.5])
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention,
           q, k, v, out=np.empty((1, 2, 8, 4), dtype=np.float32))


def test_heads(rng):
    q, k, v = qkv(rng, Hq=3, Hkv=2)
    raises(libsdpa.BadHeadsError, Status.ERR_BAD_HEADS, libsdpa.attention, q, k, v)


def test_strides(rng):
    q, k, v = qkv(rng)
    raises(libsdpa.BadStrideError, Status.ERR_BAD_STRIDE, libsdpa.attention,
           q[:, :, ::-1], k, v)                    # a negative stride: the library refuses
    raises(libsdpa.BadStrideError, Status.ERR_BAD_STRIDE, libsdpa.attention,
           q[..., ::2], k[..., ::2], v)            # last dim not contiguous: the wrapper
    out = np.empty((1, 2, 8, 8), dtype=np.float32)
    raises(libsdpa.BadStrideError, Status.ERR_BAD_STRIDE, libsdpa.attention, q, k, v,
           out=np.lib.stride_tricks.as_strided(out, strides=(0, 0, 0, 4)))


def test_overflow(rng):
    q, k, v = qkv(rng)
    # strides near the top of int64 over a dimension > 1: refused before any read
    huge = np.lib.stride_tricks.as_strided(k, strides=(0, 256, ((1 << 61) - 1) * 4, 4))
    raises(libsdpa.SdpaOverflowError, Status.ERR_OVERFLOW, libsdpa.attention, q, huge, v)


def test_overlap(rng):
    q, k, v = qkv(rng)
    q_before = q.copy()
    raises(libsdpa.OverlapError, Status.ERR_OVERLAP, libsdpa.attention, q, k, v, out=q)
    assert np.array_equal(q, q_before)
    raises(libsdpa.OverlapError, Status.ERR_OVERLAP, libsdpa.attention, q, k, v, out=v)


def test_dtypes(rng):
    q, k, v = qkv(rng)
    e = raises(libsdpa.BadDtypeError, Status.ERR_BAD_DTYPE, libsdpa.attention,
               q.astype(np.float64), k, v)
    assert "float64" in str(e)
    raises(libsdpa.BadDtypeError, Status.ERR_BAD_DTYPE, libsdpa.attention,
           q, k.astype(np.int32), v)
    raises(libsdpa.BadDtypeError, Status.ERR_BAD_DTYPE, libsdpa.attention,
           q, k, v, mask=np.zeros((8, 8), dtype=np.int64))
    raises(libsdpa.BadDtypeError, Status.ERR_BAD_DTYPE, libsdpa.attention,
           q, k, v, out_dtype="float64")
    # a K/V cache storage type is not an output type
    raises(libsdpa.BadDtypeError, Status.ERR_BAD_DTYPE, libsdpa.attention,
           q, k, v, out_dtype=libsdpa.DType.I8)
    with pytest.raises(TypeError):
        libsdpa.attention(q.tolist(), k, v)


def test_arguments(rng):
    q, k, v = qkv(rng)
    for bad in (dict(scale=float("nan")), dict(scale=float("inf")), dict(softcap=-1.0),
                dict(dropout_p=1.0), dict(dropout_p=-0.1), dict(window=(-2, 0)),
                dict(causal=7), dict(threads=-1), dict(alibi_slopes=[np.nan, 1.0]),
                dict(sinks=[np.inf, 0.0])):
        raises(libsdpa.BadArgumentError, Status.ERR_BAD_ARGUMENT, libsdpa.attention,
               q, k, v, **bad)
    with pytest.raises(ValueError):
        libsdpa.attention(q, k, v, causal="diagonal")
    with pytest.raises(ValueError):
        libsdpa.attention(q, k, v, layout="tbhd")


def test_misaligned(rng):
    q, k, v = qkv(rng)
    raw = np.zeros(q.nbytes + 4, dtype=np.uint8)
    odd = np.frombuffer(raw.data, dtype=np.float32, count=q.size, offset=1).reshape(q.shape)
    raises(libsdpa.MisalignedError, Status.ERR_MISALIGNED, libsdpa.attention, odd, k, v)


def test_lengths(rng):
    q, k, v = qkv(rng, B=2)
    raises(libsdpa.BadLengthsError, Status.ERR_BAD_LENGTHS, libsdpa.attention, q, k, v,
           kv_lens=[8, 9])
    raises(libsdpa.BadLengthsError, Status.ERR_BAD_LENGTHS, libsdpa.attention, q, k, v,
           q_lens=[-1, 2])
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.attention, q, k, v,
           kv_lens=[8])
    pq, pk, pv = q[0].transpose(1, 0, 2), k[0].transpose(1, 0, 2), v[0].transpose(1, 0, 2)
    raises(libsdpa.BadLengthsError, Status.ERR_BAD_LENGTHS, libsdpa.attention, pq, pk, pv,
           cu_seqlens=[0, 5, 3], layout="bthd")
    raises(libsdpa.BadLengthsError, Status.ERR_BAD_LENGTHS, libsdpa.attention, pq, pk, pv,
           cu_seqlens=[0, 5, 9], layout="bthd")    # past the 8 rows


def test_outputs_untouched_on_error(rng):
    q, k, v = qkv(rng)
    out = np.full((1, 2, 8, 8), 3.25, dtype=np.float32)
    with pytest.raises(libsdpa.BadArgumentError):
        libsdpa.attention(q, k, v, out=out, softcap=-1.0)
    assert np.all(out == 3.25)


def test_mha_errors(rng):
    w = rng.standard_normal((8, 8)).astype(np.float32)
    layer = libsdpa.MultiHeadAttention(w, w, w, num_heads=2)
    x = rng.standard_normal((1, 4, 8)).astype(np.float32)
    raises(libsdpa.BadDtypeError, Status.ERR_BAD_DTYPE, layer.forward, x.astype(np.float16))
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, layer.forward, x[..., :6])
    raises(libsdpa.BadDimensionError, Status.ERR_BAD_DIMENSION, libsdpa.MultiHeadAttention,
           w, w[:6], w, num_heads=2)
    raises(libsdpa.BadHeadsError, Status.ERR_BAD_HEADS,
           libsdpa.MultiHeadAttention(w, w[:6], w[:6], num_heads=4, num_kv_heads=3).forward, x)
