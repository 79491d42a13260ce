#!/usr/bin/env python3
"""The GPU's SM clock and power during each benchmark run: joins gpu-clocks.csv (nvidia-smi
every GPU_CLOCKS_MS, written by bench/h200_side_by_side.sh) with the runs' start and end times
(`<server>-times.txt`, written by bench/side_by_side.sh).

    python3 bench/gpu_clocks.py GPU_CLOCKS_CSV TIMES_TXT [TIMES_TXT ...] [--json FILE]

Why: a long run of 28k reads may hold the GPU at its power limit and lower clocks, where
three single reads with pauses between them do not; this says whether it did, per run.
Prints per run: samples, median and lowest SM clock (MHz), median power (W), the GPU's
temperature at the first sample and its highest (C: a hotter chip leaks more of the capped
power, bench/gpu_settle.sh), and the throttle reasons seen (nvidia-smi's bit mask, e.g. 0x4
software power cap, 0x20 software thermal).
"""

import argparse
import csv
import json
import statistics
from datetime import datetime

TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"


def number(text):
    """'1980 MHz' or '512.34 W' -> float; None when nvidia-smi wrote no figure."""
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def samples(path):
    """[(time, sm MHz, power W, throttle mask, temperature C)] from nvidia-smi's CSV."""
    out = []
    with open(path) as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header is None:
            return out
        for row in rows:
            if len(row) < 6:
                continue
            try:
                at = datetime.strptime(row[0].strip(), TIME_FORMAT)
            except ValueError:
                continue
            out.append((at, number(row[1]), number(row[3]), row[5].strip(), number(row[4])))
    return out


def windows(path):
    """{run: (start, end)} from a times file's `TIME start NAME` / `TIME end NAME` lines."""
    starts, spans = {}, {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 4:
                continue
            at = datetime.strptime(f"{parts[0]} {parts[1]}", TIME_FORMAT)
            if parts[2] == "start":
                starts[parts[3]] = at
            elif parts[2] == "end" and parts[3] in starts:
                spans[parts[3]] = (starts.pop(parts[3]), at)
    return spans


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("clocks")
    p.add_argument("times", nargs="+")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args()
    data = samples(a.clocks)
    report = {}
    for times in a.times:
        server = times.rsplit("/", 1)[-1].removesuffix("-times.txt")
        for run, (start, end) in windows(times).items():
            inside = [s for s in data if start <= s[0] <= end]
            clocks = [s[1] for s in inside if s[1] is not None]
            power = [s[2] for s in inside if s[2] is not None]
            temperature = [s[4] for s in inside if s[4] is not None]
            if not clocks:
                continue
            entry = {
                "samples": len(inside),
                "sm_mhz_median": statistics.median(clocks),
                "sm_mhz_min": min(clocks),
                "power_w_median": statistics.median(power) if power else None,
                "throttle_reasons": sorted({s[3] for s in inside}),
                "temperature_c_first": temperature[0] if temperature else None,
                "temperature_c_max": max(temperature) if temperature else None,
            }
            report[f"{server} {run}"] = entry
            print(
                f"{server:6s} {run:14s} {entry['samples']:4d} samples  SM {entry['sm_mhz_median']:6.0f} MHz"
                f" (min {entry['sm_mhz_min']:4.0f})  power {entry['power_w_median'] or 0:5.0f} W"
                f"  {entry['temperature_c_first'] or 0:3.0f}-{entry['temperature_c_max'] or 0:3.0f} C"
                f"  throttle {','.join(entry['throttle_reasons'])}"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
