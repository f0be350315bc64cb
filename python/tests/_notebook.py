"""Reading the seed notebooks (../shared/seeds/*.txt) for the tests: cells, their printed
outputs, the numbers in printed tensors, and running the cells.

A seed is a notebook exported as text: "In [n]:" opens a code cell, the code follows,
then (after a blank line) what the cell printed, then markdown until the next "In [...]".
The split between code and output is found by parsing: a block joins the code while the
code still parses and the block is not a printed value (a bare ``tensor(...)``,
``array(...)``, ``torch.Size(...)`` or literal, which no code cell writes as a
statement). This is test support, not part of the package.
"""
from __future__ import annotations

import ast
import contextlib
import io
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import numpy as np

_CELL = re.compile(r"^In \[([0-9 ]*|None)\]:\s*$", re.M)


@dataclass
class Cell:
    label: str  # "In [12]"; labels may repeat in a notebook
    code: str
    output: str  # printed text and any markdown up to the next cell


def _blocks(text: str) -> List[str]:
    """Paragraphs: runs of lines separated by lines that are blank once stripped."""
    blocks, cur = [], []
    for line in text.split("\n"):
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            blocks.append("\n".join(cur))
            cur = []
    if cur:
        blocks.append("\n".join(cur))
    return blocks


def _parses(src: str) -> Optional[ast.Module]:
    try:
        return ast.parse(src)
    except SyntaxError:
        return None


def _literalish(node: ast.AST) -> bool:
    """A printed value: constants, tuples/lists of them, tensor(...)/array(...) or
    torch.Size(...) calls."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in ("inf", "nan")
    if isinstance(node, ast.UnaryOp):
        return _literalish(node.operand)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_literalish(e) for e in node.elts)
    if isinstance(node, ast.Call):
        f = node.func
        named = (isinstance(f, ast.Name) and f.id in ("tensor", "array")) or \
            (isinstance(f, ast.Attribute) and f.attr == "Size")
        return named and all(_literalish(a) for a in node.args)
    return False


def _is_output(block: str) -> bool:
    tree = _parses(block)
    if tree is None:
        return True
    # "context_vecs.shape: torch.Size([2, 6, 2])" printed by a cell parses as an
    # annotation without a value, which no code cell writes.
    return bool(tree.body) and all(
        (isinstance(s, ast.Expr) and _literalish(s.value))
        or (isinstance(s, ast.AnnAssign) and s.value is None) for s in tree.body)


def read_cells(path: Path) -> List[Cell]:
    text = path.read_text()
    marks = list(_CELL.finditer(text))
    cells = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        blocks = _blocks(text[m.end():end])
        code: List[str] = []
        j = 0
        while j < len(blocks):
            # A statement may span a blank line (a bracket left open across it), so a
            # block is tried with up to 3 of the blocks after it.
            taken = 0
            for n in range(1, 5):
                group = "\n\n".join(blocks[j:j + n])
                if not _parses("\n\n".join(code + [group])):
                    continue
                if j == 0 or group[:1] in (" ", "\t") or not _is_output(group):
                    taken = n
                break
            if not taken:
                break
            code.append("\n\n".join(blocks[j:j + taken]))
            j += taken
        rest = j
        cells.append(Cell(f"In [{m.group(1)}]", "\n\n".join(code),
                          "\n\n".join(blocks[rest:])))
    return cells


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan")


def _tensor_spans(text: str) -> List[str]:
    """The bracketed bodies of every tensor(...) / array(...) in printed text."""
    spans = []
    for m in re.finditer(r"\b(tensor|array)\(", text):
        start = text.find("[", m.end() - 1)
        if start < 0:
            continue
        depth = 0
        for k in range(start, len(text)):
            if text[k] == "[":
                depth += 1
            elif text[k] == "]":
                depth -= 1
                if depth == 0:
                    spans.append(text[start:k + 1])
                    break
    return spans


def printed_tensors(text: str) -> List[np.ndarray]:
    """Every printed tensor/array as (values, half a unit in the last printed digit),
    stacked as a 2 x N array per tensor."""
    out = []
    for span in _tensor_spans(text):
        vals, units = [], []
        for tok in _NUMBER.findall(span):
            vals.append(float(tok))
            mant, _, exp = tok.lower().partition("e")
            decimals = len(mant.split(".")[1]) if "." in mant else 0
            units.append(0.5 * 10.0 ** (int(exp or 0) - decimals) if "n" not in mant else 0.0)
        out.append(np.array([vals, units], dtype=np.float64))
    return out


def exec_cell(code: str, ns: Dict, swap: Optional["Swap"] = None) -> None:
    """Run a cell as a notebook does: the value of a final bare expression is shown."""
    tree = ast.parse(code)
    if swap is not None:
        tree = ast.fix_missing_locations(swap.visit(tree))
        ns[Swap.NAME] = swap.wrap_one
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr):
        tree.body.pop()
        exec(compile(tree, "<cell>", "exec"), ns)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns)
        if value is not None:
            print(repr(value))
    else:
        exec(compile(tree, "<cell>", "exec"), ns)


class Swap(ast.NodeTransformer):
    """The one-line swap a user makes, applied to the cells' source: every top-level
    construction ``Name(...)`` of a listed class becomes ``wrap(Name(...))``
    (libsdpa.MultiHeadAttention.from_torch). Constructions inside class and function
    bodies are left alone, so the CausalAttention heads that MultiHeadAttentionWrapper
    builds stay torch modules, and ``super(MultiHeadAttention, self)`` still names the
    class."""

    NAME = "__libsdpa_swap__"

    def __init__(self, names: Set[str], wrap: Callable) -> None:
        self.names, self.wrap, self.made = set(names), wrap, []

    def wrap_one(self, module: Any) -> Any:
        layer = self.wrap(module)
        self.made.append(layer)
        return layer

    def visit_FunctionDef(self, node: ast.AST) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.names:
            return ast.Call(func=ast.Name(id=self.NAME, ctx=ast.Load()), args=[node],
                            keywords=[])
        return node


def run(cells: List[Cell], swap: Optional[Swap] = None) -> Tuple[List[str], Dict]:
    """Run every cell in one namespace; returns what each printed, and the namespace."""
    ns: Dict = {"__name__": "__notebook__"}
    printed = []
    with warnings.catch_warnings():
        for cell in cells:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec_cell(cell.code, ns, swap)
            printed.append(buf.getvalue())
    return printed, ns
