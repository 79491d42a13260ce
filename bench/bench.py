#!/usr/bin/env python3
"""Benchmark a running decide server over HTTP and write a JSON report.

    bench/bench.py --url http://127.0.0.1:8000 [--quick] [--report bench/reports/NAME.json]

Scenarios (issue 3): `single` (one question per request, one at a time: p50/p95 client wall
time and the server's own time from the `x-decide-server-ms` header when present); `multi` (16
and 64 questions over one ~4k-token state in one request: time per decision and the share of
input tokens served from the shared prefix); `load` (1, 8, 64 concurrent clients on short
prompts for a fixed time: decisions/s and p95); `repeat` (one question on a long state, first
read vs a repeat); `big` (64 questions over the long state in one request: answered in pieces
or refused with a 4xx naming the limit, never an out-of-memory failure).

Every request carries a `prompt_cache_key`: the server's prefix cache is per tenant, so a new
key means a cold cache and the same key a warm one. Standard library only, so it runs on a
bare GPU machine.
"""
import itertools
import argparse
import json
import statistics
import threading
import time
import urllib.error
import urllib.request

TOPICS = ["billing", "shipping", "login", "refunds", "performance", "security", "pricing", "support"]


def long_state(words: int) -> str:
    """A deterministic support-log text of about `words` words (~1.3 tokens per word)."""
    lines, i = [], 0
    while sum(len(line.split()) for line in lines) < words:
        topic = TOPICS[i % len(TOPICS)]
        lines.append(f"Entry {i}: customer {i * 7 % 1000} wrote about {topic}; the agent replied that the {topic} "
                     f"team would follow up within {i % 5 + 1} days and logged reference {i * 31 % 9973}.")
        i += 1
    return "\n".join(lines)


def question(i: int) -> dict:
    topic = TOPICS[i % len(TOPICS)]
    kind = i % 3
    if kind == 0:
        return {"type": "predicate", "instructions": f"The log mentions {topic} issue number {i}."}
    if kind == 1:
        return {"type": "choice", "instructions": f"Which team handles question {i}?",
                "choices": [{"value": t} for t in TOPICS[:4]]}
    return {"type": "score", "instructions": f"How urgent is item {i}?",
            "levels": [{"label": "low"}, {"label": "medium"}, {"label": "high"}]}


class Client:
    def __init__(self, url: str) -> None:
        self.url = url
        models = json.load(urllib.request.urlopen(f"{url}/v1/models"))
        self.model = models["data"][0]["id"]

    def decide(self, state: str, questions: list, cache_key: str = "bench") -> tuple:
        """(client wall ms, server ms from the header, JSON body); a 4xx/5xx body is returned too."""
        body = json.dumps({"model": self.model, "input": state, "questions": questions,
                           "prompt_cache_key": cache_key}).encode()
        request = urllib.request.Request(f"{self.url}/v1/decisions", data=body,
                                         headers={"content-type": "application/json"})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                payload = json.load(response)
                server_ms = response.headers.get("x-decide-server-ms")
                self.last_steps = parse_server_timing(response.headers.get("server-timing"))
        except urllib.error.HTTPError as error:
            payload = {"status": error.code, "error": json.loads(error.read() or b"null")}
            server_ms = error.headers.get("x-decide-server-ms")
        wall_ms = (time.perf_counter() - started) * 1000
        return wall_ms, (float(server_ms) if server_ms else None), payload


def parse_server_timing(header) -> dict:
    """`compile;dur=0.1, prepare;dur=0.4, ...` -> {"compile": 0.1, ...} (milliseconds)."""
    steps = {}
    for entry in (header or "").split(","):
        name, _, dur = entry.strip().partition(";dur=")
        if name and dur:
            steps[name] = float(dur)
    return steps


_keys = itertools.count()


def fresh_key() -> str:
    """A cache key no earlier request used: a cold prefix cache."""
    return f"cold-{time.time_ns()}-{next(_keys)}"


def percentile(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered))) - 1))]


def single(client: Client, n: int) -> dict:
    state = "I was charged twice for my subscription this month. Please refund the extra charge."
    client.decide(state, [question(0)])
    walls, servers, steps = [], [], {}
    for i in range(n):
        wall, server, _ = client.decide(state, [question(i)])
        walls.append(wall)
        if server is not None:
            servers.append(server)
        for name, ms in getattr(client, "last_steps", {}).items():
            steps.setdefault(name, []).append(ms)
    report = {"n": n, "wall_p50_ms": statistics.median(walls), "wall_p95_ms": percentile(walls, 0.95),
              "server_steps_p50_ms": {name: statistics.median(v) for name, v in steps.items()}}
    if servers:
        report |= {"server_p50_ms": statistics.median(servers), "server_p95_ms": percentile(servers, 0.95)}
    return report


