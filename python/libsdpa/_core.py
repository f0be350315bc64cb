"""attention(), reference() and attention_weights(): sdpa_forward, sdpa_reference and
sdpa_attention_weights on numpy arrays and CPU torch tensors.

The operands are never copied: each becomes an ``sdpa_tensor`` holding the caller's data
pointer and element strides, so any strided view whose last dimension is contiguous
(a transpose, a slice of a KV cache, an ``expand``ed broadcast) is read in place. Only
the outputs (o, lse, weights) and the short per-head / per-sequence arrays (slopes,
sinks, lengths) are allocated here. Shapes are checked in Python first, because the C
API cannot see a buffer's extent: a k with fewer rows than v would otherwise be read
past its end. Everything else (strides, overlap, alignment, parameter ranges) is left to
the library, whose status comes back as an exception (see ``_errors``).
"""
from __future__ import annotations

import ctypes
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arrays as A
from ._capi import API, Causal, Compute, Desc, DType, Isa, MaskKind, Stats, Tensor
from ._errors import (BadDimensionError, BadLengthsError, Status, check)

Array = Any  # a numpy.ndarray or a CPU torch.Tensor
CausalSpec = Union[bool, str, int, Causal, None]
IsaSpec = Union[str, int, Isa, None]

# A window side of None or -1 is unbounded (FlashAttention's -1): the library's largest
# extent, which no sequence reaches.
_UNBOUNDED = 1 << 40

_LAYOUTS = ("bhtd", "bthd")


def causal_mode(causal: CausalSpec) -> int:
    """The ``sdpa_causal`` value of a causal argument: False/None -> none, True ->
    bottom-right (libsdpa's convention), "top_left" -> PyTorch's ``is_causal``."""
    if causal is None or causal is False:
        return Causal.NONE
    if causal is True:
        return Causal.BOTTOM_RIGHT
    if isinstance(causal, str):
        key = causal.lower().replace("-", "_")
        names = {"none": Causal.NONE, "bottom_right": Causal.BOTTOM_RIGHT,
                 "top_left": Causal.TOP_LEFT}
        if key not in names:
            raise ValueError(f"causal: {causal!r} is not one of none, bottom_right, top_left")
        return names[key]
    # Integers go through as they are, so an unknown mode reaches the library's own check.
    return int(causal)


def compute_code(compute: Any) -> int:
    """The ``sdpa_compute`` value of "f32" / "bf16", a Compute, or an int."""
    if isinstance(compute, str):
        try:
            return Compute[compute.upper()]
        except KeyError:
            raise ValueError(f"compute: unknown mode {compute!r}; one of "
                             + ", ".join(n.lower() for n in Compute.__members__)) from None
    return int(compute)


def isa_code(isa: IsaSpec) -> int:
    """The ``sdpa_isa`` value of a name ("avx2"), an Isa, an int, or None (auto)."""
    if isa is None:
        return Isa.AUTO
    if isinstance(isa, str):
        try:
            return Isa[isa.upper()]
        except KeyError:
            raise ValueError(f"isa: unknown ISA {isa!r}; one of "
                             + ", ".join(n.lower() for n in Isa.__members__)) from None
    return int(isa)


class View(NamedTuple):
    """A 4-d [B, H, T, D] reading of one operand."""

    dims: Tuple[int, int, int, int]
    strides: Tuple[int, int, int]  # b, h, t (elements)


def _view(info: A.ArrayInfo, layout: str, what: str) -> View:
    """Read an operand as [B, H, T, D]. 4-d: [B, H, T, D] ("bhtd") or [B, T, H, D]
    ("bthd"); 3-d: the same without B ([H, T, D] / [T, H, D], one batch entry, which is
    also the packed varlen form); 2-d: [T, D], one head."""
    shape, st = info.shape, info.strides
    A.check_last_contiguous(info, what)
    if len(shape) == 4:
        if layout == "bhtd":
            return View(shape, (st[0], st[1], st[2]))
        return View((shape[0], shape[2], shape[1], shape[3]), (st[0], st[2], st[1]))
    if len(shape) == 3:
        if layout == "bhtd":
            return View((1,) + shape, (0, st[0], st[1]))
        return View((1, shape[1], shape[0], shape[2]), (0, st[1], st[0]))
    if len(shape) == 2:
        return View((1, 1) + shape, (0, 0, st[0]))
    raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                            f"{what}: expected 2, 3 or 4 dimensions, got shape {shape}")


