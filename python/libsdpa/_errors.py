"""The exceptions of the Python package: one class per ``sdpa_status``.

Every failure the library reports becomes an ``SdpaError`` subclass carrying the status
(``.status``, a ``Status``) and the library's own sentence (``.strerror``, from
``sdpa_strerror``). Problems the C API cannot even express (q and k with different head
dims, a mask whose shape does not broadcast, a dtype numpy has but libsdpa does not) are
found in Python before any call and raise the class of the status the library uses for
that category, so callers catch one hierarchy. Each class also derives from the built-in
exception a Python user would expect (ValueError, TypeError, MemoryError).
"""
from __future__ import annotations

from typing import Dict, Type

from ._capi import API, Status


def strerror(status: int) -> str:
    """``sdpa_strerror``: the library's description of a status code."""
    return API.sdpa_strerror(int(status)).decode()


class SdpaError(Exception):
    """A libsdpa call failed (or would fail). ``.status`` is the ``sdpa_status``,
    ``.strerror`` the library's sentence for it, ``.detail`` what the wrapper adds."""

    def __init__(self, status: int, detail: str = "") -> None:
        # A library newer than this package may return a code Status does not name yet.
        self.status = Status(status) if status in Status._value2member_map_ else int(status)
        self.strerror = strerror(status)
        self.detail = detail
        name = getattr(self.status, "name", "UNKNOWN")
        text = f"{name} ({int(self.status)}): {self.strerror}"
        super().__init__(f"{detail}: {text}" if detail else text)


class NullPointerError(SdpaError, ValueError):
    """SDPA_ERR_NULL_POINTER."""


class BadDimensionError(SdpaError, ValueError):
    """SDPA_ERR_BAD_DIMENSION, and shapes that do not fit together."""


class BadHeadsError(SdpaError, ValueError):
    """SDPA_ERR_BAD_HEADS: heads_q is not a multiple of heads_kv."""


class BadStrideError(SdpaError, ValueError):
    """SDPA_ERR_BAD_STRIDE, and a last dimension that is not contiguous."""


class SdpaOverflowError(SdpaError, OverflowError):
    """SDPA_ERR_OVERFLOW: an operand's extent overflows."""


class OverlapError(SdpaError, ValueError):
    """SDPA_ERR_OVERLAP: an output shares memory with an input or another output."""


class BadDtypeError(SdpaError, TypeError):
    """SDPA_ERR_BAD_DTYPE, and element types libsdpa does not store (float64, ints)."""


class BadArgumentError(SdpaError, ValueError):
    """SDPA_ERR_BAD_ARGUMENT: a parameter out of range."""


class SdpaMemoryError(SdpaError, MemoryError):
    """SDPA_ERR_OUT_OF_MEMORY."""


class UnsupportedIsaError(SdpaError, RuntimeError):
    """SDPA_ERR_UNSUPPORTED_ISA: the ISA is not built in or not usable on this CPU."""


class MisalignedError(SdpaError, ValueError):
    """SDPA_ERR_MISALIGNED: a pointer not aligned to its element size."""


class BadLengthsError(SdpaError, ValueError):
    """SDPA_ERR_BAD_LENGTHS: q_lens/kv_lens/cu_seqlens out of range or mixed."""


ERRORS: Dict[int, Type[SdpaError]] = {
    Status.ERR_NULL_POINTER: NullPointerError,
    Status.ERR_BAD_DIMENSION: BadDimensionError,
    Status.ERR_BAD_HEADS: BadHeadsError,
    Status.ERR_BAD_STRIDE: BadStrideError,
    Status.ERR_OVERFLOW: SdpaOverflowError,
    Status.ERR_OVERLAP: OverlapError,
    Status.ERR_BAD_DTYPE: BadDtypeError,
    Status.ERR_BAD_ARGUMENT: BadArgumentError,
    Status.ERR_OUT_OF_MEMORY: SdpaMemoryError,
    Status.ERR_UNSUPPORTED_ISA: UnsupportedIsaError,
    Status.ERR_MISALIGNED: MisalignedError,
    Status.ERR_BAD_LENGTHS: BadLengthsError,
}


def error(status: int, detail: str = "") -> SdpaError:
    """The exception for a status (an unknown code gives a plain SdpaError)."""
    return ERRORS.get(int(status), SdpaError)(status, detail)


def check(status: int, what: str) -> None:
    """Raise the status's exception unless it is SDPA_OK."""
    if status != Status.OK:
        raise error(status, what)
