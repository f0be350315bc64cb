"""`python -m libsdpa`: prints the version and the ISA, runs its self-check and says ok."""
from __future__ import annotations

import subprocess
import sys

import libsdpa


def test_python_m_libsdpa():
    run = subprocess.run([sys.executable, "-m", "libsdpa"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert f"libsdpa {libsdpa.__version__}" in out
    assert f"isa: {libsdpa.get_isa()}" in out
    assert out.rstrip().endswith("self-check: ok")
    for isa in libsdpa.supported_isas():
        assert f" {isa} " in out


def test_self_check_returns_its_verdict(monkeypatch):
    from libsdpa import __main__ as cli
    assert cli.self_check(verbose=False)
    # a wrong fused result must turn the verdict
    real = libsdpa.attention
    monkeypatch.setattr(libsdpa, "attention", lambda *a, **k: real(*a, **k) * 1.01)
    assert not cli.self_check(verbose=False)
