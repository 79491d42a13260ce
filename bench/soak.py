#!/usr/bin/env python3
"""Soak decide under faults: many clients over every endpoint while plugins are swapped,
plugins trap, loop and hog memory, clients hang up mid-request, and bad bodies arrive.

    bench/soak.py [--binary target/release/decide] [--model .models/smol.gguf] [--guests DIR]
                  [--clients 8] [--seconds 120] [--max-requests N] [--report F.json]

Starts its own server on a loopback port (bounded in time and count; nothing leaves the
machine) with an operator plugins directory it rewrites every second, alternating good and
broken files for `openai-predicate` (the inverted test predicate, the real one, a component
whose self-test fails, random bytes), plus the test plugins that trap, spin and hog memory.
`--clients` threads send, in turn: OpenAI decisions, Jev decisions, a Jev batch, a JSON-Schema
classification, field-schema decisions, an OpenAI request with a misbehaving question between
two good ones, a request the client hangs up on mid-way, an oversized body and malformed ones.

Each kind has an expected outcome (a 200 with every good question answered, the misbehaving
question refused and its neighbours answered, a 413, a 4xx). The report counts requests per
kind, the **unexpected** ones (goal 0: a request that should have succeeded and did not, any
5xx, a dropped connection), p50/p99 latency per kind, and the server's RSS sampled every
second (start, peak, end). Exits 1 on any unexpected outcome or if the server died.
Standard library only.
"""
import argparse
import glob
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKET = "Hi, I was charged twice for my subscription this month. Please refund the extra charge today."
MAX_BODY = 64 * 1024


def default_guests() -> str:
    dirs = sorted(glob.glob(str(ROOT / "target/release/build/decide-*/out/guests")), key=os.path.getmtime)
    if not dirs:
        sys.exit("no built guests found: run `cargo build --release` (or pass --guests DIR)")
    return dirs[-1]


def openai_body() -> dict:
    return {"model": "smol", "input": TICKET, "questions": [
        {"type": "predicate", "instructions": "The customer asks for a refund."},
        {"type": "choice", "instructions": "Which team?", "choices": [{"value": "billing"}, {"value": "shipping"}]},
        {"type": "score", "instructions": "How angry?", "levels": [{"label": "calm"}, {"label": "angry"}]}]}