def _tensor(info: A.ArrayInfo, view: View) -> Tensor:
    return Tensor(info.ptr, int(info.dtype), *view.strides)


class _Call(NamedTuple):
    desc: Desc
    tq: Tensor
    tk: Tensor
    tv: Optional[Tensor]
    kind: str
    q: A.ArrayInfo
    qview: View
    dim_v: int
    keep: List[Any]  # arrays the descriptor points into; alive until the call returns


def _mask(desc: Desc, mask: Array, full: Tuple[int, int, int, int], varlen: bool,
          keep: List[Any]) -> None:
    """Fill desc.mask from a [..., Tq, Tkv] bool/uint8 (nonzero keeps) or float (added)
    array; leading axes of size 1 or missing broadcast with stride 0 (numpy/torch rules,
    right-aligned to [B, Hq, Tq, Tkv])."""
    info = A.describe(mask, "mask", allow_bool=True)
    A.check_last_contiguous(info, "mask")
    if not 2 <= len(info.shape) <= 4:
        raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                f"mask: expected 2 to 4 dimensions, got {info.shape}")
    shape = (1,) * (4 - len(info.shape)) + info.shape
    strides = (0,) * (4 - len(info.strides)) + info.strides
    names = ("batch", "heads", "query rows", "keys")
    out = []
    for axis in range(4):
        size, want = shape[axis], full[axis]
        # Under packed varlen, rows and keys are counted within each sequence: the mask
        # needs at least the longest sequence's extent, and may have more.
        fits = size == want or (varlen and axis >= 2 and size >= want)
        if axis < 3 and size == 1:
            out.append(0)
        elif fits:
            out.append(strides[axis] if axis < 3 else 0)
        else:
            raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                    f"mask shape {info.shape} does not broadcast to "
                                    f"[B, Hq, Tq, Tkv] = {list(full)} ({names[axis]})")
    desc.mask.data = info.ptr
    if info.dtype == A.BOOL_LIKE:
        desc.mask.kind, desc.mask.dtype = MaskKind.BOOL, 0
    else:
        desc.mask.kind, desc.mask.dtype = MaskKind.ADDITIVE, int(info.dtype)
    desc.mask.stride_b, desc.mask.stride_h, desc.mask.stride_q = out[0], out[1], out[2]
    keep.append(info)


def _ptr(arr: np.ndarray, ctype: Any) -> Any:
    return arr.ctypes.data_as(ctypes.POINTER(ctype))


def apply_options(d: Desc, full: Tuple[int, int, int, int], varlen: bool, keep: List[Any], *,
                  causal: CausalSpec, scale: Optional[float], mask: Optional[Array],
                  window: Optional[Tuple[Optional[int], Optional[int]]],
                  softcap: Optional[float], alibi_slopes: Optional[Array],
                  sinks: Optional[Array], kv_lens: Optional[Array], q_lens: Optional[Array],
                  dropout_p: float, seed: int, threads: int, isa: IsaSpec,
                  stats: Optional[Stats], compute: Any = "f32") -> None:
    """Every descriptor option but the shapes, for a problem of ``full`` = [sequences, Hq,
    Tq, Tkv]. Arrays the descriptor points into are appended to ``keep``."""
    nseq, Hq = full[0], full[1]
    d.scale = 0.0 if scale is None else float(scale)
    d.causal = causal_mode(causal)
    d.num_threads = int(threads)
    d.isa = isa_code(isa)
    d.compute = compute_code(compute)
    if stats is not None:
        d.stats = ctypes.pointer(stats)
    if window is not None:
        left, right = window
        d.window = 1
        d.window_left = _UNBOUNDED if left is None or left == -1 else int(left)
        d.window_right = _UNBOUNDED if right is None or right == -1 else int(right)
    d.softcap = 0.0 if softcap is None else float(softcap)
    for name, values in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if values is not None:
            arr = A.small(values, np.float32, name, Hq)
            setattr(d, name, _ptr(arr, ctypes.c_float))
            keep.append(arr)
    for name, lens in (("q_lens", q_lens), ("kv_lens", kv_lens)):
        if lens is not None:
            arr = A.small(lens, np.int64, name, nseq)
            setattr(d, name, _ptr(arr, ctypes.c_int64))
            keep.append(arr)
    if mask is not None:
        _mask(d, mask, full, varlen, keep)
    d.dropout_p = float(dropout_p)
    d.dropout_seed = int(seed) & 0xFFFFFFFFFFFFFFFF


