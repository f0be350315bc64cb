"""What the wrappers need to know about a caller's numpy array or CPU torch tensor.

``describe()`` reads an array's data pointer, shape, element strides and storage type
without copying or converting anything; ``empty()`` allocates an output of the caller's
kind. torch is never imported here: a tensor can only reach us if the caller imported
torch, so ``sys.modules`` tells whether one could be a tensor. Not a tensor library:
nothing here computes on the data.
"""
from __future__ import annotations

import sys
from typing import Any, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ._capi import DType
from ._errors import BadDimensionError, BadDtypeError, BadStrideError, Status

NUMPY = "numpy"
TORCH = "torch"

# Storage types that are not attention operands but masks: 1 byte, nonzero keeps.
BOOL_LIKE = "bool"

_ITEMSIZE = {DType.F32: 4, DType.F16: 2, DType.BF16: 2, BOOL_LIKE: 1}


def _torch() -> Any:
    return sys.modules.get("torch")


def kind_of(x: Any) -> Optional[str]:
    """NUMPY, TORCH, or None for anything else."""
    if isinstance(x, np.ndarray):
        return NUMPY
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        return TORCH
    return None


def _numpy_bf16() -> Optional[np.dtype]:
    """ml_dtypes' bfloat16, when it is installed (numpy has no bf16 of its own)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


_TORCH_CODES: dict = {}


def _dtype_code(kind: str, dtype: Any) -> Any:
    """The DType (or BOOL_LIKE) of a numpy/torch dtype; None when libsdpa cannot read it."""
    if kind == TORCH:
        if not _TORCH_CODES:  # built once, on the first tensor
            torch = _torch()
            _TORCH_CODES.update({torch.float32: DType.F32, torch.float16: DType.F16,
                                 torch.bfloat16: DType.BF16, torch.bool: BOOL_LIKE,
                                 torch.uint8: BOOL_LIKE})
        return _TORCH_CODES.get(dtype)
    dt = np.dtype(dtype)
    if dt == np.float32:
        return DType.F32
    if dt == np.float16:
        return DType.F16
    if dt.name == "bfloat16":
        return DType.BF16
    if dt in (np.bool_, np.uint8):
        return BOOL_LIKE
    return None


class ArrayInfo(NamedTuple):
    """One operand as libsdpa sees it. ``obj`` keeps the caller's array alive."""

    kind: str
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # in elements
    dtype: Any  # a DType, or BOOL_LIKE
    obj: Any


def describe(x: Any, what: str, allow_bool: bool = False) -> ArrayInfo:
    """Pointer, shape, element strides and storage type of ``x`` (no copy)."""
    kind = kind_of(x)
    if kind is None:
        raise TypeError(f"{what}: expected a numpy array or a torch tensor, got "
                        f"{type(x).__name__}")
    if kind == TORCH:
        if x.device.type != "cpu":
            raise ValueError(f"{what}: libsdpa runs on the CPU; the tensor is on {x.device}")
        torch = _torch()
        if x.layout != torch.strided:
            raise ValueError(f"{what}: only strided (dense) tensors, not {x.layout}")
        dtype, shape, strides = x.dtype, tuple(x.shape), tuple(x.stride())
        ptr = x.data_ptr()
    else:
        dtype, shape = x.dtype, x.shape
        ptr = x.__array_interface__["data"][0]
        strides = []
        for s in x.strides:
            if s % x.itemsize:
                raise BadStrideError(Status.ERR_BAD_STRIDE,
                                     f"{what}: byte stride {s} is not a whole number of "
                                     f"{x.itemsize}-byte elements")
            strides.append(s // x.itemsize)
        strides = tuple(strides)
    code = _dtype_code(kind, dtype)
    if code is None or (code == BOOL_LIKE and not allow_bool):
        allowed = "float32, float16, bfloat16" + (", bool, uint8" if allow_bool else "")
        hint = (" (numpy bfloat16 needs the ml_dtypes package)"
                if kind == NUMPY and _numpy_bf16() is None else "")
        raise BadDtypeError(Status.ERR_BAD_DTYPE,
                            f"{what}: dtype {dtype} is not one libsdpa stores ({allowed})"
                            + hint)
    return ArrayInfo(kind, ptr, tuple(int(d) for d in shape), strides, code, x)


def dtype_from(spec: Any) -> DType:
    """A DType from a DType, a name ("float32", "f16", "bf16", ...) or a numpy/torch
    dtype."""
    if isinstance(spec, DType):
        if spec in (DType.F32, DType.F16, DType.BF16):
            return spec
        raise BadDtypeError(Status.ERR_BAD_DTYPE,
                            f"{spec!r} stores a K/V cache, not an output (float32, float16, "
                            "bfloat16)")
    if isinstance(spec, str):
        names = {"float32": DType.F32, "f32": DType.F32, "fp32": DType.F32,
                 "float16": DType.F16, "f16": DType.F16, "fp16": DType.F16, "half": DType.F16,
                 "bfloat16": DType.BF16, "bf16": DType.BF16}
        if spec.lower() in names:
            return names[spec.lower()]
    else:
        torch = _torch()
        kind = TORCH if torch is not None and isinstance(spec, torch.dtype) else NUMPY
        try:
            code = _dtype_code(kind, spec)
        except TypeError:
            code = None
        if isinstance(code, DType):
            return code
    raise BadDtypeError(Status.ERR_BAD_DTYPE, f"unknown output dtype {spec!r}")


def empty(kind: str, shape: Sequence[int], dtype: DType) -> Any:
    """An uninitialised contiguous array of the caller's kind."""
    if kind == TORCH:
        torch = _torch()
        table = {DType.F32: torch.float32, DType.F16: torch.float16,
                 DType.BF16: torch.bfloat16}
        return torch.empty(tuple(shape), dtype=table[dtype])
    if dtype == DType.BF16:
        bf16 = _numpy_bf16()
        if bf16 is None:
            raise BadDtypeError(Status.ERR_BAD_DTYPE,
                                "a bfloat16 numpy output needs the ml_dtypes package")
        return np.empty(tuple(shape), dtype=bf16)
    return np.empty(tuple(shape), dtype=np.float32 if dtype == DType.F32 else np.float16)


def small(values: Any, np_dtype: Any, what: str, length: int) -> np.ndarray:
    """A contiguous copy of a short per-head or per-sequence array (slopes, sinks, lengths),
    checked for its length so the library never reads past it."""
    if kind_of(values) == TORCH:
        values = values.detach().cpu().numpy()
    arr = np.ascontiguousarray(np.asarray(values, dtype=np_dtype).reshape(-1))
    if arr.shape[0] != length:
        raise BadDimensionError(Status.ERR_BAD_DIMENSION,
                                f"{what} has {arr.shape[0]} entries, needs {length}")
    return arr


def itemsize(code: Any) -> int:
    return _ITEMSIZE[code]


def check_last_contiguous(info: ArrayInfo, what: str) -> None:
    """libsdpa reads the last dimension as contiguous elements. (An empty array's strides
    mean nothing: the library reports its zero dimension instead.)"""
    if info.shape and info.shape[-1] > 1 and info.strides[-1] != 1 and 0 not in info.shape:
        raise BadStrideError(Status.ERR_BAD_STRIDE,
                             f"{what}: the last dimension must be contiguous (stride 1, "
                             f"got {info.strides[-1]}); libsdpa reads views without copying")
