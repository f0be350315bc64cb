"""The ctypes structs of libsdpa._capi against the C header: a small C program compiled
against include/sdpa.h prints each struct's size and each field's offset, which must be
the ctypes classes' own. Catches a header change the binding has not followed. Skipped
without a C compiler or outside a source checkout."""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from libsdpa import _capi
from conftest import ROOT

STRUCTS = {
    "sdpa_tensor": _capi.Tensor, "sdpa_mask": _capi.Mask, "sdpa_stats": _capi.Stats,
    "sdpa_desc": _capi.Desc, "sdpa_linear_desc": _capi.LinearDesc, "sdpa_proj": _capi.Proj,
    "sdpa_mha_desc": _capi.MhaDesc, "sdpa_scales": _capi.Scales, "sdpa_pages": _capi.Pages,
    "sdpa_kv_write_desc": _capi.KvWriteDesc,
}


def test_struct_layouts_match_the_header(tmp_path):
    header = ROOT / "include" / "sdpa.h"
    cc = shutil.which("cc") or shutil.which("gcc")
    if not header.exists() or cc is None:
        pytest.skip("needs include/sdpa.h (a source checkout) and a C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "sdpa.h"',
             "int main(void) {"]
    for cname, cls in STRUCTS.items():
        lines.append(f'printf("{cname} size %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", str(header.parent), str(src), "-o", str(exe)],
                   check=True)
    got = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        struct, field, value = line.split()
        got[(struct, field)] = int(value)
    for cname, cls in STRUCTS.items():
        assert got[(cname, "size")] == ctypes.sizeof(cls), cname
        for field, _ in cls._fields_:
            assert got[(cname, field)] == getattr(cls, field).offset, f"{cname}.{field}"


def test_enums_match_the_header():
    text = (ROOT / "include" / "sdpa.h").read_text() if (ROOT / "include").exists() else None
    if text is None:
        pytest.skip("needs include/sdpa.h (a source checkout)")
    for enum_cls, prefix in ((_capi.Status, "SDPA_"), (_capi.DType, "SDPA_"),
                             (_capi.Causal, "SDPA_CAUSAL_"), (_capi.MaskKind, "SDPA_MASK_"),
                             (_capi.Isa, "SDPA_ISA_"), (_capi.Compute, "SDPA_COMPUTE_")):
        for member in enum_cls:
            want = f"{prefix}{member.name} = {int(member)}"
            assert want in text, f"{enum_cls.__name__}.{member.name}: no '{want}' in sdpa.h"


def test_abi_level_and_symbols_match_the_header():
    """The binding binds the renamed entry points of its ABI level (sdpa.h renames them
    with #define name name_abiN): a header that moved to another level, or renamed another
    function, must be followed here."""
    text = (ROOT / "include" / "sdpa.h").read_text() if (ROOT / "include").exists() else None
    if text is None:
        pytest.skip("needs include/sdpa.h (a source checkout)")
    assert f"#define SDPA_ABI_VERSION {_capi.ABI_VERSION}\n" in text
    renamed = {line.split()[1] for line in text.splitlines()
               if line.startswith("#define sdpa_") and line.split()[2].endswith(
                   f"_abi{_capi.ABI_VERSION}")}
    bound = {n for n in renamed if n in _capi._PROTOTYPES}
    assert bound == set(_capi._ABI_RENAMED) & set(_capi._PROTOTYPES), (renamed, bound)
