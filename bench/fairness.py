#!/usr/bin/env python3
"""Fair share between tenants, measured against a running decide server; writes a JSON report.

    bench/fairness.py --url http://127.0.0.1:8000 --key-a KEY_A --key-b KEY_B \
        [--clients 64] [--samples 40] [--warmup 3] [--report bench/reports/NAME.json]

Tenant B's one sequential client sends `--samples` requests alone (after `--warmup`
unmeasured ones), then again while tenant A's `--clients` concurrent clients loop on the same
request. The figure is the ratio of B's p95 during A's flood to B's p95 alone, in one run, so a
slower or busier machine moves both; the issue asks for it to stay under 2. Also reported:
p50s, A's requests/s during the flood and alone (before B joins; what sharing costs A), and
B's requests/s.

The two keys are two tenants' API keys (create them with the admin API or `decide tenants`).
Standard library only, so it runs on a bare GPU machine. The request is tests/e2e/fairness.rs's:
a support ticket and two questions (`--questions N` asks N instead, over a longer ticket).
"""
import argparse
import json
import math
import statistics
import threading
import time
import urllib.error
import urllib.request

TICKET = ("Ticket 4471: the customer ordered a standing desk on May 2nd, paid by card, and says the "
          "motor stopped working after a week. They attached a video, ask for a replacement, and "
          "mention they will post a review if nothing happens by Friday.")


def body(model: str, questions: int) -> bytes:
    base = [
        {"type": "predicate", "instructions": "The customer asks for a replacement."},
        {"type": "choice", "instructions": "Which team owns this?",
         "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": "support"}]},
    ]
    qs = [dict(base[i % 2], instructions=f"{base[i % 2]['instructions']} ({i})") if i >= 2 else base[i]
          for i in range(questions)]
    return json.dumps({"model": model, "input": TICKET, "questions": qs}).encode()


def post(url: str, key: str, data: bytes) -> float:
    """Client wall ms of one request; raises on a non-200."""
    request = urllib.request.Request(f"{url}/v1/decisions", data=data, headers={
        "content-type": "application/json", "authorization": f"Bearer {key}"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as response:
        response.read()
    return (time.perf_counter() - started) * 1e3


def p95(samples: list) -> float:
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(len(ordered) * 0.95)) - 1]


def sequential(url: str, key: str, data: bytes, warmup: int, samples: int) -> list:
    for _ in range(warmup):
        post(url, key, data)
    return [post(url, key, data) for _ in range(samples)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key-a", required=True, help="the flooding tenant's API key")
    parser.add_argument("--key-b", required=True, help="the sequential tenant's API key")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--alone-seconds", type=float, default=5.0,
                        help="how long A's throughput is measured alone, the reference for what sharing costs it")
    parser.add_argument("--report")
    args = parser.parse_args()

    model = json.load(urllib.request.urlopen(f"{args.url}/v1/models"))["data"][0]["id"]
    data = body(model, args.questions)
    post(args.url, args.key_a, data)  # warm tenant A's caches too

    started = time.perf_counter()
    alone = sequential(args.url, args.key_b, data, args.warmup, args.samples)
    alone_s = time.perf_counter() - started

    stop = threading.Event()
    answered = [0]
    errors = []
    lock = threading.Lock()

    def flood() -> None:
        while not stop.is_set():
            try:
                post(args.url, args.key_a, data)
            except (urllib.error.URLError, OSError) as error:
                errors.append(str(error))
                return
            with lock:
                answered[0] += 1

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    # A alone first (B idle for longer than the scheduler's 1 s activity window): the
    # throughput sharing is compared with, in the same run.
    while answered[0] < args.clients // 8 and not errors:
        time.sleep(0.05)
    time.sleep(1.5)
    before, alone_started = answered[0], time.perf_counter()
    time.sleep(args.alone_seconds)
    a_alone_rate = (answered[0] - before) / (time.perf_counter() - alone_started)
    # B keeps sending (unmeasured) until A's requests are answered steadily: a steady B, as
    # measured alone, not one that shows up after a pause.
    steady = answered[0] + args.clients // 8
    while answered[0] < steady and not errors:
        post(args.url, args.key_b, data)
    before, flood_started = answered[0], time.perf_counter()
    during = sequential(args.url, args.key_b, data, args.warmup, args.samples)
    flood_s = time.perf_counter() - flood_started
    a_rate = (answered[0] - before) / flood_s
    stop.set()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"tenant A's requests failed: {errors[0]}")

    report = {
        "url": args.url,
        "model": model,
        "clients_a": args.clients,
        "questions": args.questions,
        "samples": args.samples,
        "b_alone_ms": {"p50": statistics.median(alone), "p95": p95(alone)},
        "b_during_flood_ms": {"p50": statistics.median(during), "p95": p95(during)},
        "ratio_p95": p95(during) / p95(alone),
        "b_requests_per_s": {"alone": args.samples / alone_s,
                             "during_flood": (args.samples + args.warmup) / flood_s},
        "a_requests_per_s_during_flood": a_rate,
        "a_requests_per_s_alone": a_alone_rate,
    }
    print(f"B p95 alone {report['b_alone_ms']['p95']:.1f} ms, during A's flood ({args.clients} clients) "
          f"{report['b_during_flood_ms']['p95']:.1f} ms: ratio {report['ratio_p95']:.2f} "
          f"(p50 {report['b_alone_ms']['p50']:.1f} -> {report['b_during_flood_ms']['p50']:.1f} ms); "
          f"A {a_rate:.1f} requests/s meanwhile, {a_alone_rate:.1f} alone")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
