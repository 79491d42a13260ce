"""bench/goals.py: issue 17's verdicts from a side-by-side run's folder, checked on the runs
committed under bench/reports (whose READMEs give the same verdicts worked out by hand)."""

import copy
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import goals  # noqa: E402

REPORTS = ROOT / "bench" / "reports"


def verdicts(folder):
    return {g["goal"].split(":")[0]: g for g in goals.goals(folder)}


def by_prefix(result, prefix):
    (goal,) = [g for name, g in result.items() if name.startswith(prefix)]
    return goal


def test_run_19_misses_only_the_28k_read_in_a_row():
    result = verdicts(REPORTS / "h100-side-by-side-19")
    assert not by_prefix(result, "28k first read (long-first)")["met"]
    assert by_prefix(result, "28k first read (long-first)")["beats_vllm"]
    assert [g["met"] for name, g in result.items() if "long-first" not in name] == [True] * 4
    assert "2.18x (short-sweep rate 100/s, p50)" in by_prefix(result, "every scenario")["figure"]
    assert "16.13 against 2 x 3.025 + 13.29 = 19.34" in by_prefix(result, "p99")["figure"]


def test_run_17_misses_only_p99_at_64_clients():
    result = verdicts(REPORTS / "h200-side-by-side-17")
    assert [name for name, g in result.items() if not g["met"]] == [
        "p99 at 64 clients < 2 x single p50 + one pass"]


def test_a_scenario_under_2x_fails_the_first_goal(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(REPORTS / "h100-side-by-side-19", folder,
                    ignore=shutil.ignore_patterns("probes", "vllm", "settle"))
    report = json.loads((folder / "side_by_side.json").read_text())
    for row in report["runs"]:
        if row["run"] == "multi16-cold":
            row["decide_lead"] = {"throughput": 1.9, "p50": 1.9, "p99": 1.8}
    (folder / "side_by_side.json").write_text(json.dumps(report))
    first = by_prefix(verdicts(folder), "every scenario")
    assert not first["met"] and first["failing"] == ["multi16-cold"]


def test_sweep_rates_vllm_cannot_keep_count_as_met_and_rates_decide_cannot_keep_are_left_out():
    row = {"decide": {"units_per_s": 1600.0}, "vllm": {"units_per_s": 1291.0},
           "decide_lead": {"throughput": 1.24, "p50": 61.4}}
    rows = [dict(copy.deepcopy(row), run="short-sweep rate 1600/s"),
            {"run": "short-sweep rate 6400/s", "decide": {"units_per_s": 4925.0}, "vllm": None,
             "decide_lead": None}]
    assert goals.scenario_leads(rows) == [
        ("short-sweep rate 1600/s", None, "vLLM falls behind the offered rate, decide keeps it")]
