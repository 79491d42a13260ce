#!/usr/bin/env python3
"""Splits decide's own labelled question set into the tuning set and the held-out test.

The questions (1,274 over 488 input texts, 25 domains, written for this project by its
developers in five batches: support, work, tech, world, life) live in two files:

  calibration/tune.jsonl     four fifths of the groups: what `decide tune` and startup tuning
                             measure renderers, label schemes and readouts on;
  calibration/heldout.jsonl  the other fifth: never used for selection or fitting, only to
                             report how the chosen setup does (bench/reports/quality/).

A group (one input text and its 2-4 questions) goes to the held-out fifth when it is among
the first 20% of groups ordered by sha256("decide-heldout:" + group): a fixed rule, so the
split is reproducible and no one picks which questions are held out. Re-running reads both
files (or calibration/sources/*.jsonl when present, the batches as written) and rewrites them.

Each line: {"id", "group", "domain", "difficulty", "state", "question", "expected"} in the
calibration file format (see engine/src/calibration/questions.rs).

Run: python3 scripts/split-dev-set.py
"""
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "calibration"
TUNE = ROOT / "tune.jsonl"
HELDOUT = ROOT / "heldout.jsonl"
HELD_OUT_SHARE = 0.2


def read(paths):
    lines = []
    for path in paths:
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                lines.append(json.loads(line))
    return lines


def main():
    sources = sorted((ROOT / "sources").glob("*.jsonl"))
    lines = read(sources if sources else [TUNE, HELDOUT])
    lines.sort(key=lambda q: q["id"])
    groups = sorted({q["group"] for q in lines},
                    key=lambda g: hashlib.sha256(f"decide-heldout:{g}".encode()).hexdigest())
    held = set(groups[: round(len(groups) * HELD_OUT_SHARE)])
    header = {
        TUNE: "# decide's tuning set (four fifths of the groups); written by scripts/split-dev-set.py",
        HELDOUT: "# decide's held-out test (one fifth of the groups): never used for selection or fitting;"
                 " written by scripts/split-dev-set.py",
    }
    for path, keep in [(TUNE, lambda q: q["group"] not in held), (HELDOUT, lambda q: q["group"] in held)]:
        chosen = [q for q in lines if keep(q)]
        body = "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in chosen)
        path.write_text(header[path] + "\n" + body)
        kinds = {}
        for q in chosen:
            kinds[q["question"]["type"]] = kinds.get(q["question"]["type"], 0) + 1
        print(f"{path.name}: {len(chosen)} questions, {len({q['group'] for q in chosen})} groups, {kinds}")


if __name__ == "__main__":
    main()
