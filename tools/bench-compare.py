#!/usr/bin/env python3
"""bench-compare - compares two bench JSON files (`make bench` writes build/bench.json),
case by case: before and after times, the speedup (before / after) and GFLOP/s, for
before/after checks of a change. Cases in only one file are listed, not compared.

    tools/bench-compare.py BEFORE.json AFTER.json [--fail-slower PCT]

--fail-slower PCT exits with status 1 if any case got more than PCT percent slower (a
regression gate for scripts; pick PCT above this machine's noise). Standard library only.
It compares numbers; it does not re-run anything nor judge noise.
"""
import argparse
import math
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from benchjson import load  # noqa: E402 (after the line above)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--fail-slower", type=float, metavar="PCT",
                    help="exit 1 if a case is more than PCT%% slower")
    args = ap.parse_args()
    _, a = load(args.before)
    _, b = load(args.after)
    after = {r["key"]: r for r in b}
    before_keys = {r["key"] for r in a}

    print(f"before: {args.before}\nafter:  {args.after}\n")
    print(f"{'case':36} {'before ms':>10} {'after ms':>10} {'speedup':>8} "
          f"{'GFLOP/s before':>15} {'after':>8}")
    logs, worst = [], None
    for r in a:
        s = after.get(r["key"])
        if s is None:
            continue
        speedup = r["ms"] / s["ms"]
        logs.append(math.log(speedup))
        if worst is None or speedup < worst[1]:
            worst = (r["key"], speedup)
        gb = f"{r['gflops']:.1f}" if r["gflops"] is not None else "-"
        ga = f"{s['gflops']:.1f}" if s["gflops"] is not None else "-"
        print(f"{r['key']:36} {r['ms']:10.4g} {s['ms']:10.4g} {speedup:7.2f}x {gb:>15} {ga:>8}")
    only_a = [r["key"] for r in a if r["key"] not in after]
    only_b = [r["key"] for r in b if r["key"] not in before_keys]
    if logs:
        print(f"\n{len(logs)} cases compared; geometric mean speedup "
              f"{math.exp(sum(logs) / len(logs)):.3f}x; slowest: {worst[0]} {worst[1]:.3f}x")
    else:
        print("\nno case is in both files")
    if only_a:
        print("only before: " + " ".join(only_a))
    if only_b:
        print("only after:  " + " ".join(only_b))
    if args.fail_slower is not None and worst and worst[1] < 1.0 / (1.0 + args.fail_slower / 100):
        print(f"FAIL: {worst[0]} is {100 * (1 / worst[1] - 1):.1f}% slower "
              f"(limit {args.fail_slower}%)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
