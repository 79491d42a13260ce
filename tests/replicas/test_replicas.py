"""Three decide replicas on one Postgres store behind HAProxy, on loopback: the checks of
`scripts/replicas-test.sh` (which starts Postgres and passes its URL).

    python3 tests/replicas/test_replicas.py --store postgres://decide@127.0.0.1:PORT/DB \
        [--binary target/release/decide] [--model .models/smol.gguf] [--report FILE.json]

1. Propagation: a tenant plugin uploaded through replica r1 answers on r2 and r3 within 1 s
   (each replica is polled every 5 ms from r1's reply on; then every replica's decisions
   show the new plugin's answer).
2. Cache affinity: the same repeated inputs through HAProxy's consistent hash on
   `X-Decide-Affinity` and through round robin; the share of prompt tokens served from the
   prefix cache, from the replicas' /metrics, and the ratio.
3. Shared rate limit: a tenant with requests_per_minute = L sends 3 L requests at once through
   the round-robin frontend; how many the three replicas let through.
4. A replica killed (SIGKILL) under load: every request sent through HAProxy is answered (the
   proxy retries what the dead replica never answered on another one), the others keep
   answering, and the replica, restarted, is kept out while it loads and taken back once
   /health is 200.

Every figure is printed and written to --report. Exits non-zero when a check fails.
"""
import argparse
import csv
import hashlib
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "replicas-admin-key"
QUESTION = {"type": "predicate", "instructions": "The customer wants a refund."}
TICKET = "The parcel arrived broken and I want my money back."
WORDS = ("parcel courier refund invoice delay broken order account password billing screen "
         "battery warranty shipping address support ticket manager discount coupon subscription "
         "charge receipt delivery window damage return label store payment card").split()

failures = []
passed = []


def check(condition, message):
    print(("ok    " if condition else "FAIL  ") + message, flush=True)
    (passed if condition else failures).append(message)


def in_threads(target, args_list):
    """Runs target(*args) for each args in threads and waits for all; returns the seconds taken."""
    threads = [threading.Thread(target=target, args=args) for args in args_list]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, data=None, timeout=120):
    """(status, headers (case-insensitive), parsed JSON or text); never raises for an HTTP status."""
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, method=method, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, got, text = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, got, text = error.code, error.headers, error.read()
    try:
        return status, got, json.loads(text) if text else None
    except ValueError:
        return status, got, text.decode(errors="replace")


