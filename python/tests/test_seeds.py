"""The seed notebooks (../shared/seeds/*.txt), run with libsdpa in place of their attention.

Each notebook's code cells are taken from the file at test time and run in order. Where
a seed defines attention modules, every top-level construction of them is swapped for
``libsdpa.MultiHeadAttention.from_torch(...)`` (the one-line change a reader makes), and
every printed tensor of every cell must come out as the notebook printed it. The tables
only an unseeded random generator or torch's own dropout stream produced are listed in
IRREPRODUCIBLE with the reason. Then per seed, the tables of attention weights and
context vectors the seed prints are recomputed by libsdpa from the notebook's own
objects, and the seeds' own attention functions and modules are compared with libsdpa at
full precision.

Printed numbers carry half a unit of their last digit; a printed table matches when
|ours - printed| <= that half unit (ours and theirs) + 1e-5 + 1e-4 |printed|.
Skipped with a message when the shared directory or torch is absent.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Dict, List, Set, Tuple

import numpy as np
import pytest

import libsdpa
import _notebook as nb
from conftest import assert_ref_close, shared_dir

SEEDS = ["000", "001", "002", "003", "004"]

# The classes a reader swaps, and how many top-level constructions the notebook makes.
SWAPS: Dict[str, Tuple[Set[str], int]] = {
    "000": ({"MultiHeadAttention"}, 1),  # SelfAttention / CausalSelfAttention return
    # their scores and keys too, which the cells use: they are checked below instead
    "003": ({"SelfAttention_v2", "CausalAttention", "MultiHeadAttentionWrapper",
             "MultiHeadAttention"}, 4),
    "004": ({"MultiHeadAttention"}, 2),
}

# (seed, cell label, a piece of its code): printed values nothing here can reproduce.
IRREPRODUCIBLE = {
    ("001", "In [18]", "softmax(mmul + mask)"): "np.random.randn without a seed",
    ("001", "In [19]", "np.matmul(attention, v)"): "np.random.randn without a seed",
    ("001", "In [20]", "v"): "np.random.randn without a seed",
    ("001", "In [23]", "scaled_attention(q, k, v, mask)"): "np.random.randn without a seed",
    ("002", "In [14]", "attention[0][0]"): "torch.randn without a seed",
    ("002", "In [21]", "output"): "torch.randn without a seed",
    ("003", "In [None]", "nn.Dropout(0.5)"): "nn.Dropout's random stream (torch's, and "
    "drawn differently by torch 2.13 than by the notebook's 2.5.1): not attention",
    ("003", "In [15]", "dropout(attn_weights)"): "the same nn.Dropout stream",
}


def seed_path(seed: str) -> Path:
    seeds = shared_dir() / "seeds"
    if not seeds.is_dir():
        pytest.skip(f"no seed notebooks at {seeds} (the shared directory beside the "
                    "repository; set LIBSDPA_SHARED to point elsewhere)")
    found = sorted(seeds.glob(f"{seed}_*.txt"))
    if not found:
        pytest.skip(f"seed {seed} not found in {seeds}")
    return found[0]


@functools.lru_cache(maxsize=None)
def notebook(seed: str):
    """(cells, what each printed, namespace, swap) of one run of the seed, with its
    modules swapped for libsdpa's."""
    cells = nb.read_cells(seed_path(seed))
    names, _ = SWAPS.get(seed, (set(), 0))
    swap = nb.Swap(names, libsdpa.MultiHeadAttention.from_torch)
    printed, ns = nb.run(cells, swap)
    return cells, printed, ns, swap


def cell(cells: List[nb.Cell], label: str, snippet: str) -> int:
    hits = [i for i, c in enumerate(cells) if c.label == label and snippet in c.code]
    assert len(hits) == 1, f"{label} with {snippet!r}: {len(hits)} cells"
    return hits[0]


def match_printed(ours: np.ndarray, printed: np.ndarray, what: str,
                  our_unit: float = 0.0) -> None:
    """ours (values) against a printed tensor (values and half-units, 2 x N)."""
    vals, units = printed
    ours = np.asarray(ours, dtype=np.float64).reshape(-1)
    assert ours.size == vals.size, f"{what}: {ours.size} values, printed {vals.size}"
    both_inf = np.isinf(vals) & (ours == vals)
    with np.errstate(invalid="ignore"):
        err = np.where(both_inf, 0.0, np.abs(ours - vals))
    tol = units + our_unit + 1e-5 + 1e-4 * np.abs(np.where(np.isinf(vals), 0, vals))
    assert np.all(err <= tol), (f"{what}: max |ours - printed| {np.nanmax(err):.2e} "
                                f"(tolerance {tol.max():.1e})")


