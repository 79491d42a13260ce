#!/usr/bin/env python3
"""Where short-prompt throughput goes at saturation: decide's worker and passes against the roofline.

    bench/saturation.py --url URL --workload decide-short.jsonl [--clients 64] [--seconds 8]
        [--warmup 2] [--params 1.31e9] [--peak-tflops 790] [--loadgen PATH] [--report saturation.json]

Runs decide-loadgen (closed loop, no ceiling run) against a running decide, reading /metrics
once its warm-up is over and decide is answering, and again at the end (so 1,024 clients
connecting and sending their first requests at once do not count), and prints:
- decisions/s and the compute roofline for the tokens the model computed per decision
  (prompt tokens read minus those served from the prefix cache, x 2 x params / peak), beside
  the load generator's own units/s over the same window (its timeline) and how many of its
  100-ms buckets there ended no request;
- how busy the model worker was (decide_model_busy_seconds_total over the run's wall time):
  below 1, the host side (HTTP, plugins, tokenization, batching) left the model waiting;
- the passes' own efficiency (computed FLOPs over the worker's busy time, against the peak),
  with batches per second, requests and computed tokens per batch, and ms per batch read.
  (decide_forward_passes_total is not used: it sums each request's passes, so a pass shared
  by a batch counts once per request in it.)
- the rejoin window's rounds (answered batches whose clients were all back within
  --batch-rejoin-us, and not) and the share of the wall time the worker waited in it;
- the CPU cores in use over the window: decide's (process_cpu_seconds_total), the load
  generator's (its rusage) and the whole machine's (/proc/stat, Linux), against the cores it
  has, and the cores the hypervisor took from a virtual machine (steal). A worker below 1 busy
  while the machine's cores are all in use (or stolen) points at the host side;
- the model worker's queue over the window (decide_queued_requests, sampled every
  --sample-ms): its mean, minimum and 10th percentile against the clients. Few jobs queued
  while the worker idles and most clients are connected means the requests are held up
  before the queue (HTTP, the request threads, rendering), not by the model;
- where the model worker's thread spent the window (Linux /proc/PID/task/TID/schedstat, when
  decide runs on this machine): on a core, waiting on a run queue for one (another thread had
  its core), or asleep (waiting for jobs or the GPU), with its involuntary context switches;
  and the answer thread's share of a core. Found by the thread names decide gives them
  ("decide-model", "decide-answers"), or in the process --pid names.
Standard library only.
"""
import argparse
import json
import os
import resource
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


def scrape(url: str) -> dict:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            values[name] = float(value)
    return values


