#!/usr/bin/env python3
"""Issue 17's goals, each with its figure and verdict, from one side-by-side run's report folder.

    python3 bench/goals.py bench/reports/h100-side-by-side-19 [--json DIR/goals.json]

Reads what bench/h200_side_by_side.sh and bench/side_by_side.py leave in the folder:
side_by_side.json (both servers' runs and decide's leads), side/decide-short-c1.json and
side/decide-short-c64.json (latency percentiles), saturation-c*.json (bench/saturation.py:
decisions per second against the roofline, milliseconds per batch). Prints one line per goal
and writes them as JSON. Standard library only.

Why a script: each run's verdicts were worked out by hand from five files (a bound here is
2 x one report's p50 plus another's ms_per_batch), and a closing note must list every goal
with its figure; the same arithmetic every time, from the files, leaves less to get wrong.

The goals (issue 17, "Goals"):
- every scenario at least 2x vLLM's throughput or at most 0.5x its latency, except the 28k
  first read (long-first, long-spaced). A sweep rate that vLLM does not sustain (it answers
  under 95% of the offered rate) while decide does counts as met; rates neither sustains are
  left out;
- the 28k first read beats vLLM's and takes at most ~235 ms, both for 64 reads in a row
  (long-first) and for reads one a second (long-spaced), each reported;
- short prompts at saturation: at least 60% of the roofline for the computed tokens (the best
  of the saturation runs);
- p99 at 64 clients below 2 x the single-request p50 plus one pass (saturation-c64's
  ms_per_batch).
"""
import argparse
import json
from pathlib import Path

LONG_READ_MS = 235.0
LEAD = 2.0
ROOFLINE_SHARE = 0.60
SUSTAINED = 0.95
LONG_RUNS = ("long-first", "long-spaced")
ROOFLINE_GOAL = "short prompts at saturation >= 60% of the roofline"
P99_GOAL = "p99 at 64 clients < 2 x single p50 + one pass"


def offered_rate(run: str):
    """The offered rate of a sweep point's run name ('short-sweep rate 1600/s'), else None."""
    if " rate " not in run:
        return None
    return float(run.rsplit(" ", 1)[1].removesuffix("/s"))


def scenario_leads(runs: list) -> list:
    """[(run, lead, how)] for every scenario the first goal covers: the larger of the
    throughput and p50 leads; `how` says which, or why a run counts without one."""
    out = []
    for row in runs:
        run = row["run"]
        if run in LONG_RUNS:
            continue
        rate = offered_rate(run)
        ours, theirs, lead = row["decide"], row["vllm"], row["decide_lead"] or {}
        if rate is not None:
            ours_keeps = ours["units_per_s"] >= SUSTAINED * rate
            theirs_keeps = theirs is not None and theirs["units_per_s"] >= SUSTAINED * rate
            if not ours_keeps:
                continue
            if not theirs_keeps:
                out.append((run, None, "vLLM falls behind the offered rate, decide keeps it"))
                continue
            out.append((run, lead.get("p50"), "p50"))
            continue
        if theirs is None:
            continue
        throughput, p50 = lead.get("throughput") or 0.0, lead.get("p50") or 0.0
        out.append((run, max(throughput, p50), "throughput" if throughput >= p50 else "p50"))
    return out


def goals(folder: Path) -> list:
    """[{goal, figure, met}] for the run in `folder`."""
    runs = json.loads((folder / "side_by_side.json").read_text())["runs"]
    by_run = {row["run"]: row for row in runs}
    result = []

    leads = scenario_leads(runs)
    scored = [(run, lead, how) for run, lead, how in leads if lead is not None]
    worst = min(scored, key=lambda x: x[1]) if scored else None
    failing = [run for run, lead, _ in scored if lead < LEAD]
    result.append({
        "goal": "every scenario >=2x vLLM's throughput or <=0.5x its latency (but the 28k read)",
        "figure": (f"smallest lead {worst[1]:.2f}x ({worst[0]}, {worst[2]}) over {len(leads)} scenarios"
                   if worst else "no scenario with both servers"),
        "failing": failing,
        "met": bool(scored) and not failing,
    })

    for run in LONG_RUNS:
        row = by_run.get(run)
        if row is None or row["vllm"] is None:
            result.append({"goal": f"28k first read ({run})", "figure": "not run by both", "met": False})
            continue
        ours, theirs = row["decide"]["p50_ms"], row["vllm"]["p50_ms"]
        result.append({
            "goal": f"28k first read ({run}) beats vLLM and takes <= {LONG_READ_MS:g} ms",
            "figure": f"{ours:.1f} ms p50 against vLLM's {theirs:.1f} ({theirs / ours:.2f}x)",
            "beats_vllm": ours < theirs,
            "within_bound": ours <= LONG_READ_MS,
            "met": ours < theirs and ours <= LONG_READ_MS,
        })

    saturation = []
    for path in sorted(folder.glob("saturation-c*.json")):
        report = json.loads(path.read_text())
        if report.get("of_roofline") is not None:
            saturation.append((report["of_roofline"], report))
    if saturation:
        share, best = max(saturation, key=lambda x: x[0])
        result.append({
            "goal": ROOFLINE_GOAL,
            "figure": (f"{share:.1%} at {best['clients']} clients ({best['decisions_per_s']:.0f}/s "
                       f"of {best['roofline_decisions_per_s']:.0f})"),
            "met": share >= ROOFLINE_SHARE,
        })
    else:
        result.append({"goal": ROOFLINE_GOAL, "figure": "no saturation report", "met": False})

    single = json.loads((folder / "side" / "decide-short-c1.json").read_text())
    c64 = json.loads((folder / "side" / "decide-short-c64.json").read_text())
    sat64 = folder / "saturation-c64.json"
    if sat64.exists():
        one_pass = json.loads(sat64.read_text())["ms_per_batch"]
        p50 = single["latency_ms"]["unit"]["p50"]
        p99 = c64["latency_ms"]["unit"]["p99"]
        bound = 2 * p50 + one_pass
        result.append({
            "goal": P99_GOAL,
            "figure": f"{p99:.2f} against 2 x {p50:.3f} + {one_pass:.2f} = {bound:.2f} ms",
            "met": p99 < bound,
        })
    else:
        result.append({"goal": P99_GOAL, "figure": "no saturation-c64.json (one pass)", "met": False})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path, help="default: FOLDER/goals.json")
    args = parser.parse_args()
    result = goals(args.folder)
    for goal in result:
        print(f"{'met' if goal['met'] else 'NOT MET':8} {goal['goal']}: {goal['figure']}")
        for run in goal.get("failing") or []:
            print(f"{'':8}   under 2x: {run}")
    (args.json or args.folder / "goals.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{sum(g['met'] for g in result)} of {len(result)} goals met")


if __name__ == "__main__":
    main()