@pytest.fixture(autouse=True)
def _needs_torch(torch):
    """Every seed imports torch."""


@pytest.mark.parametrize("seed", SEEDS)
def test_notebook_reproduces_printed_tables(seed):
    cells, printed, _, swap = notebook(seed)
    _, made = SWAPS.get(seed, (set(), 0))
    assert len(swap.made) == made, f"expected {made} swapped modules, made {len(swap.made)}"
    assert all(isinstance(m, libsdpa.MultiHeadAttention) for m in swap.made)
    skip = {(lab, snip) for (s, lab, snip) in IRREPRODUCIBLE if s == seed}
    compared = 0
    for c, out in zip(cells, printed):
        want = nb.printed_tensors(c.output)
        if not want or any(c.label == lab and snip in c.code for lab, snip in skip):
            continue
        have = nb.printed_tensors(out)
        # a notebook's text may end inside a table: only complete ones are compared
        assert len(have) >= len(want), f"{c.label}: printed {len(have)} tensors of {len(want)}"
        for k, (w, h) in enumerate(zip(want, have)):
            match_printed(h[0], w, f"seed {seed} {c.label} tensor {k}", our_unit=h[1].max())
            compared += 1
    assert compared > 0
    for lab, snip in skip:  # the list names cells that exist
        cell(cells, lab, snip)


def test_seed000_self_attention_tables():
    import torch
    cells, _, ns, _ = notebook("000")
    inputs = ns["inputs"]
    batch = torch.stack((inputs, inputs))  # cell 18's batch (a later cell reuses the name)
    table = lambda label, snippet, k=0: nb.printed_tensors(
        cells[cell(cells, label, snippet)].output)[k]
    self_att = ns["self_att"]  # SelfAttention(3, 3): torch's, as the notebook uses it
    layer = libsdpa.MultiHeadAttention.from_torch(self_att)
    y, w = layer(inputs, need_weights=True)
    match_printed(w, table("In [6]", "attn_wt"), "attention weights")
    assert_ref_close(y, self_att(inputs)[0].detach(), "context vs the module")
    _, wc = libsdpa.MultiHeadAttention.from_torch(self_att, causal=True)(inputs, need_weights=True)
    match_printed(wc, table("In [10]", "masked_attn_wt"), "renormalised causal weights")
    match_printed(wc, table("In [16]", "masked_attn_wt_soft"), "causal softmax weights")
    cas = ns["cas_self_att"]  # CausalSelfAttention: causal from its class name
    yc, wcs = libsdpa.MultiHeadAttention.from_torch(cas)(batch, need_weights=True)
    match_printed(wcs, table("In [18]", "cas_self_att(batch)"), "weights before dropout")
    match_printed(yc, table("In [19]", "cas_context_vectors"), "causal context vectors")


def test_seed000_multihead_layer():
    """The swapped MultiHeadAttention (dropout 0.3, so its printed table is torch's
    dropout stream): in eval mode, the layer equals its module."""
    _, _, ns, _ = notebook("000")
    layer = ns["head_self_att"]
    assert isinstance(layer, libsdpa.MultiHeadAttention) and layer.causal
    layer.source.eval()
    try:
        assert_ref_close(layer(ns["batch"]), layer.source(ns["batch"]).detach(), "eval mode")
    finally:
        layer.source.train()


def test_seed001_running_means():
    """All scores equal: causal attention is the running mean of the values."""
    import torch
    cells, _, ns, _ = notebook("001")
    x = ns["x"]  # torch.manual_seed(1337); torch.randn(1, 4, 4)
    zeros = torch.zeros_like(x)
    o = libsdpa.attention(zeros, zeros, x, causal=True)
    match_printed(o, nb.printed_tensors(cells[cell(cells, "In [10]", "attention")].output)[0],
                  "running mean")
    # torch.manual_seed(35); b = randint(0, 10, (4, 4)): the averaged sum, c
    b = ns["b"][None]
    c_printed = nb.printed_tensors(cells[cell(cells, "In [13]", "keepdim = True")].output)[2]
    match_printed(libsdpa.attention(torch.zeros_like(b), torch.zeros_like(b), b, causal=True),
                  c_printed, "causal average of b")


