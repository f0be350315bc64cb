"""setup.py - the build step of the libsdpa Python package.

Runs the repository's Makefile (`make lib`, with the repository root, python/.., as the
working directory) and copies the shared library it builds into the package
(libsdpa/lib/libsdpa.so), so the installed package loads its own copy; the environment's
LIBSDPA_MAKE_ARGS (e.g. "WERROR=1 CC=clang") is passed to make. Nothing is compiled
against PyTorch or Python: the binding is ctypes. The metadata is in pyproject.toml; the
version is the C header's SDPA_VERSION_STRING. It cannot build from an sdist alone (the
C sources live outside python/).
"""
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def header_version() -> str:
    text = (ROOT / "include" / "sdpa.h").read_text()
    match = re.search(r'#define\s+SDPA_VERSION_STRING\s+"([^"]+)"', text)
    if not match:
        raise RuntimeError("SDPA_VERSION_STRING not found in include/sdpa.h")
    return match.group(1)


class BuildWithLibrary(build_py):
    """build_py, then `make lib` and the library copied next to the Python files."""

    def run(self):
        super().run()
        jobs = str(os.cpu_count() or 1)
        extra = shlex.split(os.environ.get("LIBSDPA_MAKE_ARGS", ""))
        cmd = ["make", "-j", jobs] + extra + ["lib"]
        self.announce(f"running {' '.join(cmd)} in {ROOT}", level=2)
        try:
            subprocess.run(cmd, cwd=ROOT, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise RuntimeError(f"`make lib` failed in {ROOT}: {exc}") from exc
        built = ROOT / "build" / "libsdpa.so"
        dest = Path(self.build_lib) / "libsdpa" / "lib" / "libsdpa.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        # build/libsdpa.so is a symlink chain to libsdpa.so.X.Y.Z: copy the file itself.
        shutil.copyfile(built.resolve(), dest)


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is tagged for this platform."""

    def has_ext_modules(self):
        return True


setup(version=header_version(), cmdclass={"build_py": BuildWithLibrary},
      distclass=BinaryDistribution)
