#!/usr/bin/env python3
"""Pools the rounds of several `tandem bench coloc` runs of one load shape: the managed
trainer's p99 over serving alone's (ratio of medians), with a 90% bootstrap interval drawn
in pairs of rounds (`ratio_interval`, as compare_mlserver.py reports it), and the share of
resampled ratios at or under the goal's 1.07x.

    python3 benches/pool_coloc.py constant-1.json constant-2.json ...
    python3 benches/pool_coloc.py --recorded constant [more.json ...]

`--recorded SHAPE` adds the per-round figures of the three nine-round runs that
benches/README.md tables (commits fbfceed, c945b0c and 80f25bb), whose JSON files were not
kept; JSON files are `tandem bench coloc --json` output.
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

# (a) serving alone, (c) managed trainer: p99 per round in ms, as benches/README.md prints them.
RECORDED = {
    "constant": [
        ([3.1, 2.7, 1.8, 3.5, 5.1, 3.4, 4.3, 5.6, 5.0], [3.6, 5.6, 2.7, 3.3, 4.2, 3.0, 6.1, 3.7, 5.5]),
        ([1.8, 3.2, 3.8, 2.2, 2.1, 4.4, 2.9, 2.7, 2.8], [2.2, 2.0, 2.4, 5.2, 2.4, 6.5, 4.1, 4.0, 3.6]),
        ([3.5, 2.3, 2.3, 2.7, 2.7, 4.8, 3.9, 3.1, 3.7], [2.7, 3.0, 2.1, 4.1, 3.5, 4.6, 2.7, 3.7, 5.0]),
    ],
    "burst": [
        ([6.6, 5.6, 5.1, 3.8, 3.1, 2.8, 3.0, 3.8, 6.9], [7.6, 6.6, 4.0, 6.6, 7.5, 3.9, 4.3, 8.3, 9.6]),
        ([3.9, 4.9, 4.5, 3.1, 2.7, 3.5, 3.9, 3.9, 3.6], [7.1, 3.4, 4.2, 3.7, 4.7, 3.9, 4.0, 6.9, 2.9]),
        ([6.9, 3.9, 3.7, 4.7, 4.9, 4.6, 4.2, 4.6, 5.7], [7.8, 4.4, 6.0, 3.9, 6.7, 5.1, 5.2, 3.9, 4.7]),
    ],
}


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
    p.add_argument("--recorded", choices=sorted(RECORDED))
    p.add_argument("runs", nargs="*", help="`tandem bench coloc --json` files of one shape")
    args = p.parse_args()
    runs = list(RECORDED[args.recorded]) if args.recorded else []
    runs += [rounds_of(f) for f in args.runs]
    if not runs:
        p.error("no rounds: give JSON files or --recorded")
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
