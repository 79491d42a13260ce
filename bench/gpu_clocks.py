#!/usr/bin/env python3
"""The GPU's SM clock and power during each benchmark run: joins gpu-clocks.csv (nvidia-smi
every GPU_CLOCKS_MS, written by bench/h200_side_by_side.sh) with the runs' start and end times
(`<server>-times.txt`, written by bench/side_by_side.sh).

    python3 bench/gpu_clocks.py GPU_CLOCKS_CSV TIMES_TXT [TIMES_TXT ...] [--json FILE]

Why: a long run of 28k reads may hold the GPU at its power limit and lower clocks, where
three single reads with pauses between them do not; this says whether it did, per run.
Prints per run: samples, median and lowest SM clock (MHz), median power (W), the GPU's
temperature at the first sample and its highest (C: a hotter chip leaks more of the capped
power, bench/gpu_settle.sh), the throttle reasons seen (nvidia-smi's bit mask, e.g. 0x4
software power cap, 0x20 software thermal), and where the run's report
(`<server>-<run>.json` beside the times file) says how many units it answered, the energy
per unit: the mean power times the run's window over its units (J). The mean power is exact
where the samples carry nvidia-smi's energy counter (bench/gpu_clock_sampler.sh since session
37: the counter's rise between the window's first and last samples over the time between
them), else the mean of the sampled moments' power.draw (rough at 1 s: the first sample is
often idle).

Why the energy: at the power cap a read in a row takes its energy over the capped power, so
its time follows the card (runs 17-20: 230.0-243.7 ms over five cards, same binaries) where
its joules are the work's own; a change that saves energy per read saves time on every
capped card.
"""

import argparse
import csv
import json
import statistics
from datetime import datetime
from pathlib import Path

TIME_FORMAT = "%Y/%m/%d %H:%M:%S.%f"


def number(text):
    """'1980 MHz' or '512.34 W' -> float; None when nvidia-smi wrote no figure."""
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def samples(path):
    """[(time, sm MHz, power W, throttle mask, temperature C, energy counter mJ or None)] from
    nvidia-smi's CSV."""
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
            energy = number(row[6]) if len(row) > 6 else None
            out.append((at, number(row[1]), number(row[3]), row[5].strip(), number(row[4]), energy))
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


def units(times_path, server, run):
    """The units the run answered, from its report beside the times file (None: no report)."""
    path = Path(times_path).parent / f"{server}-{run}.json"
    try:
        return json.loads(path.read_text()).get("units_ok")
    except (OSError, ValueError):
        return None


def mean_power(inside):
    """Watts over samples `inside` a window: from the energy counter when two samples carry it
    (exact between them), else the mean of their power.draw (None without either)."""
    counted = [(s[0], s[5]) for s in inside if s[5] is not None]
    if len(counted) >= 2 and counted[-1][0] > counted[0][0]:
        seconds = (counted[-1][0] - counted[0][0]).total_seconds()
        return (counted[-1][1] - counted[0][1]) / 1e3 / seconds
    power = [s[2] for s in inside if s[2] is not None]
    return statistics.fmean(power) if power else None


def joules_per_unit(watts, start, end, answered):
    """Mean power x the run's window, over the units answered (None without either)."""
    if not watts or not answered:
        return None
    return watts * (end - start).total_seconds() / answered


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
                "joules_per_unit": joules_per_unit(
                    mean_power(inside), start, end, units(times, server, run)
                ),
            }
            report[f"{server} {run}"] = entry
            print(
                f"{server:6s} {run:14s} {entry['samples']:4d} samples  SM {entry['sm_mhz_median']:6.0f} MHz"
                f" (min {entry['sm_mhz_min']:4.0f})  power {entry['power_w_median'] or 0:5.0f} W"
                f"  {entry['temperature_c_first'] or 0:3.0f}-{entry['temperature_c_max'] or 0:3.0f} C"
                f"  throttle {','.join(entry['throttle_reasons'])}"
                + (f"  {entry['joules_per_unit']:.0f} J a unit" if entry["joules_per_unit"] else "")
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
