"""bench/pick_settings.py: the GPU settings an H200 lease's decide phase runs with, picked from
probes in the formats kernel_check and forward_bench write (run 11's reports show them)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import pick_settings  # noqa: E402

OK_CHECKS = """\
qkv_rope q (half, d=128)                         max |diff| 0.01423 (max |ref| 4.632) ok
attention (WgmmaSpecialized+tma): 300 rows after pieces 1500 + 1300 + 1100 max |diff| 0.00100 (max |ref| 0.300) ok
  same in the other block order                  max |diff| 0.00000 (max |ref| 0.300) ok
attention (WgmmaSpecialized+tma+longest-first): 1x3 over 28256 max |diff| 0.00049 (max |ref| 0.180) ok
  same in the other block order                  max |diff| 0.00000 (max |ref| 0.180) ok
  1x3 over 28256, WgmmaSpecialized+tma: 0.050 ms, 10.4 TFLOP/s
"""


def probes(tmp_path, checks=OK_CHECKS, finished=True, **long_runs):
    """A probes folder: kernel-check.txt (and .json when it finished), and per variant
    (underscores for dashes) forward-<variant>.json with those runs."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "kernel-check.txt").write_text(checks)
    if finished:
        (tmp_path / "kernel-check.json").write_text("[]\n")
    for variant, runs in long_runs.items():
        report = {"prefill_long_tokens": 28259, "prefill_long_ms": runs, "prefill_long_ms_p50": sorted(runs)[len(runs) // 2]}
        (tmp_path / f"forward-{variant.replace('_', '-')}.json").write_text(json.dumps(report))
    return tmp_path


SERVED = [244.0, 245.0, 246.0, 247.0, 250.0]
# A variant's runs well below SERVED's: it wins.
FASTER = [230.0, 231.0, 232.0, 233.0, 234.0]


def pick_after_failing(tmp_path, line, **long_runs):
    """pick_settings.pick on probes whose kernel_check printed `line` (a FAILED one) besides
    the passing checks, and the as-served prefill with `long_runs`."""
    return pick_settings.pick(probes(tmp_path, checks=OK_CHECKS + line + "\n", long=SERVED, **long_runs))


def test_no_setting_beats_the_defaults_by_more_than_the_drift(tmp_path):
    d = probes(tmp_path, long=SERVED, long_again=[243.5, 244.0, 245.5, 246.0, 249.0],
               long_longest_first=[243.0, 244.0, 244.8, 246.0, 249.0])
    settings, reasons = pick_settings.pick(d)
    assert settings == {}
    assert any("longest-first" in r and "no gain" in r for r in reasons)


def test_the_best_opt_in_alone_and_a_winning_revert(tmp_path):
    d = probes(tmp_path, long=SERVED, long_again=SERVED,
               long_longest_first=[238.0, 239.0, 240.0, 241.0, 242.0],
               long_pool_keep=[241.0, 242.0, 242.5, 243.0, 250.0],
               long_residual_in_gemm=[244.0, 245.0, 246.0, 247.0, 250.0],
               long_no_pieces=[240.0, 241.0, 242.0, 243.0, 244.0])
    settings, _ = pick_settings.pick(d)
    assert settings == {"DECIDE_ATTENTION_LONGEST_FIRST": "1", "DECIDE_KV_PIECES": "0"}


def test_all_three_opt_ins_only_when_together_they_beat_each(tmp_path):
    each = dict(long_longest_first=[238.0, 239.0, 240.0, 241.0, 242.0],
                long_pool_keep=[240.0, 241.0, 242.0, 243.0, 244.0],
                long_residual_in_gemm=[239.0, 240.0, 241.0, 242.0, 243.0])
    together = pick_settings.pick(probes(tmp_path / "a", long=SERVED, long_all=FASTER, **each))[0]
    assert together == {"DECIDE_ATTENTION_LONGEST_FIRST": "1", "DECIDE_RESIDUAL_IN_GEMM": "1", "DECIDE_CUDA_POOL_KEEP": "1"}
    worse = pick_settings.pick(probes(tmp_path / "b", long=SERVED, long_all=[239.0, 240.0, 241.0, 242.0, 243.0], **each))[0]
    assert worse == {"DECIDE_ATTENTION_LONGEST_FIRST": "1"}


def test_failing_kernels_turn_their_setting_off_and_nothing_on(tmp_path):
    checks = OK_CHECKS.replace("(max |ref| 0.300) ok", "(max |ref| 0.300) FAILED", 1)
    d = probes(tmp_path, checks=checks, finished=True, long=SERVED,
               long_longest_first=FASTER)
    settings, reasons = pick_settings.pick(d)
    assert settings == {"DECIDE_KV_PIECES": "0"}
    assert any("failing kernels" in r for r in reasons)
    # An order mismatch is the longest-first order's: it goes off everywhere (the attention
    # plan turns it on by itself), the rest as it was.
    order = OK_CHECKS.replace("(max |ref| 0.180) ok", "(max |ref| 0.180) FAILED")
    settings, _ = pick_settings.pick(probes(tmp_path / "order", checks=order, long=SERVED))
    assert settings == {"DECIDE_ATTENTION_LONGEST_FIRST": "0"}


def test_the_legacy_plan_is_a_revert_like_the_others(tmp_path):
    d = probes(tmp_path, long=SERVED, long_legacy_plan=[238.0, 239.0, 240.0, 241.0, 242.0])
    assert pick_settings.pick(d)[0] == {"DECIDE_ATTENTION_PLAN": "0"}


def test_kernel_check_unfinished_turns_the_pieces_off(tmp_path):
    d = probes(tmp_path, finished=False, long=SERVED, long_pool_keep=FASTER)
    assert pick_settings.pick(d)[0] == {"DECIDE_KV_PIECES": "0"}


def test_a_failure_no_setting_covers_writes_no_env_file(tmp_path):
    checks = OK_CHECKS.replace("(max |ref| 4.632) ok", "(max |ref| 4.632) FAILED")
    d = probes(tmp_path, checks=checks, long=SERVED)
    env = tmp_path / "settings.env"
    run = subprocess.run([sys.executable, str(ROOT / "bench/pick_settings.py"), str(d), "--env", str(env)],
                         capture_output=True, text=True)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "qkv_rope" in run.stdout
    assert not env.exists()


def test_the_env_file_sets_what_was_picked(tmp_path):
    d = probes(tmp_path, long=SERVED, long_remainder_last=[238.0, 239.0, 240.0, 241.0, 242.0])
    env = tmp_path / "settings.env"
    run = subprocess.run([sys.executable, str(ROOT / "bench/pick_settings.py"), str(d), "--env", str(env)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert env.read_text() == "DECIDE_PREFILL_REMAINDER_FIRST=0\n"


def test_a_failing_tma_store_epilogue_stays_off_and_the_rest_goes_on(tmp_path):
    settings, reasons = pick_after_failing(
        tmp_path, "gate_up_silu (1029 rows, TMA store)              max |diff| 9.00000 (max |ref| 17.750) FAILED", long_gate_up_tma_store=FASTER)
    assert settings == {}
    assert any("DECIDE_GATE_UP_TMA_STORE stays off" in r for r in reasons)


def test_a_failing_overlapped_epilogue_is_turned_off(tmp_path):
    settings, reasons = pick_after_failing(
        tmp_path, "gate_up_silu (1029 rows, overlapped) = plain     max |diff| 0.01000 (max |ref| 17.750) FAILED", long_gate_up_bands_2048=FASTER)
    assert settings == {"DECIDE_GATE_UP_OVERLAP": "0"}
    assert any("DECIDE_GATE_UP_OVERLAP =0" in r for r in reasons)


def test_the_overlapped_epilogue_is_reverted_when_the_prefill_is_faster_without(tmp_path):
    d = probes(tmp_path, long=SERVED, long_no_overlap=FASTER)
    assert pick_settings.pick(d)[0] == {"DECIDE_GATE_UP_OVERLAP": "0"}


def test_the_bands_are_reverted_when_the_prefill_is_faster_without(tmp_path):
    d = probes(tmp_path, long=SERVED, long_no_bands=FASTER)
    assert pick_settings.pick(d)[0] == {"DECIDE_GATE_UP_BAND_ROWS": "0"}


def test_failing_bands_are_turned_off(tmp_path):
    settings, reasons = pick_after_failing(
        tmp_path, "gate_up_silu (1000 rows, overlapped, bands of 512) = plain max |diff| 0.01000 (max |ref| 17.750) FAILED", long_gate_up_bands_2048=FASTER)
    assert settings == {"DECIDE_GATE_UP_BAND_ROWS": "0"}
    assert any("DECIDE_GATE_UP_BAND_ROWS =0" in r for r in reasons)


def test_faster_smaller_bands_go_on(tmp_path):
    d = probes(tmp_path, long=SERVED, long_no_bands=[236.0, 237.0, 238.0, 239.0, 240.0],
               long_gate_up_bands_2048=FASTER)
    assert pick_settings.pick(d)[0] == {"DECIDE_GATE_UP_BAND_ROWS": "2048"}


def test_a_failing_case_no_setting_covers_stops_the_pick(tmp_path):
    line = "attention (Keys64): 3 rows after 4000 cached (split) max |diff| 0.90000 (max |ref| 0.494) FAILED"
    with pytest.raises(pick_settings.BrokenKernels, match="no setting turns off"):
        pick_after_failing(tmp_path, line)
