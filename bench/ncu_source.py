#!/usr/bin/env python3
"""Summarizes Nsight Compute's source page of one kernel launch (`ncu --page source
--print-source sass --csv`, as `bench/kernel_lease.sh ncu-source` writes it; .xz read too):
the warp stall samples by reason over the whole kernel, the instructions that hold the most
samples with their two main reasons, and every mbarrier wait (SYNCS.PHASECHK...TRYWAIT) with
how often it ran and how many samples the branch after it holds (a wait not done at its first
try loops back through a retry block, so those samples are warps waiting for the barrier).

    python3 bench/ncu_source.py bench/reports/h200-side-by-side-17/ncu/ncu-attention-source.csv.xz [--top 20]
"""

import argparse
import collections
import csv
import lzma
from pathlib import Path


def rows(path: Path):
    """(header, instruction rows) of the CSV's source table."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", errors="replace") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address","Source"'))
    table = list(csv.reader(lines[start:]))
    header = table[0]
    return header, [r for r in table[1:] if len(r) == len(header)]


def count(value: str) -> int:
    try:
        return int(value.replace(",", ""))
    except ValueError:
        return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--top", type=int, default=20, help="instructions to list (default 20)")
    a = p.parse_args()
    header, data = rows(a.csv)
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    base = int(data[0][col["Address"]], 16)

    def offset(r):
        return int(r[col["Address"]], 16) - base

    samples = sum(count(r[col["# Samples"]]) for r in data)
    executed = sum(count(r[col["Instructions Executed"]]) for r in data)
    print(f"{len(data)} instructions, {executed:,} warp instructions executed, {samples:,} samples")
    totals = collections.Counter()
    for r in data:
        for h in reasons:
            totals[h] += count(r[col[h]])
    for h, n in totals.most_common():
        if n:
            print(f"  {h:28s} {n:8,d}  {n / samples:6.1%}")

    print(f"\nthe {a.top} instructions with the most samples (offset from the kernel's start):")
    for r in sorted(data, key=lambda r: -count(r[col["# Samples"]]))[: a.top]:
        top = sorted(((count(r[col[h]]), h) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{h.removeprefix('stall_')} {n}" for n, h in top if n)
        print(f"  {offset(r):#7x} {count(r[col['# Samples']]):7,d}  {r[col['Source']].strip()[:60]:60s} {why}")

    print("\nmbarrier waits: executed, and the samples of the branch after each (waiting):")
    for i, r in enumerate(data):
        source = r[col["Source"]]
        if "TRYWAIT" not in source:
            continue
        branch = next((b for b in data[i + 1 : i + 8] if "BRA" in b[col["Source"]]), None)
        waited = count(branch[col["# Samples"]]) if branch else 0
        print(f"  {offset(r):#7x} executed {count(r[col['Instructions Executed']]):11,d}  "
              f"samples after {waited:7,d}  {source.strip()[:60]}")


if __name__ == "__main__":
    main()
