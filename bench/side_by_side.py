#!/usr/bin/env python3
"""Combine bench/side_by_side.sh's loadgen reports for decide and vLLM into one report.

    bench/side_by_side.py OUT [--report OUT/side_by_side.json]

For every run both servers have (`decide-<run>.json`, `vllm-<run>.json`), it takes the
decisions per second and the unit latency percentiles of each, their ratios (decide's lead:
throughput decide/vLLM, latency vLLM/decide; above 1 means decide is ahead), and the load
generator's own ceiling measured beside each run. A sweep gives the same per offered rate.
Prints a table and writes the JSON report. Standard library only.
"""
import argparse
import json
from pathlib import Path


def figures(point: dict) -> dict:
    unit = (point.get("latency_ms") or {}).get("unit") or {}
    ceiling = point.get("ceiling") or {}
    return {"decisions_per_s": point["decisions_per_s"], "units_per_s": point["units_per_s"],
            "errors": point["errors"], "p50_ms": unit.get("p50"), "p99_ms": unit.get("p99"),
            "ceiling_requests_per_s": ceiling.get("requests_per_s"),
            "ceiling_sustained": ceiling.get("sustained")}


def lead(ours: dict, theirs: dict) -> dict:
    def ratio(a, b):
        return round(a / b, 3) if a and b else None
    return {"throughput": ratio(ours["decisions_per_s"], theirs["decisions_per_s"]),
            "p50": ratio(theirs["p50_ms"], ours["p50_ms"]), "p99": ratio(theirs["p99_ms"], ours["p99_ms"])}


def points(report: dict) -> dict:
    """{label: figures}: one for a single run, one per offered rate for a sweep."""
    if "points" in report:
        return {f"rate {p['rate']:g}/s": figures(p) for p in report["points"]}
    return {"": figures(report)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the directory side_by_side.sh wrote")
    parser.add_argument("--report", help="default: OUT/side_by_side.json")
    args = parser.parse_args()
    out = Path(args.out)
    rows = []
    for ours_path in sorted(out.glob("decide-*.json")):
        run = ours_path.stem.removeprefix("decide-")
        theirs_path = out / f"vllm-{run}.json"
        ours = points(json.loads(ours_path.read_text()))
        theirs = points(json.loads(theirs_path.read_text())) if theirs_path.exists() else {}
        for label, mine in ours.items():
            other = theirs.get(label)
            rows.append({"run": f"{run} {label}".strip(), "decide": mine, "vllm": other,
                         "decide_lead": lead(mine, other) if other else None})
    report = {"runs": rows}
    Path(args.report or out / "side_by_side.json").write_text(json.dumps(report, indent=1))
    # At a fixed offered rate (a sweep's points, long-spaced) both servers answer what is sent,
    # so the throughput lead is ~1 there and the latency leads are the ones to read.
    print(f"{'run':28} {'decide dec/s':>12} {'vLLM dec/s':>11} {'lead':>6} {'p50 ms d/v':>17} {'p50 lead':>8} {'p99 lead':>8} {'ceiling req/s':>13}")
    for row in rows:
        d, v, l = row["decide"], row["vllm"] or {}, row["decide_lead"] or {}
        p50 = f"{d['p50_ms'] or 0:.1f}/{v.get('p50_ms') or 0:.1f}"
        print(f"{row['run']:28} {d['decisions_per_s']:12.1f} {v.get('decisions_per_s', 0):11.1f} "
              f"{l.get('throughput') or '-':>6} {p50:>17} {l.get('p50') or '-':>8} {l.get('p99') or '-':>8} "
              f"{d['ceiling_requests_per_s'] or 0:13.0f}")


if __name__ == "__main__":
    main()
