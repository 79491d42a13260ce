#!/usr/bin/env python3
"""Which GPU settings the decide phase of an H200 lease runs with, picked from the same
lease's probes: kernel_check's verdicts (kernel-check.txt) and forward_bench's 28k prefill
with each setting (forward-long*.json), as bench/h200_side_by_side.sh's `probes` writes them.

    python3 bench/pick_settings.py PROBES_DIR [--env FILE] [--json FILE]

Why a script: a lent GPU machine is given back 30 s after a call ends, and with it everything
landed on it, so there is no time to read the probes and choose by hand between the probes
call and the decide call. The decide and ab phases take the result with SETTINGS=auto.

The rules, written down so a reader of the report knows what ran:
- A setting whose kernels failed a kernel_check case is never turned on, and a default-on
  setting whose kernels failed is turned off (DECIDE_KV_PIECES=0 when a case over a cache in
  pieces failed, DECIDE_ATTENTION_TMA=0 when a +tma case failed). A failure outside what a
  setting can turn off: exit 3, no env file; the decide phase must not run on broken kernels.
- kernel_check that did not finish (no kernel-check.json: it crashed, hung or was not run):
  the cache pieces and their several tensor maps, session 25's unmeasured default, are turned
  off (DECIDE_KV_PIECES=0) and nothing is turned on.
- A setting wins when its p50 is below the as-served p50 by more than the margin and its
  fastest run is below the as-served fastest too. The as-served figure is the better of
  `long` and `long-again` (run first and last); the margin is 1 ms or the gap between those
  two, whichever is more (one lease's drift).
- Reverting a default (no-pieces, remainder-last, unaligned, legacy-plan, no-overlap, no-bands)
  applies when the revert wins. Of the opt-in variants that win, one alone is turned on: the
  one with the lowest p50. A variant may be several settings at once (`long-all`:
  longest-first, residual-in-gemm and pool-keep), so settings that help together are picked
  together only when the prefill measured them together.
Exit 0 with the env file written (possibly empty: the defaults), 3 as above, 2 on bad usage.
"""

import argparse
import json
import re
import sys
from pathlib import Path

# forward-long-<variant>.json: what the variant runs with ({variable: value}), and whether it
# reverts a default.
VARIANTS = {
    "long-no-pieces": ({"DECIDE_KV_PIECES": "0"}, "revert"),
    "long-remainder-last": ({"DECIDE_PREFILL_REMAINDER_FIRST": "0"}, "revert"),
    "long-unaligned": ({"DECIDE_PREFILL_ALIGN": "0"}, "revert"),
    "long-legacy-plan": ({"DECIDE_ATTENTION_PLAN": "0"}, "revert"),
    "long-longest-first": ({"DECIDE_ATTENTION_LONGEST_FIRST": "1"}, "opt-in"),
    "long-residual-in-gemm": ({"DECIDE_RESIDUAL_IN_GEMM": "1"}, "opt-in"),
    "long-pool-keep": ({"DECIDE_CUDA_POOL_KEEP": "1"}, "opt-in"),
    "long-all": ({"DECIDE_ATTENTION_LONGEST_FIRST": "1", "DECIDE_RESIDUAL_IN_GEMM": "1",
                  "DECIDE_CUDA_POOL_KEEP": "1"}, "opt-in"),
    "long-gate-up-tma-store": ({"DECIDE_GATE_UP_TMA_STORE": "1"}, "opt-in"),
    "long-no-overlap": ({"DECIDE_GATE_UP_OVERLAP": "0"}, "revert"),
    "long-no-bands": ({"DECIDE_GATE_UP_BAND_ROWS": "0"}, "revert"),
    "long-gate-up-bands-2048": ({"DECIDE_GATE_UP_BAND_ROWS": "2048"}, "opt-in"),
}
MIN_MARGIN_MS = 1.0


def kernel_verdicts(probes: Path):
    """(finished, failed case names): the checks kernel-check.txt printed, each failing one
    named after the case it belongs to (a 'same in the other block order' line belongs to
    the case printed before it)."""
    text = probes / "kernel-check.txt"
    finished = (probes / "kernel-check.json").is_file()
    failed, case = [], ""
    if text.is_file():
        for line in text.read_text(errors="replace").splitlines():
            verdict = re.search(r"\s(ok|FAILED)$", line)
            if not verdict or "max |diff|" not in line:
                continue
            name = line.split(" max |diff|")[0].strip()
            if line.startswith(" "):
                name = f"{case}: {name}"
            else:
                case = name
            if verdict.group(1) == "FAILED":
                failed.append(name)
    return finished, failed