def test_seed001_numpy_function(rng):
    """The seed's own scaled_attention(q, k, v, mask) (numpy, float64) against libsdpa."""
    _, _, ns, _ = notebook("001")
    L, dk, dv = 4, 8, 8
    q = rng.standard_normal((L, dk)).astype(np.float32)
    k = rng.standard_normal((L, dk)).astype(np.float32)
    v = rng.standard_normal((L, dv)).astype(np.float32)
    mask = np.tril(np.ones((4, 4)))
    mask[mask == 0] = -np.inf
    mask[mask == 1] = 0
    want = ns["scaled_attention"](q.astype(np.float64), k.astype(np.float64),
                                  v.astype(np.float64), mask)
    assert_ref_close(libsdpa.attention(q, k, v, causal=True), want, "causal")
    assert_ref_close(libsdpa.attention(q, k, v, mask=mask.astype(np.float32)), want, "mask")


def test_seed002_chunked_views():
    """q, k, v are qkv.chunk(3, dim=-1) of a permuted projection: strided views, read in
    place; the notebook's additive triu(-inf) mask and causal=True agree with its own
    softmax."""
    import torch
    _, _, ns, _ = notebook("002")
    q, k, v = ns["q"], ns["k"], ns["v"]
    assert not q.is_contiguous()
    want_w = ns["attention"].detach()
    want_o = torch.matmul(want_w, v).detach()
    assert_ref_close(libsdpa.attention_weights(q.detach(), k.detach(), causal=True), want_w)
    for opts in (dict(causal=True), dict(mask=ns["mask"])):
        o = libsdpa.attention(q.detach(), k.detach(), v.detach(), **opts)
        assert_ref_close(o, want_o, str(sorted(opts)))


def test_seed003_weights_tables():
    cells, _, ns, _ = notebook("003")
    sa_v2 = ns["sa_v2"]
    assert isinstance(sa_v2, libsdpa.MultiHeadAttention)
    inputs = ns["inputs"]
    _, w = sa_v2.forward(inputs, need_weights=True)
    match_printed(w, nb.printed_tensors(
        cells[cell(cells, "In [7]", "Re-using")].output)[0], "attention weights")
    _, wc = sa_v2.forward(inputs, need_weights=True, causal=True)
    match_printed(wc, nb.printed_tensors(
        cells[cell(cells, "In [12]", "renormalise")].output)[0], "causal weights")
    match_printed(wc, nb.printed_tensors(
        cells[cell(cells, "In [10]", "row_sums")].output)[0], "renormalised weights")


@pytest.mark.parametrize("seed", ["003", "004"])
def test_swapped_layers_equal_their_modules(seed):
    """Each swapped layer against the torch module it replaced, at full precision
    (2x the library's bound: both fp32, see test_mha.py)."""
    import torch
    _, _, ns, swap = notebook(seed)
    for layer in swap.made:
        module = layer.source
        d_in = layer.d_in
        x = torch.randn(2, 6, d_in, generator=torch.Generator().manual_seed(d_in))
        if type(module).__name__.startswith("SelfAttention_v"):
            x = x[0]  # the seeds' v1/v2 take one sequence, [T, d_in] (keys.T)
        if layer.style == "qkv":
            keep = torch.rand(6, 6) > 0.3
            keep[:, 0] = True
            for args in ((x, x, x), (x, x, x, keep)):
                y, w = layer(*args)
                ty, tw = module(*args)
                for a, b in ((y, ty), (w, tw)):
                    err = (a - b.detach()).abs()
                    assert torch.all(err <= 2 * (1e-5 + 1e-4 * b.detach().abs()))
        else:
            y, t = layer(x), module(x).detach()
            assert torch.all((y - t).abs() <= 2 * (1e-5 + 1e-4 * t.abs())), type(module)


def test_seed004_function(rng):
    """Seed 004's own scaled_dot_product_attention(Q, K, V, mask) against libsdpa, its
    mask == 0 convention as a boolean mask."""
    import torch
    _, _, ns, _ = notebook("004")
    gen = torch.Generator().manual_seed(5)
    Q, K, V = (torch.randn(2, 2, 7, 4, generator=gen) for _ in range(3))
    mask = (torch.rand(7, 7, generator=gen) > 0.4).int()
    mask[:, 0] = 1
    for m in (None, mask):
        want, probs = ns["scaled_dot_product_attention"](Q, K, V, m)
        keep = None if m is None else m != 0
        assert_ref_close(libsdpa.attention(Q, K, V, mask=keep), want, "output")
        assert_ref_close(libsdpa.attention_weights(Q, K, mask=keep), probs, "probs")


def test_printed_match_can_fail():
    """A table that differs by one printed unit in one place is rejected."""
    cells, _, _, _ = notebook("003")
    printed = nb.printed_tensors(cells[cell(cells, "In [27]", "MultiHeadAttention(d_in")].output)[0]
    ours = printed[0].copy()
    ours[5] += 2e-4
    with pytest.raises(AssertionError):
        match_printed(ours, printed, "perturbed")
