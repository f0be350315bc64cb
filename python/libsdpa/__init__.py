"""libsdpa: fused scaled-dot-product attention for CPUs, from Python.

A ctypes binding of the C library (the ``libsdpa.so`` that ``pip install ./python`` builds
with the repository's Makefile and bundles). It computes; it is not a tensor library and
has no autograd: inputs are numpy arrays or CPU torch tensors read in place, outputs are
new arrays of the same kind.

- ``attention(q, k, v, ...)``: the fused path (``sdpa_forward``) with every descriptor
  option; ``reference(...)``: the double-precision oracle (``sdpa_reference``);
  ``attention_weights(...)``: the softmax weights for inspection; ``alibi_slopes(heads)``:
  the standard ALiBi slopes.
- ``MultiHeadAttention``: the multi-head layer (``sdpa_mha_forward``), built from the
  seeds' modules or ``torch.nn.MultiheadAttention`` with ``from_torch``; ``linear``: the
  library's y = x W^T + b.
- ISA control: ``get_isa``, ``set_isa``, ``isa_supported``, ``supported_isas``, ``ISAS``.
- Errors: ``SdpaError`` and one subclass per status (``ERRORS``), each with ``.status``.

``python -m libsdpa`` prints the version, the ISA and a self-check.
"""
from __future__ import annotations

from typing import List, Union

from ._capi import API, Causal, DType, Isa, MaskKind, Stats, Status
from ._core import alibi_slopes, attention, attention_weights, reference
from ._errors import (ERRORS, BadArgumentError, BadDimensionError, BadDtypeError,
                      BadHeadsError, BadLengthsError, BadStrideError, MisalignedError,
                      NullPointerError, OverlapError, SdpaError, SdpaMemoryError,
                      SdpaOverflowError, UnsupportedIsaError, check, strerror)
from ._mha import MultiHeadAttention, linear

# The names an ISA can be given by (sdpa_isa_name), "auto" first.
ISAS = tuple(API.sdpa_isa_name(int(i)).decode() for i in Isa)


def version() -> str:
    """The loaded library's version (``sdpa_version``)."""
    return API.sdpa_version().decode()


__version__ = version()


def library_path() -> str:
    """The path of the shared library this package loaded."""
    return str(API.path)


def _isa(isa: Union[str, int, Isa, None]) -> Isa:
    from ._core import isa_code
    return Isa(isa_code(isa))


def get_isa() -> str:
    """The name of the ISA calls use when they do not force one (``sdpa_get_isa``)."""
    return API.sdpa_isa_name(API.sdpa_get_isa()).decode()


def set_isa(isa: Union[str, int, Isa, None]) -> None:
    """Force the process-wide ISA ("scalar", "avx2", ...; None or "auto" returns to the
    automatic choice). Raises UnsupportedIsaError for one not built in or not usable on
    this CPU, leaving the choice unchanged."""
    check(API.sdpa_set_isa(int(_isa(isa))), f"set_isa({isa!r})")


def isa_supported(isa: Union[str, int, Isa]) -> bool:
    """Whether an ISA is compiled into this build and usable on this CPU."""
    return bool(API.sdpa_isa_supported(int(_isa(isa))))


def supported_isas() -> List[str]:
    """The ISAs (not "auto") this build and CPU can run, slowest first."""
    return [name for code, name in zip(Isa, ISAS) if code != Isa.AUTO and isa_supported(code)]


__all__ = [
    "attention", "reference", "attention_weights", "alibi_slopes", "MultiHeadAttention",
    "linear",
    "get_isa", "set_isa", "isa_supported", "supported_isas", "ISAS", "version",
    "__version__", "library_path", "Causal", "DType", "Isa", "MaskKind", "Stats", "Status",
    "SdpaError", "ERRORS", "strerror", "NullPointerError", "BadDimensionError",
    "BadHeadsError", "BadStrideError", "SdpaOverflowError", "OverlapError", "BadDtypeError",
    "BadArgumentError", "SdpaMemoryError", "UnsupportedIsaError", "MisalignedError",
    "BadLengthsError",
]