# Default-on settings a failing kernel_check case turns off (the value that does). The
# longest-first order is on where the attention plan finds it shorter (models/src/
# attention_plan.rs); =0 turns it off everywhere. The gate/up kernel's overlapped epilogue is
# on by default since session 31, its bands of 4,096 rows since session 32.
TURNED_OFF = {"DECIDE_KV_PIECES": "0", "DECIDE_ATTENTION_TMA": "0", "DECIDE_ATTENTION_LONGEST_FIRST": "0",
              "DECIDE_GATE_UP_OVERLAP": "0", "DECIDE_GATE_UP_BAND_ROWS": "0"}


def kernel_setting(case: str):
    """The setting whose kernels a failing case ran (None when no setting takes them out of
    the server): a default-off one then stays off, a default-on one is turned off."""
    if "TMA store" in case:
        return "DECIDE_GATE_UP_TMA_STORE"
    if "bands of" in case:
        return "DECIDE_GATE_UP_BAND_ROWS"
    if "overlapped" in case:
        return "DECIDE_GATE_UP_OVERLAP"
    if "longest-first" in case or "other block order" in case:
        return "DECIDE_ATTENTION_LONGEST_FIRST"
    if "pieces" in case or re.search(r"after \d+ \+ \d+", case):
        return "DECIDE_KV_PIECES"
    if "+tma" in case:
        return "DECIDE_ATTENTION_TMA"
    return None


class BrokenKernels(Exception):
    """kernel_check failed a case that no setting takes out: `reasons` say which."""

    def __init__(self, reasons):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def prefill_runs(probes: Path):
    """variant -> sorted runs (ms) of forward-long*.json ('long' is as served)."""
    runs = {}
    for path in probes.glob("forward-long*.json"):
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if report.get("prefill_long_ms"):
            runs[path.stem.removeprefix("forward-")] = sorted(report["prefill_long_ms"])
    return runs


def p50(runs):
    return runs[len(runs) // 2]


def pick(probes: Path):
    """(settings {variable: value}, reasons [str]); raises BrokenKernels."""
    reasons, settings, banned = [], {}, set()
    finished, failed = kernel_verdicts(probes)
    for case in failed:
        var = kernel_setting(case)
        if var is None:
            reasons.append(f"kernel_check failed '{case}', which no setting turns off")
            raise BrokenKernels(reasons)
        banned.add(var)
        if var in TURNED_OFF:
            settings[var] = TURNED_OFF[var]
        reasons.append(f"kernel_check failed '{case}': {var} {'=' + TURNED_OFF[var] if var in TURNED_OFF else 'stays off'}")
    if failed:
        reasons.append("the timed figures ran on failing kernels: no more settings")
        return settings, reasons
    if not finished:
        settings["DECIDE_KV_PIECES"] = "0"
        reasons.append("kernel_check did not finish (no kernel-check.json): DECIDE_KV_PIECES=0, no opt-ins")
        return settings, reasons

    runs = prefill_runs(probes)
    served = [runs[v] for v in ("long", "long-again") if v in runs]
    if not served:
        reasons.append("no as-served 28k prefill (forward-long.json): the defaults")
        return settings, reasons
    base_p50 = min(p50(r) for r in served)
    base_min = min(r[0] for r in served)
    margin = max(MIN_MARGIN_MS, max(p50(r) for r in served) - base_p50)
    reasons.append(f"as served: p50 {base_p50:.1f} ms, fastest {base_min:.1f} ms; margin {margin:.1f} ms")

    def wins(variant):
        r = runs.get(variant)
        if not r:
            return False
        won = p50(r) < base_p50 - margin and r[0] < base_min
        reasons.append(f"{variant}: p50 {p50(r):.1f}, fastest {r[0]:.1f}: {'wins' if won else 'no gain'}")
        return won

    opt_ins = []
    for variant, (values, kind) in VARIANTS.items():
        if banned & values.keys() or not wins(variant):
            continue
        if kind == "revert":
            settings.update(values)
        else:
            opt_ins.append(variant)
    chosen = sorted(opt_ins, key=lambda v: p50(runs[v]))[:1]
    for variant in chosen:
        settings.update(VARIANTS[variant][0])
    reasons.append("opt-in: " + (", ".join(chosen) if chosen else "none"))
    return settings, reasons


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("probes", type=Path)
    p.add_argument("--env", help="write VAR=VALUE lines here (for `set -a; . FILE`)")
    p.add_argument("--json", help="write the settings and the reasons here")
    a = p.parse_args()
    if not a.probes.is_dir():
        print(f"{a.probes}: not a directory", file=sys.stderr)
        sys.exit(2)
    try:
        settings, reasons = pick(a.probes)
    except BrokenKernels as broken:
        settings, reasons = None, broken.reasons
    for r in reasons:
        print(r)
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": settings, "reasons": reasons}, indent=1) + "\n")
    if settings is None:
        print("no settings: look at kernel-check.txt before running decide")
        sys.exit(3)
    line = " ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    print(f"settings: {line or '(the defaults)'}")
    if a.env:
        Path(a.env).write_text("".join(f"{k}={v}\n" for k, v in sorted(settings.items())))


if __name__ == "__main__":
    main()