def _prepare(q: Array, k: Array, v: Optional[Array], *, causal: CausalSpec,
             scale: Optional[float], mask: Optional[Array],
             window: Optional[Tuple[Optional[int], Optional[int]]], softcap: Optional[float],
             alibi_slopes: Optional[Array], sinks: Optional[Array], kv_lens: Optional[Array],
             q_lens: Optional[Array], cu_seqlens: Any, dropout_p: float, seed: int,
             threads: int, layout: str, isa: IsaSpec, stats: Optional[Stats],
             compute: Any = "f32") -> _Call:
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be one of {_LAYOUTS}, got {layout!r}")
    qi, ki = A.describe(q, "q"), A.describe(k, "k")
    vi = A.describe(v, "v") if v is not None else None
    kinds = {qi.kind, ki.kind} | ({vi.kind} if vi else set())
    if len(kinds) > 1:
        raise TypeError("q, k and v must all be numpy arrays or all torch tensors")
    qv, kv = _view(qi, layout, "q"), _view(ki, layout, "k")
    vv = _view(vi, layout, "v") if vi else None
    B, Hq, Tq, Dk = qv.dims
    Bk, Hkv, Tkv, Dk2 = kv.dims
    varlen = cu_seqlens is not None
    problems = []
    if Dk2 != Dk:
        problems.append(f"k's head dim {Dk2} != q's {Dk}")
    if Bk != B:
        problems.append(f"k's batch {Bk} != q's {B}")
    if vv is not None:
        Bv, Hv, Tv, Dv = vv.dims
        if (Bv, Hv, Tv) != (Bk, Hkv, Tkv):
            problems.append(f"v's [B, Hkv, Tkv] = {[Bv, Hv, Tv]} != k's {[Bk, Hkv, Tkv]}")
    else:
        Dv = 1
    if problems:
        raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                "shapes do not fit (" + "; ".join(problems) + ")")
    keep: List[Any] = [qi, ki, vi]
    d = Desc()
    d.batch, d.heads_q, d.heads_kv, d.len_q, d.len_kv = B, Hq, Hkv, Tq, Tkv
    d.dim_qk, d.dim_v = Dk, Dv
    full = (B, Hq, Tq, Tkv)
    if varlen:
        if B != 1:
            raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                    "packed varlen (cu_seqlens): q, k and v hold all "
                                    f"sequences in one batch entry; q has batch {B}")
        pair = (isinstance(cu_seqlens, (tuple, list)) and len(cu_seqlens) == 2
                and not np.isscalar(cu_seqlens[0]))
        cu_q, cu_k = cu_seqlens if pair else (cu_seqlens, cu_seqlens)
        aq = A.small(cu_q, np.int64, "cu_seqlens (q)", np.asarray(cu_q).size)
        ak = A.small(cu_k, np.int64, "cu_seqlens (kv)", aq.shape[0])
        if aq.shape[0] < 2:
            raise BadLengthsError(Status.ERR_BAD_LENGTHS,
                                  "cu_seqlens needs at least 2 entries (one sequence)")
        d.batch = aq.shape[0] - 1
        d.cu_seqlens_q, d.cu_seqlens_kv = _ptr(aq, ctypes.c_int64), _ptr(ak, ctypes.c_int64)
        keep += [aq, ak]
        # The longest sequence bounds what a mask must cover; the library checks the
        # offsets themselves (BAD_LENGTHS) before it reads the mask.
        full = (d.batch, Hq, max(int(np.max(np.diff(aq))), 0), max(int(np.max(np.diff(ak))), 0))
    apply_options(d, full, varlen, keep, causal=causal, scale=scale, mask=mask,
                  window=window, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks,
                  kv_lens=kv_lens, q_lens=q_lens, dropout_p=dropout_p, seed=seed,
                  threads=threads, isa=isa, stats=stats, compute=compute)
    return _Call(d, _tensor(qi, qv), _tensor(ki, kv), _tensor(vi, vv) if vi else None,
                 qi.kind, qi, qv, Dv, keep)


