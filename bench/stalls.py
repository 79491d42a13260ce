#!/usr/bin/env python3
"""When a loadgen run's slow requests ended, and what the host's CPUs did then.

    python3 bench/stalls.py REPORT.json [REPORT.json ...] [--host-cpu host-cpu.txt]
        [--slow-ms N] [--json FILE]

Reads the `timeline` of decide-loadgen reports (per 100 ms of the recorded window: units
ended, the slowest one's latency; loadgen/src/timeline.rs) and, with --host-cpu, the /proc/stat
samples bench/h200_side_by_side.sh writes every 500 ms (host-cpu.txt). Prints per report: how
many 100 ms buckets held a unit slower than --slow-ms (default: 2 x the run's p50 + 5 ms), how
they are spread (one burst, or evenly over the window), the slowest buckets with their UTC time,
and the host's busy and stolen cores over the run and around each slow bucket.

Why: run 12's p99 at 64 clients was 43.8 ms against 18.0 in run 11 with an unchanged p50, on a
new host, on both servers. A tail made of a few stalls that every client sees at once points at
the machine (a virtual machine's stolen time, the driver's lock); a tail spread evenly over the
run points at the scheduler (batches split into cohorts).
"""

import argparse
import json
from datetime import datetime, timezone

TICKS_PER_S = 100  # USER_HZ: /proc/stat counts in 1/100 s on Linux


def host_samples(path):
    """[(unix time, busy ticks, steal ticks, iowait ticks, total ticks)] from host-cpu.txt."""
    samples = []
    with open(path) as lines:
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[1] != "cpu":
                continue
            ticks = [int(t) for t in parts[2:12]]
            user, nice, system, idle, iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
            busy = user + nice + system + irq + softirq
            samples.append((float(parts[0]), busy, steal, iowait, sum(ticks[:8])))
    return samples


def cores_between(samples, start, end):
    """Mean busy and stolen cores between the samples around [start, end], or None."""
    inside = [s for s in samples if start - 0.5 <= s[0] <= end + 0.5]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    seconds = last[0] - first[0]
    if seconds <= 0:
        return None
    per_core_s = TICKS_PER_S * seconds
    return {
        "busy_cores": round((last[1] - first[1]) / per_core_s, 2),
        "steal_cores": round((last[2] - first[2]) / per_core_s, 2),
        "iowait_cores": round((last[3] - first[3]) / per_core_s, 2),
        "cores": round((last[4] - first[4]) / per_core_s, 1),
    }


def utc(unix):
    return datetime.fromtimestamp(unix, timezone.utc).strftime("%H:%M:%S.%f")[:-5]


def stalls(report_path, samples, slow_ms):
    report = json.load(open(report_path))
    timeline = report.get("timeline")
    if not timeline:
        return {"report": report_path, "error": "no timeline (a loadgen from before run 13)"}
    unit = (report.get("latency_ms") or {}).get("unit") or {}
    p50 = unit.get("p50", 0.0)
    threshold = slow_ms if slow_ms is not None else 2 * p50 + 5
    start, width = timeline["start_unix_s"], timeline["bucket_ms"] / 1000
    buckets = list(zip(timeline["units_ended"], timeline["slowest_ms"]))
    slow = [i for i, (n, worst) in enumerate(buckets) if n and worst > threshold]
    # Runs of adjacent slow buckets: one stall spans a few.
    bursts = []
    for i in slow:
        if bursts and i == bursts[-1][-1] + 1:
            bursts[-1].append(i)
        else:
            bursts.append([i])
    result = {
        "report": report_path,
        "p50_ms": p50,
        "p99_ms": unit.get("p99"),
        "max_ms": unit.get("max"),
        "slow_ms": round(threshold, 2),
        "buckets": len(buckets),
        "slow_buckets": len(slow),
        "bursts": len(bursts),
        "window_utc": [utc(start), utc(start + width * len(buckets))],
        "host": cores_between(samples, start, start + width * len(buckets)) if samples else None,
        "slowest": [],
    }
    for i in sorted(slow, key=lambda i: -buckets[i][1])[:10]:
        at = start + i * width
        entry = {
            "utc": utc(at),
            "offset_s": round(i * width, 1),
            "units_ended": buckets[i][0],
            "slowest_ms": buckets[i][1],
        }
        if samples:
            entry["host"] = cores_between(samples, at - buckets[i][1] / 1000, at + width)
        result["slowest"].append(entry)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--host-cpu")
    parser.add_argument("--slow-ms", type=float)
    parser.add_argument("--json")
    args = parser.parse_args()
    samples = host_samples(args.host_cpu) if args.host_cpu else []
    results = [stalls(path, samples, args.slow_ms) for path in args.reports]
    for r in results:
        if "error" in r:
            print(f"{r['report']}: {r['error']}")
            continue
        print(
            f"{r['report']}: p50 {r['p50_ms']} p99 {r['p99_ms']} max {r['max_ms']} ms; "
            f"{r['slow_buckets']} of {r['buckets']} 100-ms buckets held a unit over "
            f"{r['slow_ms']} ms, in {r['bursts']} bursts ({r['window_utc'][0]}-{r['window_utc'][1]} UTC)"
        )
        if r["host"]:
            print(f"  host over the run: {r['host']}")
        for s in r["slowest"]:
            host = f"  host {s['host']}" if s.get("host") else ""
            print(
                f"  {s['utc']} (+{s['offset_s']} s): {s['units_ended']} ended, "
                f"slowest {s['slowest_ms']} ms{host}"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
