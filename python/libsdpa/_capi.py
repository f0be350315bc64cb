"""ctypes mirror of include/sdpa.h: the structs, enums and prototypes, and the loader.

This module is the only place that knows the C ABI. It does no validation of its own and
converts nothing: the public wrappers (``_core``, ``_mha``) build these structs from
arrays. It is not a general binding generator: when the header changes, this file changes
with it (tests/test_abi.py compiles a small C program that prints the header's sizes and
offsets and compares them with these classes).
"""
from __future__ import annotations

import ctypes
import enum
import os
from pathlib import Path
from typing import Optional

c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_float_p = ctypes.POINTER(ctypes.c_float)


class Status(enum.IntEnum):
    """``sdpa_status``: what a call returned (0 is success)."""

    OK = 0
    ERR_NULL_POINTER = 1
    ERR_BAD_DIMENSION = 2
    ERR_BAD_HEADS = 3
    ERR_BAD_STRIDE = 4
    ERR_OVERFLOW = 5
    ERR_OVERLAP = 6
    ERR_BAD_DTYPE = 7
    ERR_BAD_ARGUMENT = 8
    ERR_OUT_OF_MEMORY = 9
    ERR_UNSUPPORTED_ISA = 10
    ERR_MISALIGNED = 11
    ERR_BAD_LENGTHS = 12


class DType(enum.IntEnum):
    """``sdpa_dtype``: the storage type of one operand. The quantized ones (I8, FP8_*,
    I4) store K and V only, with scales (``Scales``); the array wrappers take F32, F16
    and BF16."""

    F32 = 0
    F16 = 1
    BF16 = 2
    I8 = 3
    FP8_E4M3 = 4
    FP8_E5M2 = 5
    I4 = 6


class Causal(enum.IntEnum):
    """``sdpa_causal``. BOTTOM_RIGHT is libsdpa's ``causal=True``; TOP_LEFT is PyTorch's
    ``is_causal`` (they differ only when Tq != Tkv)."""

    NONE = 0
    BOTTOM_RIGHT = 1
    TOP_LEFT = 2


class MaskKind(enum.IntEnum):
    """``sdpa_mask_kind``."""

    NONE = 0
    ADDITIVE = 1
    BOOL = 2


class Isa(enum.IntEnum):
    """``sdpa_isa``: the kernel tables a build may contain."""

    AUTO = 0
    SCALAR = 1
    AVX2 = 2
    AVX512 = 3
    NEON = 4
    AVX512BF16 = 5
    AMX = 6
    NEONBF16 = 7


class Compute(enum.IntEnum):
    """``sdpa_compute``: the precision of the two products."""

    F32 = 0
    BF16 = 1


class Tensor(ctypes.Structure):
    """``sdpa_tensor``: a [B, H, T, D] view, strides in elements, last dim contiguous."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("stride_b", ctypes.c_int64),
        ("stride_h", ctypes.c_int64),
        ("stride_t", ctypes.c_int64),
    ]


class Mask(ctypes.Structure):
    """``sdpa_mask``: [B|1, Hq|1, Tq|1, Tkv] view of a boolean or additive mask."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("kind", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("stride_b", ctypes.c_int64),
        ("stride_h", ctypes.c_int64),
        ("stride_q", ctypes.c_int64),
    ]


