#!/usr/bin/env python3
"""Client wall time of one-question requests against a running decide server.

    scripts/latency.py [--url http://127.0.0.1:8000] [-n 20] [--endpoint decisions|systemone]

Prints p50/p95/min/max in milliseconds and writes a JSON report (--report FILE). Uses only the
standard library, so it runs on a fresh machine.
"""
import argparse
import json
import statistics
import time
import urllib.request

STATE = "Hi, I was charged twice for my subscription this month. Please refund the extra charge."


def body(endpoint: str) -> dict:
    if endpoint == "systemone":
        return {"state": STATE, "questions": {"refund": {"type": "noul", "instructions": "The customer asks for a refund."}}}
    return {"model": "default", "input": STATE,
            "questions": [{"type": "predicate", "instructions": "The customer asks for a refund."}]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--endpoint", choices=["decisions", "systemone"], default="decisions")
    parser.add_argument("--report", help="write a JSON report here")
    args = parser.parse_args()

    payload = body(args.endpoint)
    if args.endpoint == "decisions":
        payload.pop("model")
        models = json.load(urllib.request.urlopen(f"{args.url}/v1/models"))
        payload["model"] = models["data"][0]["id"]
    data = json.dumps(payload).encode()
    url = f"{args.url}/v1/{args.endpoint}"

    def once() -> float:
        request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
        started = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            response.read()
        return (time.perf_counter() - started) * 1000

    once()  # warm-up
    times = sorted(once() for _ in range(args.n))
    report = {
        "endpoint": args.endpoint,
        "n": args.n,
        "p50_ms": statistics.median(times),
        "p95_ms": times[max(0, int(round(0.95 * len(times))) - 1)],
        "min_ms": times[0],
        "max_ms": times[-1],
    }
    print(json.dumps(report, indent=2))
    if args.report:
        with open(args.report, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