def _output(call: _Call, out: Optional[Array], out_dtype: Any, layout: str) -> Tuple[Any, Tensor]:
    """The output array (the caller's ``out`` or a new one shaped like q with Dv) and its
    view."""
    shape = call.q.shape[:-1] + (call.dim_v,)
    if out is None:
        dtype = A.dtype_from(out_dtype) if out_dtype is not None else call.q.dtype
        out = A.empty(call.kind, shape, dtype)
    oi = A.describe(out, "out")
    if oi.shape != shape:
        raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                f"out has shape {oi.shape}, the result is {shape}")
    return out, _tensor(oi, _view(oi, layout, "out"))



def _lead_shape(call: _Call, full: Tuple[int, ...]) -> Tuple[int, ...]:
    """[B, Hq, Tq(, Tkv)] without the leading axes a 3-d or 2-d q does not have."""
    return tuple(full[4 - len(call.q.shape):])


def _float_ptr(info: A.ArrayInfo) -> Any:
    return ctypes.cast(ctypes.c_void_p(info.ptr), ctypes.POINTER(ctypes.c_float))


def _run(fn, q: Array, k: Array, v: Array, out: Optional[Array], out_dtype: Any,
         return_lse: bool, options: dict) -> Any:
    call = _prepare(q, k, v, **options)
    o, to = _output(call, out, out_dtype, options["layout"])
    B, Hq, Tq, _ = call.qview.dims
    lse = A.empty(call.kind, _lead_shape(call, (B, Hq, Tq)), DType.F32) if return_lse else None
    lse_ptr = _float_ptr(A.describe(lse, "lse")) if lse is not None else None
    status = fn(ctypes.byref(call.desc), ctypes.byref(call.tq), ctypes.byref(call.tk),
                ctypes.byref(call.tv), ctypes.byref(to), lse_ptr)
    check(status, fn.__name__)
    return (o, lse) if return_lse else o