class Replica:
    def __init__(self, name, args):
        self.name, self.args, self.port = name, args, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.work = Path(tempfile.mkdtemp(prefix=f"decide-{name}-"))
        self.process = None

    def start(self):
        log = open(self.work / "log", "a")
        self.process = subprocess.Popen(
            [self.args.binary, "serve", "--model", self.args.model, "--host", "127.0.0.1",
             "--port", str(self.port), "--store", self.args.store, "--admin-key", ADMIN,
             "--calibration-questions", "none", "--tune-questions", "none",
             "--data-dir", str(self.work / "data"), "--cache-dir", str(self.work / "cache"),
             "--request-timeout-ms", "0"],
            stdout=log, stderr=log, env={**os.environ, "DECIDE_LOG": "info"})

    def ready(self, deadline_s=180):
        deadline = time.time() + deadline_s
        while time.time() < deadline:
            try:
                status, _, body = http("GET", f"{self.base}/health", timeout=2)
                if status == 200 and body["status"] == "ok":
                    return
            except OSError:
                pass
            assert self.process.poll() is None, f"{self.name} exited: {(self.work / 'log').read_text()[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready in {deadline_s} s")

    def kill(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def metrics(self):
        # /metrics needs the admin key on a server started with one.
        status, _, text = http("GET", f"{self.base}/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
        assert status == 200, text
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values


class Proxy:
    def __init__(self, replicas):
        self.ports = {name: free_port() for name in ("AFFINITY_PORT", "ROUNDROBIN_PORT", "STATS_PORT")}
        env = {**os.environ, **{k: str(v) for k, v in self.ports.items()},
               **{f"R{i + 1}_PORT": str(r.port) for i, r in enumerate(replicas)}}
        config = ROOT / "tests/replicas/haproxy.cfg"
        subprocess.run(["haproxy", "-c", "-q", "-f", str(config)], env=env, check=True)
        self.log = Path(tempfile.mkdtemp(prefix="decide-haproxy-")) / "log"
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(["haproxy", "-db", "-f", str(config)], env=env,
                                            stdout=log, stderr=subprocess.STDOUT)
        self.affinity = f"http://127.0.0.1:{self.ports['AFFINITY_PORT']}"
        self.roundrobin = f"http://127.0.0.1:{self.ports['ROUNDROBIN_PORT']}"

    def stats(self):
        """{(backend, server): row} from HAProxy's CSV stats."""
        status, _, text = http("GET", f"http://127.0.0.1:{self.ports['STATS_PORT']}/stats;csv")
        assert status == 200, text
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {(row["pxname"], row["svname"]): row for row in rows}

    def wait_status(self, server, wanted, deadline_s=60):
        deadline = time.time() + deadline_s
        while time.time() < deadline:
            try:
                stats = self.stats()
            except OSError:  # HAProxy is starting
                time.sleep(0.05)
                continue
            if all(stats[(b, server)]["status"].startswith(wanted) for b in ("replicas_affinity", "replicas_roundrobin")):
                return
            time.sleep(0.05)
        raise AssertionError(f"HAProxy never marked {server} {wanted}")

    def stop(self):
        self.process.terminate()
        self.process.wait()


def admin(replica, method, path, body=None):
    return http(method, f"{replica.base}/admin/v1{path}", body, {"Authorization": f"Bearer {ADMIN}"})


def new_tenant(replica, name, limits=None):
    status, _, tenant = admin(replica, "POST", "/tenants", {"name": name, "limits": limits or {}})
    assert status == 201, tenant
    status, _, key = admin(replica, "POST", f"/tenants/{tenant['id']}/keys")
    assert status == 201, key
    return tenant["id"], key["key"]


def decide(base, key, text=TICKET, headers=None, timeout=120):
    return http("POST", f"{base}/v1/decisions",
                {"model": "smol", "input": text, "questions": [QUESTION]},
                {"Authorization": f"Bearer {key}", **(headers or {})}, timeout=timeout)


def probability(base, key):
    status, _, body = decide(base, key)
    assert status == 200, body
    return body["answers"][0]["probability"]


def served_version(replica, key, name):
    status, _, body = http("GET", f"{replica.base}/v1/plugins", headers={"Authorization": f"Bearer {key}"})
    assert status == 200, body
    for plugin in body["plugins"]:
        if plugin["name"] == name and plugin["source"] == "tenant":
            return plugin.get("upload_version")
    return None


def guests_dir():
    dirs = sorted(ROOT.glob("target/release/build/decide-*/out/guests"), key=os.path.getmtime)
    assert dirs, "no built guests: run `cargo build --release -p decide`"
    return dirs[-1]


def propagation(replicas, key, report):
    """Uploads alternate components of `openai-predicate` through r1; times r2 and r3."""
    guests = guests_dir()
    components = [guests / "predicate-inverted.wasm", guests / "openai-predicate.wasm"] * 2
    before = probability(replicas[0].base, key)
    check(abs(before - 0.5) > 0.05, f"the built-in predicate's p = {before:.3f} is away from 0.5 (needed to tell the inverted plugin)")
    times = []
    for number, component in enumerate(components, start=1):
        inverted = component.name == "predicate-inverted.wasm"
        status, _, body = http("PUT", f"{replicas[0].base}/v1/plugins/openai-predicate",
                               data=component.read_bytes(),
                               headers={"Authorization": f"Bearer {key}", "Content-Type": "application/wasm"})
        replied = time.monotonic()
        check(status == 200 and body["version"] == number, f"upload {number} ({component.name}) through r1: {status}")
        for replica in replicas[1:]:
            while served_version(replica, key, "openai-predicate") != number:
                if time.monotonic() - replied > 10:
                    break
                time.sleep(0.005)
            took = time.monotonic() - replied
            times.append(took)
            check(took <= 1.0, f"version {number} serves on {replica.name} {took * 1000:.0f} ms after r1's reply (limit 1 s)")
        for replica in replicas:
            p = probability(replica.base, key)
            expected = 1 - before if inverted else before
            check(abs(p - expected) < 1e-3, f"{replica.name} answers with version {number}: p = {p:.4f} (expected {expected:.4f})")
    report["propagation_ms"] = {"each": [round(t * 1000, 1) for t in times],
                                "max": round(max(times) * 1000, 1),
                                "median": round(sorted(times)[len(times) // 2] * 1000, 1)}


def long_input(rng):
    """About 700 tokens: a lone prompt's prefix is cached from 512 tokens on (STORE_MIN_TOKENS)."""
    return "Ticket: " + " ".join(rng.choice(WORDS) for _ in range(600)) + "."


def affinity_header(text):
    """What README tells callers to send: a hash of the input's first KiB."""
    return hashlib.sha256(text[:1024].encode()).hexdigest()[:16]


def cache_run(replicas, base, key, inputs, repeats, with_header):
    """Asks each input `repeats` times (two clients); the replicas' cache counters' deltas."""
    names = ("decide_prefix_cache_hit_tokens_total", "decide_input_tokens_total",
             "decide_prefix_cache_hits_total", "decide_prefix_cache_misses_total")
    before = [r.metrics() for r in replicas]
    jobs = [text for _ in range(repeats) for text in inputs]
    lock, served = threading.Lock(), {}

    def client():
        while True:
            with lock:
                if not jobs:
                    return
                text = jobs.pop(0)
            headers = {"X-Decide-Affinity": affinity_header(text)} if with_header else {}
            status, got, body = decide(base, key, text, headers)
            assert status == 200, body
            with lock:
                served.setdefault(text, set()).add(got.get("X-Decide-Replica"))

    in_threads(client, [()] * 2)
    after = [r.metrics() for r in replicas]
    delta = {n: sum(a.get(n, 0) - b.get(n, 0) for a, b in zip(after, before)) for n in names}
    token_rate = delta[names[0]] / max(delta[names[1]], 1)
    lookups = delta[names[2]] + delta[names[3]]
    return {"cached_token_share": round(token_rate, 4),
            "lookup_hit_rate": round(delta[names[2]] / max(lookups, 1), 4),
            "replicas_per_input": round(sum(len(s) for s in served.values()) / len(served), 2),
            "requests": len(inputs) * repeats}


def affinity(replicas, proxy, key, report):
    rng = random.Random(18)
    inputs = [long_input(rng) for _ in range(8)]
    other = [long_input(rng) for _ in range(8)]
    hashed = cache_run(replicas, proxy.affinity, key, inputs, 5, True)
    spread = cache_run(replicas, proxy.roundrobin, key, other, 5, False)
    ratio = hashed["cached_token_share"] / max(spread["cached_token_share"], 1e-9)
    print(f"      affinity: {hashed}\n      round robin: {spread}\n      ratio {ratio:.2f}")
    check(hashed["replicas_per_input"] == 1.0, f"affinity keeps each input on one replica ({hashed['replicas_per_input']} replicas per input)")
    check(ratio > 1.2, f"affinity serves {ratio:.2f}x the cached prompt tokens of round robin")
    report["affinity"] = {"consistent_hash": hashed, "round_robin": spread, "cached_token_share_ratio": round(ratio, 2)}


def rate_limit(replicas, proxy, report):
    limit = 30
    _, key = new_tenant(replicas[0], "rate-team", {"requests_per_minute": limit})
    time.sleep(1.2)  # every replica's directory has the tenant
    results, lock = [], threading.Lock()

    def client(n):
        for _ in range(n):
            status, _, _ = decide(proxy.roundrobin, key, "Short: refund?")
            with lock:
                results.append(status)

    took = in_threads(client, [(limit // 2,)] * 6)
    passed = results.count(200)
    # Within `took` seconds the bucket refills took/60 * limit requests.
    allowed = limit + limit * took / 60
    print(f"      {len(results)} requests in {took:.1f} s: {passed} answered, {results.count(429)} got 429; the limit allows {allowed:.1f}")
    check(set(results) <= {200, 429}, f"only 200 and 429 answers ({sorted(set(results))})")
    check(passed <= allowed + 1, f"the tenant got {passed} requests through 3 replicas where its limit of {limit}/min allows {allowed:.1f} in {took:.1f} s ({passed / allowed:.2f}x)")
    report["rate_limit"] = {"requests_per_minute": limit, "sent": len(results), "seconds": round(took, 1),
                            "answered": passed, "allowed_in_window": round(allowed, 1),
                            "over_limit": round(passed / allowed, 3)}


def kill_under_load(replicas, proxy, key, report):
    victim = replicas[2]
    stop = threading.Event()
    log, lock = [], threading.Lock()

    def client(n):
        rng = random.Random(n)
        while not stop.is_set():
            started = time.monotonic()
            try:
                status, got, body = decide(proxy.roundrobin, key, f"Order {rng.randrange(10**6)}: {TICKET}", timeout=60)
                replica = got.get("X-Decide-Replica")
            except OSError as error:
                status, replica, body = None, None, str(error)
            with lock:
                log.append((started, time.monotonic(), status, replica, body if status != 200 else None))

    retries_before = {s: int(row["wretr"] or 0) + int(row["wredis"] or 0)
                      for (b, s), row in proxy.stats().items() if b == "replicas_roundrobin" and s.startswith("r")}
    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    time.sleep(8)
    killed_at = time.monotonic()
    victim.kill()
    time.sleep(8)
    restarted_at = time.monotonic()
    victim.start()
    proxy.wait_status(victim.name, "UP", deadline_s=180)
    back_at = time.monotonic()
    time.sleep(6)
    stop.set()
    for t in threads:
        t.join()
    stats = proxy.stats()
    retried = sum(int(row["wretr"] or 0) + int(row["wredis"] or 0)
                  for (b, s), row in stats.items() if b == "replicas_roundrobin" and s.startswith("r")) - sum(retries_before.values())
    lost = [entry for entry in log if entry[2] != 200]
    while_down = [e for e in log if killed_at + 1 < e[0] and e[1] < back_at]
    answered_by = lambda entries: sorted({e[3] for e in entries if e[2] == 200})
    print(f"      {len(log)} requests; {len(lost)} not answered; HAProxy retried or redispatched {retried}")
    for entry in lost[:5]:
        print(f"      lost: status {entry[2]} from {entry[3]}: {str(entry[4])[:200]}")
    if lost:
        failed = [line for line in proxy.log.read_text().splitlines() if " 502 " in line or " 503 " in line]
        print("      HAProxy's log of them:\n        " + "\n        ".join(failed[:10]))
    check(not lost, f"no request lost when {victim.name} was killed under load ({len(lost)} of {len(log)})")
    check(answered_by(while_down) == ["r1", "r2"], f"while {victim.name} was down or loading, r1 and r2 answered everything ({answered_by(while_down)})")
    after = [e for e in log if e[0] > back_at + 1]
    check("r3" in answered_by(after), f"{victim.name} answers again once /health is 200 ({answered_by(after)})")
    report["kill"] = {"requests": len(log), "lost": len(lost), "proxy_retries": retried,
                      "down_s": round(back_at - killed_at, 1), "restart_to_up_s": round(back_at - restarted_at, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--binary", default=str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release/decide"))
    parser.add_argument("--model", default=os.environ.get("DECIDE_TEST_MODEL", str(ROOT / ".models/smol.gguf")))
    parser.add_argument("--report", default=None)
    args = parser.parse_args()
    replicas = [Replica(f"r{i}", args) for i in (1, 2, 3)]
    proxy = None
    report = {}
    started = time.monotonic()
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            r.ready()
        proxy = Proxy(replicas)
        for r in replicas:
            proxy.wait_status(r.name, "UP")
        tenant, key = new_tenant(replicas[0], "replica-team")
        print(f"== 3 replicas and HAProxy ready in {time.monotonic() - started:.0f} s; tenant {tenant}")
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and decide(replicas[2].base, key)[0] == 401:
            time.sleep(0.01)
        check(decide(replicas[2].base, key)[0] == 200, "a key created through r1 authenticates on r3 within 1 s")
        print("== propagation of a plugin upload")
        propagation(replicas, key, report)
        print("== cache affinity vs round robin")
        affinity(replicas, proxy, key, report)
        print("== a shared rate limit across 3 replicas")
        rate_limit(replicas, proxy, report)
        print("== a replica killed under load")
        kill_under_load(replicas, proxy, key, report)
    finally:
        if proxy:
            proxy.stop()
        for r in replicas:
            if r.process and r.process.poll() is None:
                r.process.terminate()
                r.process.wait()
    report["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    # The summary line scripts/test.sh counts.
    print(f"replicas: {len(passed)} passed, {len(failures)} failed in {report['seconds']}s")
    if failures:
        for r in replicas:
            print(f"--- {r.name} log tail\n{(r.work / 'log').read_text()[-2000:]}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
