#!/usr/bin/env python3
"""The 28k prefill's variants side by side: reads the forward-<variant>.json reports that the
probes phase of bench/h200_side_by_side.sh writes (forward_bench `long`: five timed runs
each) and prints one Markdown row per variant: its sorted runs, p50, minimum, and both against
the first variant (as served).

    python3 bench/forward_long_table.py PROBES_DIR [--json FILE]

Why: the lease's decision (which opt-in settings become the default) rests on these figures,
and one lease's spread between two runs of one binary is a few ms (run 11: 244.3 and 238.6 ms
minimum against 259.4 maximum), so both the p50 and the minimum are shown, and `long-again`
(as served, run last) says how far the same binary moved within the probe.
"""

import argparse
import json
from pathlib import Path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("probes", type=Path)
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    rows = []
    for path in sorted(a.probes.glob("forward-long*.json"), key=lambda f: (f.stem != "forward-long", f.stem)):
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            print(f"{path.name}: no report (see {path.with_suffix('.err').name})")
            continue
        runs = report.get("prefill_long_ms") or []
        if not runs:
            continue
        rows.append({"variant": path.stem.removeprefix("forward-"), "runs": runs,
                     "p50": runs[len(runs) // 2], "min": min(runs)})
    if not rows:
        print("no forward-long*.json reports")
        return
    base = rows[0]
    print("| variant | sorted runs (ms) | p50 | min | p50 vs as served | min vs as served |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        r["p50_delta"] = r["p50"] - base["p50"]
        r["min_delta"] = r["min"] - base["min"]
        print(f"| {r['variant']} | {', '.join(f'{x:.1f}' for x in r['runs'])} | {r['p50']:.1f} | {r['min']:.1f}"
              f" | {r['p50_delta']:+.1f} | {r['min_delta']:+.1f} |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
