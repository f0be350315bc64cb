#!/usr/bin/python3
"""bench-plot - draws a bench JSON file (`make bench` writes build/bench.json) as a PNG:
GFLOP/s per shape and variant, one panel for 1 thread and one for all cores, on a log
scale (the suite spans 1 to hundreds of GFLOP/s), with each ISA's measured FMA peak at
that thread count drawn as a dashed line in the ISA's colour.

    tools/bench-plot.py [build/bench.json [build/bench.png]]      (`make plot`)

Needs matplotlib from Debian (apt-get install python3-matplotlib), hence the shebang on
Debian's python3 rather than whichever python3 is first in PATH. It draws what the file
holds; it does not run or judge anything.
"""
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from benchjson import load  # noqa: E402

# Colour per variant; an ISA's peak line uses its variant's colour.
COLOURS = {"avx512": "#1f77b4", "avx2": "#2ca02c", "neon": "#17becf", "scalar": "#ff7f0e",
           "openblas": "#9467bd", "reference": "#7f7f7f"}
ORDER = ["avx512", "avx2", "neon", "scalar", "openblas", "reference"]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "build/bench.json"
    dst = sys.argv[2] if len(sys.argv) > 2 else "build/bench.png"
    ctx, rows = load(src)
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    variants = [v for v in ORDER if any(r["variant"] == v for r in rows)]
    variants += sorted({r["variant"] for r in rows} - set(variants))
    counts = sorted({r["threads"] for r in rows})
    by_key = {(r["shape"], r["variant"], r["threads"]): r for r in rows}

    fig, axes = plt.subplots(1, len(counts), figsize=(7.5 * len(counts), 6), squeeze=False)
    width = 0.8 / len(variants)
    for ax, t in zip(axes[0], counts):
        for vi, v in enumerate(variants):
            xs, ys = [], []
            for si, s in enumerate(shapes):
                r = by_key.get((s, v, t))
                if r and r["gflops"]:
                    xs.append(si - 0.4 + width * (vi + 0.5))
                    ys.append(r["gflops"])
            if not xs:
                continue
            ax.bar(xs, ys, width, label=v, color=COLOURS.get(v, "#000000"))
            for x, y in zip(xs, ys):
                ax.text(x, y * 1.05, f"{y:.3g}", ha="center", va="bottom", fontsize=7,
                        rotation=90)
        for v in variants:
            peak = ctx.get(f"peak_gflops_{v}_threads{t}")
            if peak:
                ax.axhline(float(peak), color=COLOURS.get(v, "#000000"), linestyle="--",
                           linewidth=1.2, label=f"{v} FMA peak {float(peak):.0f}")
        ax.set_yscale("log")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=30, ha="right")  # ten names side by side
        ax.set_ylabel("GFLOP/s (log scale)")
        ax.set_title(f"{t} thread{'s' if t > 1 else ''}")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", ncol=3)
        ax.set_ylim(top=ax.get_ylim()[1] * 6)  # room for the labels and the legend
    fig.suptitle(f"libsdpa {ctx.get('sdpa_version', '?')} ({ctx.get('sdpa_suite', '?')} suite), "
                 f"{ctx.get('num_cpus', '?')} CPUs, {ctx.get('date', '')[:10]}: "
                 f"GFLOP/s = 2(Dk+Dv) per visible score / median time")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
