"""MultiHeadAttention (``sdpa_mha_forward``) and linear (``sdpa_linear``).

``MultiHeadAttention`` is the layer of the seed notebooks and of
``torch.nn.MultiheadAttention``: Q/K/V projections in nn.Linear's [out, in] layout, the
fused attention with every descriptor option, the output projection. ``from_torch``
takes a module's weights (the same storage when they are contiguous float32, so in-place
updates are seen; a copy only where the module keeps them in another form) and its
calling convention, so a notebook swaps one line:

    mha = libsdpa.MultiHeadAttention.from_torch(MultiHeadAttention(d_in, d_out, ...))
    context_vecs = mha(batch)

It is inference only: no autograd, and the module's own parameters are never written.
"""
from __future__ import annotations

import ctypes
import inspect
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _arrays as A
from ._capi import API, DType, LinearDesc, MhaDesc, Proj, c_float_p
from ._core import Array, CausalSpec, IsaSpec, apply_options, attention, attention_weights
from ._errors import BadDimensionError, BadDtypeError, Status, check


def _fp32(x: Any, what: str) -> Any:
    """``x`` as a C-contiguous float32 array of its own kind: the same object when it
    already is one, else a copy (inputs of the layer, which the C API takes contiguous)."""
    kind = A.kind_of(x)
    if kind == A.TORCH:
        import torch
        if x.device.type != "cpu":
            raise ValueError(f"{what}: libsdpa runs on the CPU; the tensor is on {x.device}")
        x = x.detach()
        if x.dtype != torch.float32:
            raise BadDtypeError(Status.ERR_BAD_DTYPE,
                                f"{what}: the layer is float32 (got {x.dtype})")
        return x.contiguous()
    if kind == A.NUMPY:
        if x.dtype != np.float32:
            raise BadDtypeError(Status.ERR_BAD_DTYPE,
                                f"{what}: the layer is float32 (got {x.dtype})")
        return np.ascontiguousarray(x)
    raise TypeError(f"{what}: expected a numpy array or a torch tensor, got "
                    f"{type(x).__name__}")


def _matrix(w: Any, what: str) -> Tuple[int, int]:
    """(rows, columns) of a weight matrix."""
    shape = A.describe(w, what).shape
    if len(shape) != 2:
        raise BadDimensionError(Status.ERR_BAD_DIMENSION, f"{what} must be 2-d, got {shape}")
    return shape[0], shape[1]


def _ptr(x: Any) -> Any:
    """A float* to a contiguous float32 array (None stays NULL)."""
    if x is None:
        return None
    return ctypes.cast(ctypes.c_void_p(A.describe(x, "operand").ptr), c_float_p)


def _rows_view(x: Any, what: str) -> Tuple[Any, int, int]:
    """(x, rows, row stride) for x [..., K] read as rows of K contiguous floats; a copy
    only when the leading axes cannot be walked with one stride."""
    info = A.describe(x, what)
    if info.dtype != DType.F32:
        raise BadDtypeError(Status.ERR_BAD_DTYPE, f"{what}: linear is float32 (got {x.dtype})")
    shape, st = info.shape, info.strides
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    walkable = all(st[i] == st[i + 1] * shape[i + 1] for i in range(len(shape) - 2))
    if len(shape) == 0 or (shape[-1] > 1 and st[-1] != 1) or not walkable:
        x = _fp32(x, what)
        return x, rows, shape[-1]
    return x, rows, (st[-2] if len(shape) > 1 else shape[-1])


def linear(x: Array, weight: Array, bias: Optional[Array] = None, *, threads: int = 0,
           isa: IsaSpec = None) -> Array:
    """y = x W^T + b as nn.Linear computes it (``sdpa_linear``): x [..., in] float32, weight
    [out, in] (rows may be strided: a slice of a packed in-projection is read in place),
    bias [out] or None. Returns [..., out] of x's kind."""
    from ._core import isa_code
    x, rows, ld_x = _rows_view(x, "x")
    w, n_out, ld_w = _rows_view(weight, "weight")
    wi = A.describe(w, "weight")
    if len(wi.shape) != 2 or wi.shape[1] != A.describe(x, "x").shape[-1]:
        raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                f"weight {wi.shape} does not fit x {A.describe(x, 'x').shape}")
    b = _fp32(bias, "bias") if bias is not None else None
    if b is not None and A.describe(b, "bias").shape != (n_out,):
        raise BadDimensionError(Status.ERR_BAD_DIMENSION, f"bias must be [{n_out}]")
    xi = A.describe(x, "x")
    y = A.empty(xi.kind, xi.shape[:-1] + (n_out,), DType.F32)
    d = LinearDesc(rows=rows, in_features=wi.shape[1], out_features=n_out, weight=_ptr(w),
                   bias=_ptr(b), ld_x=ld_x, ld_w=ld_w, ld_y=n_out, num_threads=int(threads),
                   isa=isa_code(isa))
    check(API.sdpa_linear(ctypes.byref(d), _ptr(x), _ptr(y)), "sdpa_linear")
    return y


