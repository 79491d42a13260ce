#!/usr/bin/env python3
"""A model of how the attention kernel's blocks fill an H200 over a chunked causal prefill,
in both block orders (`block_place` in models/kernels/attention_common.cuh): head by head,
and longest first across heads.

Why a model: the order's effect on the 28k-token prefill is a few percent of its attention,
within the spread of one GPU run, and it comes from the tail of each launch (the last wave
holding long blocks beside idle multiprocessors). The model isolates that tail. Its
assumptions: one block per multiprocessor (the warp-specialized kernel's 161 KiB of shared
memory), blocks started in launch order on whichever multiprocessor frees first, a block's
time proportional to its key tiles plus `--overhead` tiles (prologue and epilogue), and the
key split that kernels.rs `key_splits` picks. It says nothing about L2 or clocks.

    python3 bench/attention_schedule.py [--tokens 28259] [--chunk 8192] [--overhead 0] [--json FILE]

Prints, per order, the modelled time (in key tiles of one block) against the ideal (every
multiprocessor busy to the end), summed over the chunks of the prefill.
"""

import argparse
import heapq
import json

MULTIPROCESSORS = 132
BLOCK_ROWS = 128  # WG_BM
TILE_KEYS = 128  # WG_BN


def key_splits(blocks, key_tiles, row_heads, per_sm=1):
    """kernels.rs `key_splits` (its key tiles are 64 columns wide)."""
    resident = per_sm * MULTIPROCESSORS
    if blocks >= 4 * resident or key_tiles < 16:
        return 1

    def cost(s):
        waves = -(-(blocks * s) // resident)
        return waves * -(-key_tiles // s) + (s - 1) * row_heads / 12_000

    return min(range(1, min(key_tiles // 8, 64) + 1), key=lambda s: (cost(s), s))


def launch(start, rows, heads, order, overhead):
    """(modelled time, ideal time, splits) of one chunk's attention launch: `rows` causal
    rows after `start` cached ones."""
    blocks = -(-rows // BLOCK_ROWS)
    splits = key_splits(blocks * heads, -(-(start + rows) // 64), rows * heads)
    # Row blocks from the last, as the kernel takes them.
    if order == "head-by-head":
        seq = [(blocks - 1 - x, z) for z in range(splits) for _ in range(heads) for x in range(blocks)]
    else:
        seq = [(blocks - 1 - x, z) for z in range(splits) for x in range(blocks) for _ in range(heads)]
    work = []
    for r, z in seq:
        tiles = -(-(start + min((r + 1) * BLOCK_ROWS, rows)) // TILE_KEYS)
        work.append(tiles * (z + 1) // splits - tiles * z // splits + overhead)
    free = [0.0] * MULTIPROCESSORS
    for w in work:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free), sum(work) / MULTIPROCESSORS, splits


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=28_259)
    p.add_argument("--chunk", type=int, default=8192, help="FUSED_PREFILL_MAX_CHUNK")
    p.add_argument("--heads", type=int, default=12, help="query heads (q15: 12)")
    p.add_argument("--overhead", type=float, default=0.0, help="a block's fixed cost, in key tiles")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    report = {"tokens": a.tokens, "chunk": a.chunk, "heads": a.heads, "overhead": a.overhead}
    for order in ("head-by-head", "longest-first"):
        start, total, ideal, splits = 0, 0.0, 0.0, []
        while start < a.tokens:
            rows = min(a.chunk, a.tokens - start)
            t, i, s = launch(start, rows, a.heads, order, a.overhead)
            total, ideal = total + t, ideal + i
            splits.append(s)
            start += rows
        print(f"{order:14s} modelled {total:8.1f} ideal {ideal:8.1f} ({ideal / total:.1%} of ideal; key splits per chunk {splits})")
        report[order] = {"modelled": total, "ideal": ideal, "efficiency": ideal / total, "splits": splits}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