def attention(q: Array, k: Array, v: Array, *, causal: CausalSpec = False,
              scale: Optional[float] = None, mask: Optional[Array] = None,
              window: Optional[Tuple[Optional[int], Optional[int]]] = None,
              softcap: Optional[float] = None, alibi_slopes: Optional[Array] = None,
              sinks: Optional[Array] = None, kv_lens: Optional[Array] = None,
              q_lens: Optional[Array] = None, cu_seqlens: Any = None,
              dropout_p: float = 0.0, seed: int = 0, return_lse: bool = False,
              threads: int = 0, layout: str = "bhtd", isa: IsaSpec = None,
              out: Optional[Array] = None, out_dtype: Any = None,
              stats: Optional[Stats] = None, compute: Any = "f32") -> Any:
    """Fused scaled-dot-product attention (``sdpa_forward``), without copying q, k or v.

    q [B, Hq, Tq, Dk], k [B, Hkv, Tkv, Dk], v [B, Hkv, Tkv, Dv] (``layout="bhtd"``, PyTorch's
    SDPA layout) or [B, T, H, D] (``layout="bthd"``, what projections write); 3-d inputs
    drop B ([H, T, D] / [T, H, D]), 2-d ones are [T, D]. numpy arrays or CPU torch tensors
    (all three the same kind), float32, float16 or bfloat16 each (numpy bfloat16 through
    ml_dtypes), any strides with the last dimension contiguous. Returns an array of the
    same kind shaped like q with Dv as the last dimension, in q's dtype unless
    ``out_dtype`` (or ``out``, written in place) says otherwise; with ``return_lse``,
    ``(o, lse)`` where lse is float32 [B, Hq, Tq] (natural log of each row's softmax
    denominator, -inf for a row that sees no key).

    causal: False; True or "bottom_right" (libsdpa's convention: row i sees key
        j <= i + Tkv - Tq, what a KV cache needs); "top_left" (row i sees j <= i:
        PyTorch's ``is_causal``). Equal for Tq == Tkv.
    scale: multiplies <q, k>; None (or 0, the library's convention) is 1/sqrt(Dk).
    mask: bool/uint8 (nonzero keeps the key, as PyTorch SDPA's bool attn_mask) or
        float32/float16/bfloat16 (added to the score; -inf hides), shaped
        [B|1, Hq|1, Tq|1, Tkv] or with fewer leading axes; size-1 axes broadcast with
        stride 0, no copy.
    window: (left, right) keys around the diagonal a row sees; None or -1 on a side is
        unbounded. (4095, 0) with causal is Mistral's window.
    softcap: s = softcap * tanh(s / softcap) (Gemma 2); None or 0 is off.
    alibi_slopes, sinks: Hq floats each (ALiBi s -= slope |d(i) - j|; a per-head sink
        logit in the softmax denominator).
    kv_lens, q_lens: B lengths of a padded batch (rows beyond q_lens come out zero).
    cu_seqlens: packed varlen offsets (B + 1 of them), one array for both or a pair
        (cu_q, cu_kv); q, k, v are then [T_total, H, D] (bthd) or [H, T_total, D] (bhtd),
        and lse [Hq, T_total].
    dropout_p, seed: dropout on the weights (Philox keyed by (seed, b, h, i, j); the same
        bits for any thread count, not torch's RNG stream).
    threads: OpenMP threads, 0 = OpenMP's default. isa: None (process-wide choice) or
        "scalar", "avx2", "avx512", "avx512bf16", "amx", "neon", "neonbf16" for this call.
    compute: "f32" (exact fp32 products, the default) or "bf16": q, k, v and the softmax
        weights enter the products rounded to bf16, with fp32 accumulation and softmax,
        as PyTorch's bf16 CPU path and FlashAttention compute (the error bound is in
        include/sdpa.h, ``sdpa_compute``).
    stats: a ``libsdpa.Stats`` to receive the call's work counters.

    Raises an ``SdpaError`` subclass carrying the status on any failure; outputs are then
    untouched.
    """
    options = dict(causal=causal, scale=scale, mask=mask, window=window, softcap=softcap,
                   alibi_slopes=alibi_slopes, sinks=sinks, kv_lens=kv_lens, q_lens=q_lens,
                   cu_seqlens=cu_seqlens, dropout_p=dropout_p, seed=seed, threads=threads,
                   layout=layout, isa=isa, stats=stats, compute=compute)
    return _run(API.sdpa_forward, q, k, v, out, out_dtype, return_lse, options)


def reference(q: Array, k: Array, v: Array, *, causal: CausalSpec = False,
              scale: Optional[float] = None, mask: Optional[Array] = None,
              window: Optional[Tuple[Optional[int], Optional[int]]] = None,
              softcap: Optional[float] = None, alibi_slopes: Optional[Array] = None,
              sinks: Optional[Array] = None, kv_lens: Optional[Array] = None,
              q_lens: Optional[Array] = None, cu_seqlens: Any = None,
              dropout_p: float = 0.0, seed: int = 0, return_lse: bool = False,
              threads: int = 0, layout: str = "bhtd", isa: IsaSpec = None,
              out: Optional[Array] = None, out_dtype: Any = None,
              stats: Optional[Stats] = None, compute: Any = "f32") -> Any:
    """The naive double-precision reference (``sdpa_reference``): same arguments, same
    semantics and result layout as ``attention``; single-threaded and slow, the oracle
    the fused path is checked against. ``threads`` and ``isa`` are ignored."""
    options = dict(causal=causal, scale=scale, mask=mask, window=window, softcap=softcap,
                   alibi_slopes=alibi_slopes, sinks=sinks, kv_lens=kv_lens, q_lens=q_lens,
                   cu_seqlens=cu_seqlens, dropout_p=dropout_p, seed=seed, threads=threads,
                   layout=layout, isa=isa, stats=stats, compute=compute)
    return _run(API.sdpa_reference, q, k, v, out, out_dtype, return_lse, options)