# How a module built with from_torch is called: the seeds' forward(x); seed 004's
# forward(Q, K, V, mask=None) -> (output, attn_probs); nn.MultiheadAttention's.
STYLE_X, STYLE_QKV, STYLE_NN = "x", "qkv", "nn"

# forward(causal=...) default: the layer's own setting (None already means "not causal").
_LAYER = object()


class MultiHeadAttention:
    """The multi-head attention layer, computed by libsdpa (``sdpa_mha_forward``).

    y = (attention(x Wq^T + bq, kv Wk^T + bk, kv Wv^T + bv) merged over heads) Wo^T + bo,
    kv = x for self-attention. Weights in nn.Linear's [out, in] layout, float32: wq
    [Hq Dh, d_in], wk and wv [Hkv Dh, d_kv], wo [d_out, Hq Dh] (None: y is the merged
    context), or nn.MultiheadAttention's packed ``in_proj_weight`` [(Hq + 2 Hkv) Dh, d_in]
    instead of wq/wk/wv. Every attention option of ``attention`` (causal, window, softcap,
    alibi_slopes, sinks, scale, dropout_p) is fixed here and may be overridden per call.
    Dropout draws from ``seed``, which advances by one on every call that drops.

    Build it from a module with ``MultiHeadAttention.from_torch(module)``; call it with
    ``forward(x, kv=None, ...)`` or, after from_torch, like the module itself.
    """

    def __init__(self, wq: Optional[Array] = None, wk: Optional[Array] = None,
                 wv: Optional[Array] = None, wo: Optional[Array] = None, *,
                 num_heads: int, num_kv_heads: Optional[int] = None,
                 bq: Optional[Array] = None, bk: Optional[Array] = None,
                 bv: Optional[Array] = None, bo: Optional[Array] = None,
                 in_proj_weight: Optional[Array] = None, in_proj_bias: Optional[Array] = None,
                 causal: CausalSpec = False, scale: Optional[float] = None,
                 window: Optional[Tuple[Optional[int], Optional[int]]] = None,
                 softcap: Optional[float] = None, alibi_slopes: Optional[Array] = None,
                 sinks: Optional[Array] = None, dropout_p: float = 0.0, seed: int = 0,
                 threads: int = 0, isa: IsaSpec = None) -> None:
        self.num_heads = int(num_heads)
        self.num_kv_heads = int(num_kv_heads) if num_kv_heads else self.num_heads
        if in_proj_weight is not None:
            if any(w is not None for w in (wq, wk, wv, bq, bk, bv)):
                raise ValueError("give either in_proj_weight/in_proj_bias or wq/wk/wv")
            self.in_proj_weight = _fp32(in_proj_weight, "in_proj_weight")
            self.in_proj_bias = (_fp32(in_proj_bias, "in_proj_bias")
                                 if in_proj_bias is not None else None)
            rows, self.d_in = _matrix(self.in_proj_weight, "in_proj_weight")
            self.head_dim = rows // (self.num_heads + 2 * self.num_kv_heads)
            self.d_kv = self.d_in
            self.wq = self.wk = self.wv = self.bq = self.bk = self.bv = None
        else:
            if wq is None or wk is None or wv is None:
                raise ValueError("wq, wk and wv (or in_proj_weight) are required")
            self.in_proj_weight = self.in_proj_bias = None
            self.wq, self.wk, self.wv = (_fp32(w, n)
                                         for w, n in ((wq, "wq"), (wk, "wk"), (wv, "wv")))
            self.bq, self.bk, self.bv = (_fp32(b, n) if b is not None else None
                                         for b, n in ((bq, "bq"), (bk, "bk"), (bv, "bv")))
            rows, self.d_in = _matrix(self.wq, "wq")
            self.head_dim = rows // self.num_heads
            self.d_kv = _matrix(self.wk, "wk")[1]
        self.wo = _fp32(wo, "wo") if wo is not None else None
        self.bo = _fp32(bo, "bo") if bo is not None else None
        self.d_out = (_matrix(self.wo, "wo")[0] if self.wo is not None
                      else self.num_heads * self.head_dim)
        self._check_shapes()
        self.causal, self.scale, self.window, self.softcap = causal, scale, window, softcap
        self.alibi_slopes, self.sinks = alibi_slopes, sinks
        self.dropout_p, self.seed = float(dropout_p), int(seed)
        self.threads, self.isa = threads, isa
        # Set by from_torch: the module (attributes the layer lacks are looked up on it,
        # and its train/eval mode switches dropout) and how it is called.
        self.source: Any = None
        self.style = STYLE_X
        self.batch_first = True
        # from_torch: the module's dropout p, applied while the module is in training
        # mode (None: dropout_p applies on every call).
        self._module_dropout: Optional[float] = None

    def _check_shapes(self) -> None:
        Hq, Hkv, Dh = self.num_heads, self.num_kv_heads, self.head_dim
        want = {}
        if self.in_proj_weight is not None:
            want["in_proj_weight"] = (self.in_proj_weight, ((Hq + 2 * Hkv) * Dh, self.d_in))
            if self.in_proj_bias is not None:
                want["in_proj_bias"] = (self.in_proj_bias, ((Hq + 2 * Hkv) * Dh,))
        else:
            want.update(wq=(self.wq, (Hq * Dh, self.d_in)), wk=(self.wk, (Hkv * Dh, self.d_kv)),
                        wv=(self.wv, (Hkv * Dh, self.d_kv)))
            for name, arr, n in (("bq", self.bq, Hq), ("bk", self.bk, Hkv), ("bv", self.bv, Hkv)):
                if arr is not None:
                    want[name] = (arr, (n * Dh,))
        if self.wo is not None:
            want["wo"] = (self.wo, (self.d_out, Hq * Dh))
            if self.bo is not None:
                want["bo"] = (self.bo, (self.d_out,))
        bad = [f"{name} is {A.describe(arr, name).shape}, needs {shape}"
               for name, (arr, shape) in want.items() if A.describe(arr, name).shape != shape]
        if Dh <= 0 or bad:
            raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                    f"{Hq} query heads, {Hkv} K/V heads of dim {Dh}: "
                                    + ("; ".join(bad) or "no head dimension"))

    # ---- construction from torch modules -------------------------------------------------

    @classmethod
    def from_torch(cls, module: Any, **overrides: Any) -> "MultiHeadAttention":
        """The layer with a torch module's weights and calling convention.

        Understands ``torch.nn.MultiheadAttention`` (packed or separate projections,
        batch_first or not; not add_bias_kv, add_zero_attn or kdim != vdim) and the seed
        notebooks' modules: SelfAttention_v1 (nn.Parameter [d_in, d_out] weights) and
        SelfAttention_v2, CausalAttention, CausalSelfAttention, SelfAttention,
        MultiHeadAttention (W_query/W_key/W_value, out_proj or op_proj, num_heads),
        MultiHeadAttentionWrapper (a ``heads`` list of CausalAttention) and seed 004's
        MultiHeadAttention (W_q/W_k/W_v/W_o, forward(Q, K, V, mask=None)). A module is
        causal when it has a ``mask`` buffer holding the upper triangle or its class name
        says Causal; its dropout applies while ``module.training`` is True, drawn from
        libsdpa's Philox stream (not torch's). ``overrides`` replace any constructor
        argument (e.g. ``causal=False``, ``threads=2``, ``dropout_p=0.0``).

        The returned layer is called like the module: ``layer(x)`` for the seeds (the
        context vectors only, also for the seed classes that return more), ``layer(Q, K,
        V, mask=None)`` -> (output, weights) for seed 004, nn.MultiheadAttention's
        ``layer(query, key, value, key_padding_mask=None, need_weights=True,
        attn_mask=None, average_attn_weights=True, is_causal=False)``. Attributes it lacks
        (``W_query``, ``num_heads``...) are the module's.
        """
        import torch
        args: dict = {}
        style, batch_first = STYLE_X, True
        if isinstance(module, torch.nn.MultiheadAttention):
            args, batch_first = _from_nn_mha(module), module.batch_first
            style = STYLE_NN
        elif hasattr(module, "heads") and len(module.heads) > 0 and _has_qkv(module.heads[0]):
            args = _from_heads(module)
        elif _has_qkv(module):
            args = _from_seed_module(module)
            params = list(inspect.signature(module.forward).parameters)
            if len(params) >= 3:
                style = STYLE_QKV
        else:
            raise TypeError(f"from_torch: {type(module).__name__} has neither "
                            "nn.MultiheadAttention's parameters nor the seeds' "
                            "W_query/W_key/W_value (W_q/W_k/W_v) or heads")
        dropout_from_module = "dropout_p" not in overrides
        args.update(overrides)
        layer = cls(**args)
        layer.source, layer.style, layer.batch_first = module, style, batch_first
        layer._module_dropout = args.get("dropout_p", 0.0) if dropout_from_module else None
        return layer

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes the layer does not have: the notebook's own use of
        # the module's (mha.W_query(inputs), mha.num_heads...) keeps working.
        source = self.__dict__.get("source")
        if source is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(source, name)

    def _dropout(self) -> float:
        if self._module_dropout is not None:
            return self._module_dropout if getattr(self.source, "training", False) else 0.0
        return self.dropout_p

    # ---- computing ------------------------------------------------------------------------

    def forward(self, x: Array, kv: Optional[Array] = None, *, value: Optional[Array] = None,
                mask: Optional[Array] = None, kv_lens: Optional[Array] = None,
                q_lens: Optional[Array] = None, need_weights: bool = False,
                causal: Any = _LAYER, threads: Optional[int] = None) -> Any:
        """y [B, T, d_out] from x [B, T, d_in] (or [T, d_in], giving [T, d_out]); kv [B, Tkv,
        d_kv] for cross-attention (None: self-attention); ``value`` a separate value input
        when it differs from kv. float32 numpy arrays or CPU tensors; y is of x's kind.
        mask, kv_lens, q_lens as in ``attention`` (mask [B|1, Hq|1, T|1, Tkv]).
        ``need_weights``: also return the attention weights [B, Hq, T, Tkv] (float32), as
        ``(y, weights)``. ``causal`` overrides the layer's setting for this call."""
        y, w = self._compute(x, kv, value, mask, kv_lens, q_lens, need_weights, causal,
                             threads)
        return (y, w) if need_weights else y

    def _compute(self, x: Array, kv: Optional[Array], value: Optional[Array], mask: Any,
                 kv_lens: Any, q_lens: Any, need_weights: bool, causal: Any,
                 threads: Optional[int]) -> Tuple[Any, Any]:
        """forward's work: (y, weights or None)."""
        unbatched = len(A.describe(x, "x").shape) == 2
        x = _fp32(x, "x")
        kv = _fp32(kv, "kv") if kv is not None else None
        if unbatched:
            x = x[None]
            kv = kv[None] if kv is not None else None
        if value is not None:
            value = _fp32(value, "value")
            value = value[None] if unbatched else value
            y, w = self._forward_separate(x, kv if kv is not None else x, value, mask,
                                          kv_lens, q_lens, need_weights, causal, threads)
        else:
            y, w = self._forward_layer(x, kv, mask, kv_lens, q_lens, need_weights, causal,
                                       threads)
        if unbatched:
            y, w = y[0], (w[0] if w is not None else None)
        return y, w

    def _attn_options(self, causal: Any, threads: Optional[int]) -> dict:
        p = self._dropout()
        seed = self.seed
        if p > 0:
            self.seed += 1
        return dict(causal=self.causal if causal is _LAYER else causal, scale=self.scale,
                    window=self.window, softcap=self.softcap, alibi_slopes=self.alibi_slopes,
                    sinks=self.sinks, dropout_p=p, seed=seed,
                    threads=self.threads if threads is None else threads, isa=self.isa)

    def _forward_layer(self, x: Any, kv: Optional[Any], mask: Any, kv_lens: Any, q_lens: Any,
                       need_weights: bool, causal: Any, threads: Optional[int]) -> Tuple[Any, Any]:
        xi = A.describe(x, "x")
        if len(xi.shape) != 3 or xi.shape[2] != self.d_in:
            raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                    f"x is {xi.shape}, needs [B, T, {self.d_in}]")
        B, T, _ = xi.shape
        Tkv = T
        if kv is not None:
            ki = A.describe(kv, "kv")
            if len(ki.shape) != 3 or ki.shape[0] != B or ki.shape[2] != self.d_kv:
                raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                        f"kv is {ki.shape}, needs [{B}, Tkv, {self.d_kv}]")
            Tkv = ki.shape[1]
        elif self.d_kv != self.d_in:
            raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                    "self-attention needs d_kv == d_in; pass kv")
        d = MhaDesc()
        d.batch, d.len_q, d.len_kv, d.d_in, d.d_kv = B, T, Tkv, self.d_in, self.d_kv
        d.heads_q, d.heads_kv, d.head_dim, d.d_out = (self.num_heads, self.num_kv_heads,
                                                      self.head_dim, self.d_out)
        if self.in_proj_weight is not None:
            d.in_proj_weight, d.in_proj_bias = _ptr(self.in_proj_weight), _ptr(self.in_proj_bias)
        else:
            d.wq, d.wk, d.wv = (Proj(_ptr(w), _ptr(b)) for w, b in
                                ((self.wq, self.bq), (self.wk, self.bk), (self.wv, self.bv)))
        if self.wo is not None:
            d.wo = Proj(_ptr(self.wo), _ptr(self.bo))
        keep: List[Any] = []
        options = self._attn_options(causal, threads)
        apply_options(d.attn, (B, self.num_heads, T, Tkv), False, keep, mask=mask,
                      kv_lens=kv_lens, q_lens=q_lens, stats=None, **options)
        y = A.empty(xi.kind, (B, T, self.d_out), DType.F32)
        w = A.empty(xi.kind, (B, self.num_heads, T, Tkv), DType.F32) if need_weights else None
        check(API.sdpa_mha_forward(ctypes.byref(d), _ptr(x), _ptr(kv), _ptr(y), _ptr(w), None),
              "sdpa_mha_forward")
        return y, w

    def _forward_separate(self, x: Any, key: Any, value: Any, mask: Any, kv_lens: Any,
                          q_lens: Any, need_weights: bool, causal: Any,
                          threads: Optional[int]) -> Tuple[Any, Any]:
        """Key and value from different inputs, which sdpa_mha_forward (one kv) cannot take:
        the same computation from the library's parts, sdpa_linear and sdpa_forward, with
        the heads split and merged by strides ([B, T, H, Dh] views, layout bthd)."""
        Hq, Hkv, Dh = self.num_heads, self.num_kv_heads, self.head_dim
        if self.in_proj_weight is not None:
            wq, wk, wv = (self.in_proj_weight[a:b] for a, b in
                          ((0, Hq * Dh), (Hq * Dh, (Hq + Hkv) * Dh), ((Hq + Hkv) * Dh, None)))
            b = self.in_proj_bias
            bq, bk, bv = ((None,) * 3 if b is None else
                          (b[:Hq * Dh], b[Hq * Dh:(Hq + Hkv) * Dh], b[(Hq + Hkv) * Dh:]))
        else:
            wq, wk, wv, bq, bk, bv = self.wq, self.wk, self.wv, self.bq, self.bk, self.bv
        options = self._attn_options(causal, threads)
        th, isa = options["threads"], options["isa"]
        B, T = A.describe(x, "x").shape[:2]
        Tkv = A.describe(key, "key").shape[1]
        q = linear(x, wq, bq, threads=th, isa=isa).reshape(B, T, Hq, Dh)
        k = linear(key, wk, bk, threads=th, isa=isa).reshape(B, Tkv, Hkv, Dh)
        v = linear(value, wv, bv, threads=th, isa=isa).reshape(B, Tkv, Hkv, Dh)
        o, lse = attention(q, k, v, mask=mask, kv_lens=kv_lens, q_lens=q_lens, layout="bthd",
                           return_lse=True, **options)
        w = (attention_weights(q, k, lse=lse, mask=mask, kv_lens=kv_lens, q_lens=q_lens,
                               layout="bthd", **options) if need_weights else None)
        y = o.reshape(B, T, Hq * Dh)
        if self.wo is not None:
            y = linear(y, self.wo, self.bo, threads=th, isa=isa)
        return y, w

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.style == STYLE_NN:
            return self._call_nn(*args, **kwargs)
        if self.style == STYLE_QKV:
            return self._call_qkv(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def _call_qkv(self, Q: Array, K: Array, V: Array, mask: Optional[Array] = None) -> Any:
        """Seed 004's forward(Q, K, V, mask=None) -> (output, attn_probs), where the mask
        hides the keys it has 0 for (masked_fill(mask == 0, -inf))."""
        keep = None if mask is None else _keep_nonzero(mask)
        if K is Q and V is Q:
            return self.forward(Q, mask=keep, need_weights=True)
        return self.forward(Q, K, value=None if V is K else V, mask=keep, need_weights=True)

    def _call_nn(self, query: Array, key: Array, value: Array,
                 key_padding_mask: Optional[Array] = None, need_weights: bool = True,
                 attn_mask: Optional[Array] = None, average_attn_weights: bool = True,
                 is_causal: bool = False) -> Tuple[Any, Any]:
        """nn.MultiheadAttention's forward: [T, B, E] unless batch_first, bool masks that
        are True where attention is NOT allowed, weights averaged over heads by default."""
        unbatched = len(A.describe(query, "query").shape) == 2
        same_kv, self_attn = value is key, key is query and value is query

        def batch_major(t: Any) -> Any:
            if unbatched:
                return t[None]
            if self.batch_first:
                return t
            return t.transpose(0, 1) if A.kind_of(t) == A.TORCH else np.swapaxes(t, 0, 1)

        q = batch_major(query)
        k, v = batch_major(key), batch_major(value)
        B, T = q.shape[0], q.shape[1]
        S = k.shape[1]
        mask, kv_lens = _nn_masks(key_padding_mask, attn_mask, B, self.num_heads, T, S,
                                  unbatched)
        causal = "top_left" if is_causal else _LAYER
        y, w = self._compute(q, None if self_attn else k, None if same_kv else v, mask,
                             kv_lens, None, need_weights, causal, None)
        if need_weights and average_attn_weights:
            w = w.mean(1) if A.kind_of(w) == A.TORCH else w.mean(axis=1)
        if unbatched:
            y = y[0]
            w = w[0] if w is not None else None
        elif not self.batch_first:
            y = y.transpose(0, 1) if A.kind_of(y) == A.TORCH else np.swapaxes(y, 0, 1)
        return y, w


def _keep_nonzero(mask: Any) -> Any:
    """A bool mask that keeps the keys ``mask`` has a nonzero for (seed 004's convention);
    a bool mask is already one."""
    if A.kind_of(mask) == A.TORCH:
        import torch
        return mask if mask.dtype == torch.bool else mask != 0
    mask = np.asarray(mask)
    return mask if mask.dtype == np.bool_ else mask != 0


def _nn_masks(key_padding_mask: Any, attn_mask: Any, B: int, H: int, T: int, S: int,
              unbatched: bool) -> Tuple[Any, Any]:
    """nn.MultiheadAttention's masks as libsdpa's: (mask, kv_lens). A boolean
    key_padding_mask that only pads at the end of each row becomes kv_lens (no mask is
    read at all); anything else becomes one mask. nn's booleans are True where attention
    is NOT allowed, libsdpa's where it is, so they are inverted (a small copy, never of
    q/k/v)."""
    import torch
    kv_lens = None
    parts = []
    if key_padding_mask is not None:
        kpm = torch.as_tensor(key_padding_mask)
        kpm = kpm[None] if unbatched else kpm
        if kpm.dtype == torch.bool:
            lens = (~kpm).sum(1)
            prefix = torch.arange(S)[None, :] < lens[:, None]
            if attn_mask is None and torch.equal(prefix, ~kpm):
                kv_lens = lens.to(torch.int64)
            else:
                parts.append((~kpm)[:, None, None, :])
        else:
            parts.append(kpm[:, None, None, :])
    if attn_mask is not None:
        am = torch.as_tensor(attn_mask)
        if am.dim() == 3:
            am = am.reshape(B, H, T, S)
        parts.append(~am if am.dtype == torch.bool else am)
    if not parts:
        return None, kv_lens
    if len(parts) == 1:
        return parts[0], kv_lens
    if all(p.dtype == torch.bool for p in parts):
        return parts[0] & parts[1], kv_lens
    as_float = [torch.zeros(p.shape).masked_fill(~p, float("-inf")) if p.dtype == torch.bool
                else p.float() for p in parts]
    return (as_float[0] + as_float[1]).contiguous(), kv_lens


def _has_qkv(module: Any) -> bool:
    return all(hasattr(module, n) for n in ("W_query", "W_key", "W_value")) or \
        all(hasattr(module, n) for n in ("W_q", "W_k", "W_v"))


def _linear_params(p: Any) -> Tuple[Any, Any]:
    """(weight [out, in], bias) of an nn.Linear, or of SelfAttention_v1's nn.Parameter
    [in, out] (transposed: a copy)."""
    import torch
    if isinstance(p, torch.nn.Linear):
        return p.weight.detach(), (p.bias.detach() if p.bias is not None else None)
    if isinstance(p, torch.Tensor) and p.dim() == 2:
        return p.detach().t().contiguous(), None
    raise TypeError(f"from_torch: cannot read projection weights from {type(p).__name__}")


def _is_causal_module(module: Any) -> bool:
    import torch
    mask = getattr(module, "mask", None)
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.shape[0] == mask.shape[1]:
        upper = torch.triu(torch.ones_like(mask, dtype=torch.bool), diagonal=1)
        return bool(torch.equal(mask.bool(), upper))
    return "causal" in type(module).__name__.lower()


def _dropout_p(module: Any) -> float:
    drop = getattr(module, "dropout", None)
    if drop is None:
        return 0.0
    return float(drop if isinstance(drop, (int, float)) else getattr(drop, "p", 0.0))


def _from_seed_module(module: Any) -> dict:
    names = (("W_query", "W_key", "W_value") if hasattr(module, "W_query")
             else ("W_q", "W_k", "W_v"))
    (wq, bq), (wk, bk), (wv, bv) = (_linear_params(getattr(module, n)) for n in names)
    out = next((getattr(module, n) for n in ("out_proj", "op_proj", "W_o")
                if getattr(module, n, None) is not None), None)
    wo, bo = _linear_params(out) if out is not None else (None, None)
    return dict(wq=wq, wk=wk, wv=wv, bq=bq, bk=bk, bv=bv, wo=wo, bo=bo,
                num_heads=int(getattr(module, "num_heads", 1)),
                causal=_is_causal_module(module), dropout_p=_dropout_p(module))


def _from_heads(module: Any) -> dict:
    """MultiHeadAttentionWrapper: one single-head module per head, outputs concatenated,
    which is one layer whose projections are the heads' stacked (a copy) and no output
    projection."""
    import torch
    heads = [_from_seed_module(h) for h in module.heads]
    stack = {}
    for n in ("wq", "wk", "wv", "bq", "bk", "bv"):
        parts = [h[n] for h in heads]
        stack[n] = None if parts[0] is None else torch.cat(parts, dim=0)
    return dict(stack, num_heads=len(heads), causal=heads[0]["causal"],
                dropout_p=heads[0]["dropout_p"])


def _from_nn_mha(m: Any) -> dict:
    if m.bias_k is not None or m.add_zero_attn:
        raise NotImplementedError("from_torch: add_bias_kv and add_zero_attn are not "
                                  "supported")
    args: dict = dict(num_heads=m.num_heads, dropout_p=float(m.dropout),
                      wo=m.out_proj.weight.detach(),
                      bo=m.out_proj.bias.detach() if m.out_proj.bias is not None else None)
    bias = m.in_proj_bias.detach() if m.in_proj_bias is not None else None
    if m._qkv_same_embed_dim:
        args.update(in_proj_weight=m.in_proj_weight.detach(), in_proj_bias=bias)
    else:
        if m.kdim != m.vdim:
            raise NotImplementedError("from_torch: kdim != vdim is not supported")
        E = m.embed_dim
        args.update(wq=m.q_proj_weight.detach(), wk=m.k_proj_weight.detach(),
                    wv=m.v_proj_weight.detach())
        if bias is not None:
            args.update(bq=bias[:E], bk=bias[E:2 * E], bv=bias[2 * E:])
    return args