class Scales(ctypes.Structure):
    """``sdpa_scales``: the scales of a quantized K or V as a strided view; the scale of
    element (b, h, t, d) is ``data[b*stride_b + h*stride_h + t*stride_t + d // group]``
    (group 0: the whole row)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("group", ctypes.c_int64),
        ("stride_b", ctypes.c_int64),
        ("stride_h", ctypes.c_int64),
        ("stride_t", ctypes.c_int64),
    ]


class Pages(ctypes.Structure):
    """``sdpa_pages``: K and V in a pool of pages; key j of entry b is slot
    ``j % page_size`` of page ``block_table[b*stride + j // page_size]``."""

    _fields_ = [
        ("block_table", c_int32_p),
        ("stride", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("num_pages", ctypes.c_int64),
    ]


class Stats(ctypes.Structure):
    """``sdpa_stats``: the work counters of one fused call. Pass an instance as
    ``attention(..., stats=s)`` and read its fields afterwards."""

    _fields_ = [
        ("isa", ctypes.c_int),
        ("threads", ctypes.c_int),
        ("block_q", ctypes.c_int),
        ("block_kv", ctypes.c_int),
        ("work_items", ctypes.c_int64),
        ("blocks_total", ctypes.c_int64),
        ("blocks_computed", ctypes.c_int64),
        ("blocks_skipped", ctypes.c_int64),
        ("blocks_masked", ctypes.c_int64),
        ("scratch_bytes", ctypes.c_int64),
    ]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name, _ in self._fields_)
        return f"Stats({fields})"


class Desc(ctypes.Structure):
    """``sdpa_desc``: what to compute. All-zero is the plain default."""

    _fields_ = [
        ("batch", ctypes.c_int64),
        ("heads_q", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("len_q", ctypes.c_int64),
        ("len_kv", ctypes.c_int64),
        ("dim_qk", ctypes.c_int64),
        ("dim_v", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int),
        ("num_threads", ctypes.c_int),
        ("isa", ctypes.c_int),
        ("stats", ctypes.POINTER(Stats)),
        ("mask", Mask),
        ("window", ctypes.c_int),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", c_float_p),
        ("sinks", c_float_p),
        ("q_lens", c_int64_p),
        ("kv_lens", c_int64_p),
        ("cu_seqlens_q", c_int64_p),
        ("cu_seqlens_kv", c_int64_p),
        ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("compute", ctypes.c_int),
        ("k_scales", Scales),
        ("v_scales", Scales),
        ("pages", Pages),
    ]


class KvWriteDesc(ctypes.Structure):
    """``sdpa_kv_write_desc``: new rows [batch, heads, len, dim] into a K or V cache at
    positions ``pos[b]`` (through ``pages`` when paged), quantized with ``scales``."""

    _fields_ = [
        ("batch", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("len", ctypes.c_int64),
        ("dim", ctypes.c_int64),
        ("len_kv", ctypes.c_int64),
        ("pos", c_int64_p),
        ("pages", Pages),
        ("scales", Scales),
        ("compute_scales", ctypes.c_int),
        ("num_threads", ctypes.c_int),
    ]


class LinearDesc(ctypes.Structure):
    """``sdpa_linear_desc``: y = x W^T + b."""

    _fields_ = [
        ("rows", ctypes.c_int64),
        ("in_features", ctypes.c_int64),
        ("out_features", ctypes.c_int64),
        ("weight", c_float_p),
        ("bias", c_float_p),
        ("ld_x", ctypes.c_int64),
        ("ld_w", ctypes.c_int64),
        ("ld_y", ctypes.c_int64),
        ("num_threads", ctypes.c_int),
        ("isa", ctypes.c_int),
    ]


class Proj(ctypes.Structure):
    """``sdpa_proj``: one nn.Linear's weight [out, in] and optional bias."""

    _fields_ = [("weight", c_float_p), ("bias", c_float_p)]


class MhaDesc(ctypes.Structure):
    """``sdpa_mha_desc``: the multi-head attention layer."""

    _fields_ = [
        ("batch", ctypes.c_int64),
        ("len_q", ctypes.c_int64),
        ("len_kv", ctypes.c_int64),
        ("d_in", ctypes.c_int64),
        ("d_kv", ctypes.c_int64),
        ("heads_q", ctypes.c_int64),
        ("heads_kv", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("d_out", ctypes.c_int64),
        ("wq", Proj),
        ("wk", Proj),
        ("wv", Proj),
        ("wo", Proj),
        ("in_proj_weight", c_float_p),
        ("in_proj_bias", c_float_p),
        ("attn", Desc),
    ]


_PROTOTYPES = {
    "sdpa_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "sdpa_version": (ctypes.c_char_p, []),
    "sdpa_forward": (ctypes.c_int, [ctypes.POINTER(Desc)] + [ctypes.POINTER(Tensor)] * 4
                     + [c_float_p]),
    "sdpa_reference": (ctypes.c_int, [ctypes.POINTER(Desc)] + [ctypes.POINTER(Tensor)] * 4
                       + [c_float_p]),
    "sdpa_attention_weights": (ctypes.c_int, [ctypes.POINTER(Desc), ctypes.POINTER(Tensor),
                                              ctypes.POINTER(Tensor), c_float_p, c_float_p]),
    "sdpa_alibi_slopes": (ctypes.c_int, [ctypes.c_int64, ctypes.c_float, c_float_p]),
    "sdpa_kv_write": (ctypes.c_int, [ctypes.POINTER(KvWriteDesc), ctypes.POINTER(Tensor),
                                     ctypes.POINTER(Tensor)]),
    "sdpa_linear": (ctypes.c_int, [ctypes.POINTER(LinearDesc), c_float_p, c_float_p]),
    "sdpa_mha_workspace_size": (ctypes.c_size_t, [ctypes.POINTER(MhaDesc)]),
    "sdpa_mha_forward": (ctypes.c_int, [ctypes.POINTER(MhaDesc), c_float_p, c_float_p,
                                        c_float_p, c_float_p, ctypes.c_void_p]),
    "sdpa_get_isa": (ctypes.c_int, []),
    "sdpa_set_isa": (ctypes.c_int, [ctypes.c_int]),
    "sdpa_isa_supported": (ctypes.c_int, [ctypes.c_int]),
    "sdpa_isa_name": (ctypes.c_char_p, [ctypes.c_int]),
}


# The ABI level these structs describe (include/sdpa.h SDPA_ABI_VERSION), and the entry
# points the header renames to that level's symbols: the plain names are the level-1
# (0.1.0) entry points, which read 0.1.0's smaller layouts.
ABI_VERSION = 2
_ABI_RENAMED = ("sdpa_forward", "sdpa_reference", "sdpa_attention_weights",
                "sdpa_mha_workspace_size", "sdpa_mha_forward")


def _symbol(name: str) -> str:
    return f"{name}_abi{ABI_VERSION}" if name in _ABI_RENAMED else name


def _candidates() -> list:
    """Where the shared library may be, in the order tried: $LIBSDPA_LIBRARY, the copy
    bundled by ``pip install ./python``, then the repository's build/ when the package is
    imported from a source checkout (PYTHONPATH=python)."""
    here = Path(__file__).resolve().parent
    found = []
    env = os.environ.get("LIBSDPA_LIBRARY")
    if env:
        return [Path(env)]
    found.append(here / "lib" / "libsdpa.so")
    found.append(here.parent.parent / "build" / "libsdpa.so")
    return found


class Api:
    """The loaded library's functions as attributes (one instance, ``API``). Wrappers call
    ``API.sdpa_forward(...)`` and so on, so a test can replace one entry to watch what is
    passed to the library."""

    def __init__(self, path: Optional[Path] = None) -> None:
        tried = [path] if path is not None else _candidates()
        errors = []
        self.cdll: Optional[ctypes.CDLL] = None
        for cand in tried:
            if not cand.exists():
                errors.append(f"{cand}: not found")
                continue
            try:
                # CDLL releases the GIL around every call: attention runs while other
                # Python threads go on.
                self.cdll = ctypes.CDLL(str(cand))
                self.path = cand
                break
            except OSError as exc:
                errors.append(f"{cand}: {exc}")
        if self.cdll is None:
            raise ImportError("libsdpa: cannot load the shared library (" + "; ".join(errors)
                              + "); install with `pip install ./python` or set LIBSDPA_LIBRARY")
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(self.cdll, _symbol(name))
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)


API = Api()