def attention_weights(q: Array, k: Array, v: Optional[Array] = None, *,
                      lse: Optional[Array] = None, causal: CausalSpec = False,
                      scale: Optional[float] = None, mask: Optional[Array] = None,
                      window: Optional[Tuple[Optional[int], Optional[int]]] = None,
                      softcap: Optional[float] = None, alibi_slopes: Optional[Array] = None,
                      sinks: Optional[Array] = None, kv_lens: Optional[Array] = None,
                      q_lens: Optional[Array] = None, cu_seqlens: Any = None,
                      dropout_p: float = 0.0, seed: int = 0, threads: int = 0,
                      layout: str = "bhtd", isa: IsaSpec = None, compute: Any = "f32") -> Any:
    """The softmax weights (``sdpa_attention_weights``): float32 [B, Hq, Tq, Tkv] (fewer
    leading axes for a 3-d or 2-d q; [1, Hq, T_total, T_total] under packed varlen), 0
    for hidden keys and padding, after dropout when it is on. O(Tq x Tkv) memory: for
    inspecting small problems. ``lse`` is ``attention(..., return_lse=True)``'s for the
    same inputs; without it, a fused pass over q and k computes it first (v is not
    needed for that and may be left out)."""
    options = dict(causal=causal, scale=scale, mask=mask, window=window, softcap=softcap,
                   alibi_slopes=alibi_slopes, sinks=sinks, kv_lens=kv_lens, q_lens=q_lens,
                   cu_seqlens=cu_seqlens, dropout_p=dropout_p, seed=seed, threads=threads,
                   layout=layout, isa=isa, stats=None, compute=compute)
    call = _prepare(q, k, None, **options)
    B, Hq, Tq, _ = call.qview.dims
    lse_shape = _lead_shape(call, (B, Hq, Tq))
    if lse is None:
        if v is not None:
            _, lse = attention(q, k, v, return_lse=True, **options)
        else:
            # lse does not depend on V: one zero value column read with stride 0.
            zero = np.zeros(1, dtype=np.float32)
            scratch = np.empty(B * Hq * Tq, dtype=np.float32)
            lse = A.empty(call.kind, lse_shape, DType.F32)
            call.desc.dim_v = 1
            tv = Tensor(zero.ctypes.data, int(DType.F32), 0, 0, 0)
            to = Tensor(scratch.ctypes.data, int(DType.F32), Hq * Tq, Tq, 1)
            check(API.sdpa_forward(ctypes.byref(call.desc), ctypes.byref(call.tq),
                                   ctypes.byref(call.tk), ctypes.byref(tv), ctypes.byref(to),
                                   _float_ptr(A.describe(lse, "lse"))), "sdpa_forward")
    li = A.describe(lse, "lse")
    if li.dtype != DType.F32 or li.shape != lse_shape or \
            any(s != e and n > 1 for s, e, n in
                zip(li.strides, _contiguous_strides(lse_shape), lse_shape)):
        raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                f"lse must be contiguous float32 {lse_shape}, got "
                                f"{li.dtype} {li.shape} strides {li.strides}")
    Tkv = call.desc.len_kv
    weights = A.empty(call.kind, _lead_shape(call, (B, Hq, Tq, Tkv)), DType.F32)
    check(API.sdpa_attention_weights(ctypes.byref(call.desc), ctypes.byref(call.tq),
                                     ctypes.byref(call.tk), _float_ptr(li),
                                     _float_ptr(A.describe(weights, "weights"))),
          "sdpa_attention_weights")
    return weights


def _contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    out, acc = [], 1
    for size in reversed(shape):
        out.append(acc)
        acc *= size
    return tuple(reversed(out))


def alibi_slopes(heads: int, max_bias: float = 0.0) -> np.ndarray:
    """The standard ALiBi slopes for ``heads`` query heads (``sdpa_alibi_slopes``: the
    paper's 2^(-8 (h + 1) / n) with n = heads when it is a power of two, and its reference
    code's interleaving otherwise; ``max_bias`` 0 is the paper's 8), float32 [heads], for
    ``alibi_slopes=``."""
    out = np.empty(max(int(heads), 0), dtype=np.float32)
    check(API.sdpa_alibi_slopes(int(heads), float(max_bias), _ptr(out, ctypes.c_float)
                                if out.size else None), "sdpa_alibi_slopes")
    return out
