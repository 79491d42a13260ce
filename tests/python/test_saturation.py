"""bench/saturation.py: the load generator's side of a saturation window, from its timeline."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import saturation  # noqa: E402


def report(ended, origin=1000.0):
    return {"timeline": {"start_unix_s": origin, "bucket_ms": 100, "units_ended": ended}}


def test_counts_only_the_buckets_inside_the_window():
    # Two buckets before the load, then 500 units per 100 ms, one stalled bucket.
    r = report([0, 0, 500, 500, 0, 500, 500, 500])
    got = saturation.loadgen_in_window(r, 1000.15, 1000.85)  # buckets 2 to 7
    assert got == {"loadgen_units_per_s_in_window": 4166.7, "loadgen_empty_buckets_in_window": 1}
    # A window opened before the load counts its empty buckets.
    early = saturation.loadgen_in_window(r, 999.95, 1000.45)
    assert early["loadgen_empty_buckets_in_window"] == 2


def test_no_timeline_no_figures():
    assert saturation.loadgen_in_window({}, 0.0, 1.0) == {}
    assert saturation.loadgen_in_window(report([5, 5]), 2000.0, 2001.0) == {}