def machine_cpu_seconds():
    """(busy, stolen): CPU seconds all cores spent outside idle and iowait, and the seconds a
    virtual machine's hypervisor took from them (steal), since boot (Linux), or None."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(f) for f in fields] + [0] * 8
    idle = ticks[3] + ticks[4]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle - ticks[7]) / hz, ticks[7] / hz


def wait_for_answers(url: str, limit_s: float) -> None:
    """Returns once decide answers requests (decide_answers_total grows within 100 ms), or
    after `limit_s`: the window must open on a loaded server. Kernel-lease-2 found two
    windows of 1,024 clients at ~50% of the roofline against ~63% in three others, with the
    same batches but the worker idle a fifth of the window and the load generator counting
    4,885/s over its own: most likely the window had opened before the load reached decide
    (not confirmed; the loadgen figures over the same window, below, will show it)."""
    deadline = time.monotonic() + limit_s
    last = scrape(url).get("decide_answers_total", 0.0)
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = scrape(url).get("decide_answers_total", 0.0)
        if now > last:
            return
        last = now


def loadgen_in_window(report: dict, start_unix: float, end_unix: float) -> dict:
    """From the load generator's timeline (units ended per 100 ms): its units per second over
    the 100-ms buckets inside [start_unix, end_unix], and how many of those buckets ended
    none (a stall every client saw, or no load yet)."""
    timeline = report.get("timeline") or {}
    ended, step = timeline.get("units_ended") or [], timeline.get("bucket_ms", 100) / 1e3
    origin = timeline.get("start_unix_s")
    if origin is None or not ended:
        return {}
    inside = [n for i, n in enumerate(ended) if start_unix <= origin + i * step and origin + (i + 1) * step <= end_unix]
    if not inside:
        return {}
    return {
        "loadgen_units_per_s_in_window": round(sum(inside) / (len(inside) * step), 1),
        "loadgen_empty_buckets_in_window": sum(1 for n in inside if n == 0),
    }


def sample_queue(url: str, every_s: float, stop: threading.Event, out: list) -> None:
    """Appends decide_queued_requests every `every_s` until `stop` is set."""
    while not stop.wait(every_s):
        try:
            out.append(scrape(url).get("decide_queued_requests", 0.0))
        except OSError:
            pass


THREADS = ("decide-model", "decide-answers")


def decide_pid():
    """The pid of the one process on this machine with a thread named decide-model, or None."""
    found = set()
    for comm in Path("/proc").glob("[0-9]*/task/*/comm"):
        try:
            if comm.read_text().strip() == THREADS[0]:
                found.add(int(comm.parts[2]))
        except OSError:
            pass
    return found.pop() if len(found) == 1 else None


def thread_sched(pid) -> dict:
    """Per named thread of `pid`: [on-CPU ns, run-queue wait ns, involuntary switches]."""
    out = {}
    if pid is None:
        return out
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            if name not in THREADS:
                continue
            run, wait, _ = ((task / "schedstat").read_text().split() + ["0", "0", "0"])[:3]
            status = (task / "status").read_text()
        except OSError:
            continue
        switches = next((int(line.split()[1]) for line in status.splitlines()
                         if line.startswith("nonvoluntary_ctxt_switches")), 0)
        out[name] = [int(run), int(wait), switches]
    return out


def sched_figures(before: dict, after: dict, wall: float) -> dict:
    """The model worker's on-CPU, run-queue and asleep shares of the window, and the answer
    thread's share of a core."""
    figures = {}
    if THREADS[0] in before and THREADS[0] in after:
        run, wait, switches = (a - b for a, b in zip(after[THREADS[0]], before[THREADS[0]]))
        figures["worker_on_cpu_fraction"] = round(run / 1e9 / wall, 3)
        figures["worker_runqueue_fraction"] = round(wait / 1e9 / wall, 3)
        figures["worker_asleep_fraction"] = round(max(0.0, 1 - (run + wait) / 1e9 / wall), 3)
        figures["worker_involuntary_switches_per_s"] = round(switches / wall, 1)
    if THREADS[1] in before and THREADS[1] in after:
        figures["answer_thread_cores"] = round((after[THREADS[1]][0] - before[THREADS[1]][0]) / 1e9 / wall, 3)
    return figures


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--warmup", type=float, default=2, help="seconds of load before the first /metrics read")
    parser.add_argument("--params", type=float, default=1.31e9, help="the model's parameters (q15: 1.31e9)")
    parser.add_argument("--peak-tflops", type=float, default=790, help="bf16 matmul peak (H200: 790)")
    parser.add_argument("--loadgen", default="target/release/decide-loadgen")
    parser.add_argument("--report", default="saturation.json")
    parser.add_argument("--sample-ms", type=float, default=50, help="how often the worker's queue is sampled")
    parser.add_argument("--pid", type=int, help="decide's pid (default: found by its worker thread's name)")
    args = parser.parse_args()
    pid = args.pid or decide_pid()

    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        run = subprocess.Popen([args.loadgen, "closed", "--url", args.url, "--workload", args.workload,
                                "--clients", str(args.clients), "--duration", str(args.seconds),
                                "--warmup", str(args.warmup), "--no-ceiling", "--report", out.name],
                               stdout=subprocess.DEVNULL)
        children_before = children_cpu_seconds()
        spawned = time.monotonic()
        time.sleep(args.warmup)
        wait_for_answers(args.url, 10.0)
        opened_after = time.monotonic() - spawned
        before, started, machine_before = scrape(args.url), time.monotonic(), machine_cpu_seconds()
        started_unix = time.time()
        sched_before = thread_sched(pid)
        queued, stop = [], threading.Event()
        sampler = threading.Thread(target=sample_queue, args=(args.url, args.sample_ms / 1e3, stop, queued))
        sampler.start()
        # The last responses come in after the window: read /metrics at its end.
        time.sleep(args.seconds)
        stop.set()
        sampler.join()
        wall, after, machine_after = time.monotonic() - started, scrape(args.url), machine_cpu_seconds()
        ended_unix = time.time()
        sched_after = thread_sched(pid)
        if run.wait() != 0:
            raise SystemExit(f"decide-loadgen failed ({run.returncode})")
        # The generator's rusage covers its whole run (warm-up and ramp included).
        loadgen_cores = (children_cpu_seconds() - children_before) / (time.monotonic() - spawned)
        loadgen = json.loads(Path(out.name).read_text())
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    missing = [k for k in ("decide_model_busy_seconds_total", "decide_answers_total") if k not in delta]
    if missing:
        raise SystemExit(f"/metrics lacks {missing}: a decide older than this script?")

    decisions = delta["decide_answers_total"]
    computed = delta["decide_input_tokens_total"] - delta["decide_prefix_cache_hit_tokens_total"]
    per_decision = computed / decisions if decisions else 0.0
    busy = delta["decide_model_busy_seconds_total"]
    batches = delta["decide_batches_total"]
    flops = 2 * args.params * computed
    roofline = args.peak_tflops * 1e12 / (2 * args.params * per_decision) if per_decision else 0.0
    figures = {
        "clients": args.clients,
        "wall_s": round(wall, 3),
        "decisions_per_s": round(decisions / wall, 1),
        "loadgen_decisions_per_s": loadgen.get("decisions_per_s"),
        **loadgen_in_window(loadgen, started_unix, ended_unix),
        "window_opened_after_s": round(opened_after, 2),
        "computed_tokens_per_decision": round(per_decision, 1),
        "roofline_decisions_per_s": round(roofline),
        "of_roofline": round(decisions / wall / roofline, 3) if roofline else None,
        "worker_busy_fraction": round(busy / wall, 3),
        "pass_tflops_while_busy": round(flops / busy / 1e12, 1) if busy else None,
        "pass_efficiency": round(flops / busy / 1e12 / args.peak_tflops, 3) if busy else None,
        "batches_per_s": round(batches / wall, 1),
        "requests_per_batch": round(delta["decide_batched_jobs_total"] / batches, 1) if batches else None,
        "computed_tokens_per_batch": round(computed / batches) if batches else None,
        "ms_per_batch": round(busy / batches * 1e3, 2) if batches else None,
        "rejoin_rounds_back": delta.get("decide_rejoin_rounds_back_total"),
        "rejoin_rounds_late": delta.get("decide_rejoin_rounds_late_total"),
        "rejoin_wait_fraction": round(delta["decide_rejoin_wait_seconds_total"] / wall, 3)
        if "decide_rejoin_wait_seconds_total" in delta else None,
        "queued_samples": len(queued),
        "queued_mean": round(sum(queued) / len(queued), 1) if queued else None,
        "queued_min": min(queued) if queued else None,
        "queued_p10": sorted(queued)[len(queued) // 10] if queued else None,
        "queued_max": max(queued) if queued else None,
        "cores": os.cpu_count(),
        "decide_cpu_cores": round(delta["process_cpu_seconds_total"] / wall, 2)
        if "process_cpu_seconds_total" in delta else None,
        "decide_cpu_ms_per_decision": round(delta["process_cpu_seconds_total"] / decisions * 1e3, 3)
        if "process_cpu_seconds_total" in delta and decisions else None,
        "loadgen_cpu_cores": round(loadgen_cores, 2),
        "machine_busy_cores": round((machine_after[0] - machine_before[0]) / wall, 2)
        if machine_before is not None and machine_after is not None else None,
        "machine_steal_cores": round((machine_after[1] - machine_before[1]) / wall, 3)
        if machine_before is not None and machine_after is not None else None,
        **sched_figures(sched_before, sched_after, wall),
    }
    Path(args.report).write_text(json.dumps(figures, indent=1))
    for key, value in figures.items():
        print(f"{key:32} {value}")


if __name__ == "__main__":
    main()
