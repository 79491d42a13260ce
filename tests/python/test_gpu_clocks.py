"""bench/gpu_clocks.py's energy per unit, on run 20's committed clock samples and reports."""

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import gpu_clocks  # noqa: E402

SIDE = ROOT / "bench" / "reports" / "h100-side-by-side-20" / "side"


def test_energy_is_mean_power_times_the_window_over_the_units():
    start = datetime(2026, 12, 6, 8, 0, 0)
    end = start + timedelta(seconds=10)
    assert gpu_clocks.joules_per_unit(650.0, start, end, 40) == 162.5
    assert gpu_clocks.joules_per_unit(650.0, start, end, None) is None
    assert gpu_clocks.joules_per_unit(None, start, end, 40) is None


def sample(second, power, energy_mj):
    at = datetime(2026, 12, 6, 8, 0, 0) + timedelta(seconds=second)
    return (at, 1600.0, power, "0x4", 60.0, energy_mj)


def test_mean_power_comes_from_the_energy_counter_where_samples_carry_it():
    # The moments' power.draw says 100 and 700 W; the counter rose 1,300 J in 2 s.
    counted = [sample(0, 100.0, 5_000_000.0), sample(1, 700.0, 5_600_000.0),
               sample(2, 700.0, 6_300_000.0)]
    assert gpu_clocks.mean_power(counted) == 650.0
    uncounted = [s[:5] + (None,) for s in counted]
    assert gpu_clocks.mean_power(uncounted) == 500.0
    assert gpu_clocks.mean_power([]) is None


def test_run_20s_28k_reads_in_a_row_took_about_156_joules_each():
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_clocks.py"),
         str(SIDE / "decide-gpu-clocks-long-first.csv"), str(SIDE / "decide-times.txt")],
        capture_output=True, text=True, check=True).stdout
    (line,) = [l for l in out.splitlines() if "long-first" in l]
    assert line.endswith("156 J a unit"), line