def usage_of(payload: dict) -> dict:
    usage = payload["usage"]
    cached = usage["input_tokens_details"]["cached_tokens"]
    return {"input_tokens": usage["input_tokens"], "cached_tokens": cached,
            "cached_share": cached / max(1, usage["input_tokens"])}


def multi(client: Client, counts: list, words: int) -> dict:
    """Many questions over one state in one request: with a cold prefix cache (the shared
    prefix is computed once for the request), then the same request again (warm)."""
    state = long_state(words)
    out = {}
    for count in counts:
        questions = [question(i) for i in range(count)]
        key = fresh_key()
        runs = {}
        for name in ("cold", "warm"):
            wall, server, payload = client.decide(state, questions, key)
            runs[name] = {"wall_ms": wall, "server_ms": server, "ms_per_decision": wall / count,
                          "steps_ms": getattr(client, "last_steps", {}), **usage_of(payload)}
        out[str(count)] = runs
    return out


def load(client: Client, clients: list, seconds: float) -> dict:
    state = "The package arrived late and the box was damaged."
    out = {}
    for count in clients:
        stop = time.perf_counter() + seconds
        latencies, lock = [], threading.Lock()

        def worker(offset: int) -> None:
            i = offset
            while time.perf_counter() < stop:
                wall, _, _ = client.decide(state, [question(i)])
                with lock:
                    latencies.append(wall)
                i += count

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(count)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        out[str(count)] = {"decisions": len(latencies), "decisions_per_s": len(latencies) / elapsed,
                           "p95_ms": percentile(latencies, 0.95) if latencies else None}
    return out


def repeat(client: Client, words: int) -> dict:
    """One question on a long state: first read (cold cache) vs the same request again."""
    state = long_state(words)
    key = fresh_key()
    first, first_server, payload = client.decide(state, [question(0)], key)
    first_steps = getattr(client, "last_steps", {})
    again, again_server, payload2 = client.decide(state, [question(0)], key)
    again_steps = getattr(client, "last_steps", {})
    if "usage" not in payload:
        return {"refused": payload}
    tokens = payload["usage"]["input_tokens"]
    return {"first_ms": first, "first_server_ms": first_server, "repeat_ms": again,
            "repeat_server_ms": again_server, "input_tokens": tokens,
            "first_steps_ms": first_steps, "repeat_steps_ms": again_steps,
            "first_prefill_tokens_per_s": tokens / ((first_server or first) / 1000),
            "repeat_cached_tokens": payload2["usage"]["input_tokens_details"]["cached_tokens"]}


def big(client: Client, count: int, words: int) -> dict:
    """Many questions over the long state in one request: answered in pieces or refused with a
    4xx naming the limit; never a server failure."""
    state = long_state(words)
    wall, server, payload = client.decide(state, [question(i) for i in range(count)], fresh_key())
    if "usage" in payload:
        answered = sum(1 for a in payload["answers"] if a.get("type") != "refusal")
        return {"status": 200, "wall_ms": wall, "server_ms": server, "answered": answered, **usage_of(payload)}
    return {"status": payload.get("status"), "wall_ms": wall, "error": payload.get("error")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--quick", action="store_true", help="small sizes, for CPU smoke runs")
    parser.add_argument("--report", help="write the JSON report here")
    parser.add_argument("--long-words", type=int, default=18000,
                        help="words of the long state (repeat, big); ~1.35 tokens per word on Qwen")
    parser.add_argument("--skip", default="", help="comma-separated scenarios to skip")
    args = parser.parse_args()
    client = Client(args.url)
    quick = args.quick
    report = {"model": client.model, "url": args.url, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    skip = set(filter(None, args.skip.split(",")))
    long_words = 300 if quick else args.long_words
    scenarios = {
        "single": lambda: single(client, 5 if quick else 50),
        "multi": lambda: multi(client, [4] if quick else [16, 64], 150 if quick else 3000),
        "load": lambda: load(client, [1, 2] if quick else [1, 8, 64], 3 if quick else 10),
        "repeat": lambda: repeat(client, long_words),
        "big": lambda: big(client, 8 if quick else 64, long_words),
    }
    for name, run in scenarios.items():
        if name in skip:
            continue
        report[name] = run()
        print(json.dumps({name: report[name]}), flush=True)
        if args.report:  # written after every scenario, so a cut-off run keeps what it measured
            with open(args.report, "w") as handle:
                json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