def jev_questions() -> dict:
    return {"refund": {"type": "noul", "instructions": "The customer asks for a refund."},
            "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "shipping": None}}}


def classify_body() -> dict:
    return {"state": TICKET, "question": "Triage this ticket.", "schema": {
        "type": "object", "additionalProperties": False, "required": ["refund", "severity"],
        "properties": {"refund": {"type": "boolean"}, "severity": {"type": "integer", "minimum": 1, "maximum": 3}}}}


def fields_body() -> dict:
    return {"context": TICKET, "schema": {
        "refund": {"type": "boolean", "description": "Does the customer ask for a refund?"},
        "team": {"type": "enum", "description": "Which team?", "choices": ["billing", "shipping"]}}}


def answered_openai(reply: dict, refused: set[int] = frozenset()) -> bool:
    answers = reply.get("answers", [])
    return all((a.get("type") == "refusal") == (i in refused) for i, a in enumerate(answers)) and answers


# kind -> (method, path, body maker, check(status, reply) -> bool)
KINDS = {
    "openai": ("/v1/decisions", lambda: openai_body(), lambda s, r: s == 200 and answered_openai(r)),
    "jev": ("/v1/systemone", lambda: {"state": TICKET, "questions": jev_questions()},
            lambda s, r: s == 200 and set(r.get("answers", {})) == {"refund", "team"} and "partial_failures" not in r),
    "batch": ("/v1/systemone/batch",
              lambda: {"questions": jev_questions(), "items": [{"state": f"{TICKET} Case {i}."} for i in range(4)]},
              lambda s, r: s == 200 and len(r.get("items", [])) == 4 and all("answers" in i for i in r["items"])),
    "classify": ("/v1/classify", classify_body, lambda s, r: s == 200 and r.get("accepted") is True),
    "fields": ("/v1/fields", fields_body, lambda s, r: s == 200 and set(r.get("parsed_json", {})) == {"refund", "team"}),
    "misbehaving": ("/v1/decisions", None, lambda s, r: s == 200 and answered_openai(r, {1})),
    "oversized": ("/v1/systemone", lambda: {"state": "x" * (MAX_BODY + 10), "questions": jev_questions()},
                  lambda s, r: s == 413),
    "malformed": ("/v1/decisions", None, lambda s, r: 400 <= s < 500),
}
BAD_PLUGINS = ["trap-question", "spin-question", "hog-question"]
MALFORMED = [b'{"model": "smol", "input": ', b"[1, 2, 3]", b'{"model": 5, "input": "x", "questions": []}',
             b'\xff\xfe not json', b'{"model": "smol", "input": "x", "questions": [{"type": "predicate"}]}']


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {}
        self.statuses: dict[str, dict[str, int]] = {}
        self.unexpected: list[dict] = []
        self.requests = 0

    def record(self, kind: str, status: str, ms: float, ok: bool, detail: str = "") -> None:
        with self.lock:
            self.requests += 1
            self.latency.setdefault(kind, []).append(ms)
            counts = self.statuses.setdefault(kind, {})
            counts[status] = counts.get(status, 0) + 1
            if not ok and len(self.unexpected) < 50:
                self.unexpected.append({"kind": kind, "status": status, "detail": detail[:300]})
            elif not ok:
                self.unexpected.append({"kind": kind, "status": status})


def send(conn: http.client.HTTPConnection, path: str, data: bytes) -> tuple[int, dict]:
    conn.request("POST", path, body=data, headers={"content-type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, {"raw": raw[:200].decode(errors="replace")}


def hang_up(host: str, port: int) -> None:
    """Sends a slow request and closes the connection before the answer."""
    body = json.dumps({"model": "smol", "input": TICKET * 20, "questions": [
        {"type": "predicate", "instructions": f"Item {i} is mentioned."} for i in range(16)]}).encode()
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"POST /v1/decisions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                  + f"content-length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(random.uniform(0.01, 0.2))


def client(host: str, port: int, stop: threading.Event, stats: Stats, seed: int, budget) -> None:
    rng = random.Random(seed)
    conn = http.client.HTTPConnection(host, port, timeout=120)
    kinds = list(KINDS) + ["hangup"]
    while not stop.is_set() and budget():
        kind = rng.choice(kinds)
        started = time.perf_counter()
        if kind == "hangup":
            try:
                hang_up(host, port)
                stats.record(kind, "closed", (time.perf_counter() - started) * 1e3, True)
            except OSError as error:
                stats.record(kind, "connect-error", 0, False, str(error))
            continue
        path, make, check = KINDS[kind]
        if kind == "misbehaving":
            bad = rng.choice(BAD_PLUGINS)
            data = json.dumps({"model": "smol", "input": TICKET, "questions": [
                {"type": "predicate", "instructions": "A refund is asked for."},
                {"type": bad, "instructions": "misbehave"},
                {"type": "predicate", "instructions": "The customer is upset."}]}).encode()
        elif kind == "malformed":
            data = rng.choice(MALFORMED)
        else:
            data = json.dumps(make()).encode()
        try:
            status, reply = send(conn, path, data)
            ok = bool(check(status, reply))
            stats.record(kind, str(status), (time.perf_counter() - started) * 1e3, ok, json.dumps(reply))
        except (OSError, http.client.HTTPException) as error:
            stats.record(kind, "connection-error", (time.perf_counter() - started) * 1e3, False, repr(error))
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=120)


def swap_plugins(plugins: Path, guests: Path, stop: threading.Event, swaps: list) -> None:
    """Rewrites `openai-predicate.wasm` every second: good, broken, good, garbage, ..."""
    good = [guests / "predicate-inverted.wasm", guests / "openai-predicate.wasm"]
    broken = guests / "broken-example.wasm"
    i = 0
    while not stop.wait(1.0):
        target = plugins / "openai-predicate.wasm"
        tmp = plugins / ".openai-predicate.tmp"
        choice = i % 4
        if choice in (0, 2):
            shutil.copy(good[choice // 2], tmp)
        elif choice == 1:
            shutil.copy(broken, tmp)
        else:
            tmp.write_bytes(os.urandom(4096))
        os.replace(tmp, target)
        swaps.append(["good", "broken-self-test", "good", "garbage"][choice])
        i += 1


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "target/release/decide"))
    parser.add_argument("--model", default=os.environ.get("DECIDE_TEST_MODEL", str(ROOT / ".models/smol.gguf")))
    parser.add_argument("--guests", default=None, help="built guest plugins (default: the newest release build's)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--max-requests", type=int, default=1_000_000)
    parser.add_argument("--report")
    args = parser.parse_args()
    guests = Path(args.guests or default_guests())
    work = Path(tempfile.mkdtemp(prefix="decide-soak-"))
    plugins = work / "plugins"
    plugins.mkdir()
    for name in BAD_PLUGINS:
        shutil.copy(guests / f"{name}.wasm", plugins / f"openai-{name}.wasm")
    server = subprocess.Popen(
        [args.binary, "serve", "--model", args.model, "--port", "0", "--data-dir", str(work / "data"),
         "--plugins", str(plugins), "--plugin-poll-ms", "200", "--plugin-timeout-ms", "300",
         "--max-body-bytes", str(MAX_BODY), "--calibration-questions", "none", "--tune-questions", "none"],
        stdout=subprocess.PIPE, env={**os.environ, "DECIDE_LOG": "error"}, text=True)
    line = server.stdout.readline().strip()
    assert line.startswith("decide listening on http://"), line
    host, port = line.removeprefix("decide listening on http://").rsplit(":", 1)
    port = int(port)
    deadline = time.time() + 120
    while True:
        try:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            conn.request("GET", "/health")
            if json.loads(conn.getresponse().read())["status"] == "ok":
                break
        except (OSError, ValueError, KeyError):
            pass
        assert time.time() < deadline, "server not ready"
        time.sleep(0.2)

    stats, stop, swaps, rss = Stats(), threading.Event(), [], []
    budget = lambda: stats.requests < args.max_requests  # noqa: E731
    started = time.time()
    threads = [threading.Thread(target=swap_plugins, args=(plugins, guests, stop, swaps))]
    threads += [threading.Thread(target=client, args=(host, port, stop, stats, seed, budget))
                for seed in range(args.clients)]
    for t in threads:
        t.start()
    while time.time() - started < args.seconds and budget() and server.poll() is None:
        rss.append([round(time.time() - started, 1), rss_kib(server.pid)])
        time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    alive = server.poll() is None
    if alive:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/health")
        alive = json.loads(conn.getresponse().read())["status"] == "ok"
        rss.append([round(time.time() - started, 1), rss_kib(server.pid)])
    server.kill()
    server.wait()
    shutil.rmtree(work, ignore_errors=True)

    elapsed = time.time() - started
    kinds = {}
    print(f"{'kind':>12} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8}  statuses")
    for kind, values in sorted(stats.latency.items()):
        kinds[kind] = {"requests": len(values), "p50_ms": statistics.median(values),
                       "p99_ms": percentile(values, 0.99), "statuses": stats.statuses[kind]}
        print(f"{kind:>12} {len(values):>8} {kinds[kind]['p50_ms']:>8.0f} {kinds[kind]['p99_ms']:>8.0f}  "
              f"{stats.statuses[kind]}")
    rss_values = [r[1] for r in rss]
    report = {
        "seconds": elapsed, "clients": args.clients, "requests": stats.requests,
        "unexpected": len(stats.unexpected), "unexpected_examples": stats.unexpected[:20],
        "plugin_swaps": len(swaps), "server_alive": alive, "kinds": kinds,
        "rss_kib": {"start": rss_values[0] if rss_values else None, "peak": max(rss_values, default=None),
                    "end": rss_values[-1] if rss_values else None, "samples": rss},
        "p99_ms_all": percentile([v for vs in stats.latency.values() for v in vs], 0.99),
    }
    print(f"{stats.requests} requests in {elapsed:.0f} s by {args.clients} clients, {len(swaps)} plugin swaps; "
          f"unexpected: {len(stats.unexpected)}; server alive: {alive}; RSS start/peak/end "
          f"{report['rss_kib']['start']}/{report['rss_kib']['peak']}/{report['rss_kib']['end']} KiB; "
          f"p99 {report['p99_ms_all']:.0f} ms")
    for example in stats.unexpected[:5]:
        print("unexpected:", example)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2))
    return 0 if alive and not stats.unexpected else 1


if __name__ == "__main__":
    sys.exit(main())
