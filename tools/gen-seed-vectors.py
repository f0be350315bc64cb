#!/usr/bin/python3
"""gen-seed-vectors.py - regenerate tests/data/seed_vectors.h from PyTorch.

The seed notebooks (the project's seeds, kept outside this repository) build their layers
from torch.manual_seed(...) followed by nn.Linear / nn.Embedding initialisation. This
script does not read them: it replays those exact constructions, copied below (same
seeds, same creation order), and writes the inputs, the parameters and PyTorch's own
outputs as C arrays, so the test suite can check libsdpa's layer against them without
PyTorch installed. It is run by hand, not by the build:

    apt-get install python3-torch      # Debian's PyTorch (1.13 when written)
    /usr/bin/python3 tools/gen-seed-vectors.py > tests/data/seed_vectors.h

The notebooks' printed tables are checked in tests/test_seeds.c against these outputs
and against libsdpa; this script only asserts that PyTorch reproduces them too.
"""
import sys

import torch
import torch.nn as nn

torch.set_printoptions(precision=4)
out = []


def emit(name, t):
    flat = t.detach().reshape(-1).tolist()
    body = ", ".join(f"{v!r}f" if v != int(v) else f"{v:.1f}f" for v in flat)
    out.append(f"static const float {name}[{len(flat)}] = {{{body}}};")


def linear_params(prefix, lin):
    emit(prefix + "_w", lin.weight)
    if lin.bias is not None:
        emit(prefix + "_b", lin.bias)


SENTENCE = torch.tensor([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                         [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]])
emit("seed_sentence", SENTENCE)

# Seed 003, SelfAttention_v2 (manual_seed 789, d_in 3, d_out 2, no bias): context
# vectors, its attention weights, and the causal weights built from the same Q and K.
torch.manual_seed(789)
q, k, v = (nn.Linear(3, 2, bias=False) for _ in range(3))
linear_params("s003_sa_q", q)
linear_params("s003_sa_k", k)
linear_params("s003_sa_v", v)
Q, K, V = q(SENTENCE), k(SENTENCE), v(SENTENCE)
W = torch.softmax(Q @ K.T / 2 ** 0.5, dim=-1)
emit("s003_sa_context", W @ V)
emit("s003_sa_weights", W)
causal = torch.triu(torch.ones(6, 6), diagonal=1).bool()
emit("s003_sa_causal_weights", torch.softmax((Q @ K.T).masked_fill(causal, -torch.inf) / 2 ** 0.5, dim=-1))

batch = torch.stack((SENTENCE, SENTENCE), dim=0)

# Seed 003, MultiHeadAttentionWrapper (manual_seed 123): two CausalAttention heads, each
# creating W_query, W_key, W_value = Linear(3, 2, bias=False); outputs concatenated.
torch.manual_seed(123)
heads = [[nn.Linear(3, 2, bias=False) for _ in range(3)] for _ in range(2)]
for name, idx in (("q", 0), ("k", 1), ("v", 2)):
    emit(f"s003_wrap_{name}_w", torch.cat([heads[h][idx].weight for h in range(2)], dim=0))
ctx = []
for h in range(2):
    Qh, Kh, Vh = (heads[h][i](batch) for i in range(3))
    s = (Qh @ Kh.transpose(1, 2)).masked_fill(causal, -torch.inf)
    ctx.append(torch.softmax(s / 2 ** 0.5, dim=-1) @ Vh)
emit("s003_wrap_context", torch.cat(ctx, dim=-1))

# Seed 003, MultiHeadAttention (manual_seed 123, d_in 3, d_out 2, 2 heads of dim 1):
# W_query, W_key, W_value (no bias), then out_proj = Linear(2, 2) with bias.
torch.manual_seed(123)
q, k, v = (nn.Linear(3, 2, bias=False) for _ in range(3))
o = nn.Linear(2, 2)
for n_, l_ in (("q", q), ("k", k), ("v", v), ("o", o)):
    linear_params(f"s003_mha_{n_}", l_)
Qh = q(batch).view(2, 6, 2, 1).transpose(1, 2)
Kh = k(batch).view(2, 6, 2, 1).transpose(1, 2)
Vh = v(batch).view(2, 6, 2, 1).transpose(1, 2)
s = (Qh @ Kh.transpose(2, 3)).masked_fill(causal, -torch.inf)
c = (torch.softmax(s / 1 ** 0.5, dim=-1) @ Vh).transpose(1, 2).reshape(2, 6, 2)
emit("s003_mha_context", o(c))

# Seed 000, SelfAttention and CausalSelfAttention (manual_seed 789, din = dout = 3, no
# bias, dropout 0): non-causal weights; causal weights and context vectors.
torch.manual_seed(789)
q, k, v = (nn.Linear(3, 3, bias=False) for _ in range(3))
for n_, l_ in (("q", q), ("k", k), ("v", v)):
    linear_params(f"s000_{n_}", l_)
Q, K, V = q(SENTENCE), k(SENTENCE), v(SENTENCE)
emit("s000_weights", torch.softmax(Q @ K.T / 3 ** 0.5, dim=-1))
Wc = torch.softmax((Q @ K.T).masked_fill(causal, -torch.inf) / 3 ** 0.5, dim=-1)
emit("s000_causal_weights", Wc)
emit("s000_causal_context", Wc @ V)

# Seed 004, MultiHeadAttention(8, 2) with biases and W_o, no mask: first on
# torch.rand(1, 3, 8) (manual_seed 42), then on the embeddings of "she loves cats"
# (manual_seed 42, Embedding(4, 8) created first).
for tag in ("rand", "cats"):
    torch.manual_seed(42)
    if tag == "rand":
        x = torch.rand(1, 3, 8)
    else:
        emb = nn.Embedding(4, 8)
        x = emb(torch.tensor([[0, 1, 2]]))
    q, k, v, o = (nn.Linear(8, 8) for _ in range(4))
    emit(f"s004_{tag}_x", x)
    for n_, l_ in (("q", q), ("k", k), ("v", v), ("o", o)):
        linear_params(f"s004_{tag}_{n_}", l_)
    Qh, Kh, Vh = (l_(x).view(1, -1, 2, 4).transpose(1, 2) for l_ in (q, k, v))
    P = torch.softmax(Qh @ Kh.transpose(-2, -1) / torch.sqrt(torch.tensor(4.0)), dim=-1)
    emit(f"s004_{tag}_weights", P)
    emit(f"s004_{tag}_output", o((P @ Vh).transpose(1, 2).reshape(1, -1, 8)))

print("/* seed_vectors.h - generated by tools/gen-seed-vectors.py from PyTorch "
      f"{torch.__version__}; do not edit.\n * Inputs, parameters (nn.Linear layout) and PyTorch's "
      "outputs of the seed notebooks' layers. */")
print("\n".join(out))
