#!/usr/bin/env python3
"""Time per field of field-schema decisions (`/v1/fields`) over one input, and what grows.

    bench/fields.py --url http://127.0.0.1:8000 [--fields 1,8,32] [--repeats 5] [--report F.json]

For each field count N: N boolean fields over the same ~1k-token support log, sent cold (a new
`cache_salt` each time, so the input is prefilled) and warm (the same salt again, input from
the prefix cache). Prints the median wall time per request and per field, the server's own
time (`x-decide-server-ms`), and the token use (`input_tokens` over every prompt vs
`computed_input_tokens`, what the model computed: the input once plus each field's own tokens),
with the 1 -> N ratios. Standard library only.
"""
import argparse
import json
import statistics
import time
import urllib.request
import uuid

from bench import long_state


def schema(n: int) -> dict:
    return {f"f{i:02}": {"type": "boolean", "description": f"Does the log mention a problem with item {i}?"}
            for i in range(n)}


def post(url: str, body: dict) -> tuple[dict, float, float]:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url + "/v1/fields", data=data, headers={"content-type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        reply = json.load(response)
        server_ms = float(response.headers.get("x-decide-server-ms", "nan"))
    return reply, (time.perf_counter() - started) * 1e3, server_ms


def measure(url: str, context: str, n: int, repeats: int) -> dict:
    runs = {"cold": [], "warm": []}
    usage = {}
    for _ in range(repeats):
        salt = uuid.uuid4().hex
        for kind in ("cold", "warm"):
            reply, wall, server = post(url, {"context": context, "schema": schema(n), "cache_salt": salt})
            assert reply["backend_requests"] == 1, reply
            runs[kind].append((wall, server))
            usage[kind] = reply["usage"]
    row = {"fields": n}
    for kind, samples in runs.items():
        wall = statistics.median(s[0] for s in samples)
        server = statistics.median(s[1] for s in samples)
        row[kind] = {"wall_ms": wall, "server_ms": server, "wall_ms_per_field": wall / n,
                     "usage": usage[kind]}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--fields", default="1,8,32")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--words", type=int, default=700, help="words of input (~1.3 tokens each)")
    parser.add_argument("--report")
    args = parser.parse_args()
    context = long_state(args.words)
    post(args.url, {"context": context, "schema": schema(1)})  # warm-up: load, first-call costs
    rows = [measure(args.url, context, int(n), args.repeats) for n in args.fields.split(",")]
    base = rows[0]["cold"]["usage"]
    print(f"{'fields':>6} {'cold ms':>9} {'ms/field':>9} {'warm ms':>9} {'ms/field':>9} "
          f"{'prompt tok':>10} {'computed':>9} {'x prompt':>8} {'x computed':>10}")
    for row in rows:
        cold, warm = row["cold"], row["warm"]
        u = cold["usage"]
        print(f"{row['fields']:>6} {cold['wall_ms']:>9.1f} {cold['wall_ms_per_field']:>9.1f} "
              f"{warm['wall_ms']:>9.1f} {warm['wall_ms_per_field']:>9.1f} {u['input_tokens']:>10} "
              f"{u['computed_input_tokens']:>9} {u['input_tokens'] / base['input_tokens']:>8.2f} "
              f"{u['computed_input_tokens'] / base['computed_input_tokens']:>10.2f}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"url": args.url, "words": args.words, "repeats": args.repeats, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
