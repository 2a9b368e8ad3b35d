#!/usr/bin/env python3
"""Pools the rounds of several `tandem-bench coloc` runs of one load shape: the managed
trainer's p99 over serving alone's (ratio of medians), with a 90% bootstrap interval drawn
in pairs of rounds (`ratio_interval`, as compare_mlserver.py reports it), and the share of
resampled ratios at or under the goal's 1.07x.

    python3 benches/pool_coloc.py constant-1.json constant-2.json ...

The files are `tandem-bench coloc --json` output of one load shape.
"""
import argparse
import json
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_mlserver import ratio_interval  # noqa: E402

GOAL = 1.07


def rounds_of(path):
    by_name = {s["name"][0]: s["p99_per_round_ms"] for s in json.load(open(path))["scenarios"]}
    return by_name["a"], by_name["c"]


def share_within_goal(top, bottom, resamples=4000, seed=7):
    rng = random.Random(seed)
    hits = 0
    for _ in range(resamples):
        idx = [rng.randrange(len(top)) for _ in top]
        b = statistics.median(bottom[i] for i in idx)
        hits += b > 0 and statistics.median(top[i] for i in idx) / b <= GOAL
    return hits / resamples


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+", help="`tandem-bench coloc --json` files of one shape")
    args = p.parse_args()
    runs = [rounds_of(f) for f in args.runs]
    alone = [v for a, _ in runs for v in a]
    managed = [v for _, c in runs for v in c]
    ratio = statistics.median(managed) / statistics.median(alone)
    lo, hi = ratio_interval(managed, alone)
    print(f"{len(alone)} rounds of {len(runs)} runs: managed p99 / alone {ratio:.2f}x "
          f"(90% interval {lo:.2f}-{hi:.2f}x); "
          f"{share_within_goal(managed, alone):.0%} of resamples at or under {GOAL}x")
    return 0 if math.isfinite(ratio) else 1


if __name__ == "__main__":
    sys.exit(main())
