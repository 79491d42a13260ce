#!/usr/bin/env python3
"""Compares two `decide eval --answers` files question by question (two formats of one model,
say): per readout, questions answered correctly by each, how many top answers (and, for the
permutation readout, per-order tops) are the same, the largest and median difference of any
option's probability, and the questions whose top answer differs.

    python3 bench/compare_answers.py A.jsonl B.jsonl
"""
import json
import sys


def load(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows[(r["readout"], r["id"])] = r
    return rows


def main() -> int:
    a, b = load(sys.argv[1]), load(sys.argv[2])
    if a.keys() != b.keys():
        print("the files do not hold the same questions and readouts", file=sys.stderr)
        return 1
    for readout in sorted({k[0] for k in a}):
        keys = [k for k in a if k[0] == readout]
        answered = [k for k in keys if "top" in a[k] and "top" in b[k]]
        correct = [sum(x[k].get("top") == x[k]["expected"] for k in keys) for x in (a, b)]
        same = sum(a[k]["top"] == b[k]["top"] for k in answered)
        orders = ""
        if any(a[k].get("shift_top") for k in answered):
            same_orders = sum(a[k]["shift_top"] == b[k]["shift_top"] for k in answered)
            orders = f"; same per-order tops {same_orders}"
        diffs = sorted(max(abs(x - y) for x, y in zip(a[k]["probabilities"], b[k]["probabilities"]))
                       for k in answered)
        print(f"{readout}: {len(keys)} questions, {len(answered)} answered by both; correct {correct[0]} "
              f"vs {correct[1]}; same top {same}{orders}; "
              f"|probability difference| max {diffs[-1]:.4f}, median {diffs[len(diffs) // 2]:.4f}")
        for k in answered:
            if a[k]["top"] != b[k]["top"]:
                pa, pb = a[k]["probabilities"], b[k]["probabilities"]
                print(f"  {k[1]}: top {a[k]['top']} vs {b[k]['top']} (expected {a[k]['expected']}); "
                      f"those two options {pa[a[k]['top']]:.3f}/{pa[b[k]['top']]:.3f} vs "
                      f"{pb[a[k]['top']]:.3f}/{pb[b[k]['top']]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
