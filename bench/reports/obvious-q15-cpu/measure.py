#!/usr/bin/env python3
"""Asks calibration/obvious.jsonl (or any calibration-format file) of a running decide server
and writes one JSON line per question: the served (calibrated) distribution, the raw one
(`option_logits` of `detail: full`, i.e. before the correction) and the audit.

    measure.py --url http://127.0.0.1:8731 --questions calibration/obvious.jsonl \
        --out answers.jsonl [--extra '{"renderer": "restated", ...}'] [--rotate K]

Questions go over OpenAI's format (`/v1/decisions`, one request per state with all of its
questions), converted from the calibration format the way the project's plugins define them
equal (`noul` == `predicate`, `systemone-choice` == `openai-choice` with string values,
`systemone-score` == `openai-score`). `--extra` is the request's `extra` (a setup to measure;
none: the server's served setup). `--rotate K` asks every choice and score question once per
cyclic shift of its options (the shifts the `permutation` readout reads: j*n/K), each with the
request's `extra` (use a single-read readout), and records each shift's distribution in option
order: the per-order view of the `permutation` readout. Predicates cannot be rotated over the
wire; their second order is recovered from a permutation read and a direct read
(`summarize.py`).
"""
import argparse
import json
import sys
import time
import urllib.error
import urllib.request


def load(path):
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(json.loads(line))
    return out


def options_of(q):
    """Option ids in option order, as the answers name them."""
    t = q["question"]["type"]
    if t == "noul":
        return ["true", "false"]
    if t == "choice":
        return list(q["question"]["criteria"].keys())
    return [str(i) for i in range(len(q["question"]["criteria"]))]


def kind_of(q):
    """`yes`, `no`, `choice` or `score`: the file's `kind`, else from the type and expected."""
    if "kind" in q:
        return q["kind"]
    t = q["question"]["type"]
    if t == "noul":
        return "yes" if q["expected"] is True else "no"
    return t


def expected_of(q):
    t = q["question"]["type"]
    if t == "noul":
        return 0 if q["expected"] is True else 1
    if t == "choice":
        return options_of(q).index(q["expected"])
    return int(q["expected"])


def to_openai(q, name, shift=0):
    body = q["question"]
    t = body["type"]
    if t == "noul":
        return {"type": "predicate", "name": name, "instructions": body["instructions"]}
    if t == "choice":
        items = list(body["criteria"].items())
        n = len(items)
        items = [items[(j + shift) % n] for j in range(n)]
        choices = []
        for value, desc in items:
            c = {"value": value}
            if desc is not None:
                c["description"] = desc
            choices.append(c)
        return {"type": "choice", "name": name, "instructions": body["instructions"], "choices": choices}
    levels = body["criteria"]
    n = len(levels)
    levels = [levels[(j + shift) % n] for j in range(n)]
    return {"type": "score", "name": name, "instructions": body["instructions"],
            "levels": [{"label": l} for l in levels]}


MODEL = "gpt-6-luna"  # the alias every served model answers to


def post(url, body):
    req = urllib.request.Request(url + "/v1/decisions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    for attempt in range(3):
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            raise SystemExit(f"HTTP {e.code}: {e.read().decode()}")
        except Exception as e:  # noqa: BLE001 - report and retry
            print(f"retry after {e}", file=sys.stderr)
            time.sleep(2)
    raise SystemExit("request failed 3 times")


def dist(answer, ids, shift=0):
    """(served, raw) distributions over `ids` (option order) from one answer, undoing `shift`."""
    n = len(ids)
    if answer["type"] == "predicate":
        p = answer["probability"]
        served = [p, 1 - p]
    elif answer["type"] == "choice":
        by = {str(x["value"]): x["probability"] for x in answer["probabilities"]}
        served = [by[i] for i in ids]
    else:  # score: values are list positions of the (possibly rotated) request
        by = {}
        for x in answer["probabilities"]:
            by[(x["value"] + shift) % n] = x["probability"]
        served = [by[i] for i in range(n)]
    logits = answer["extra"]["backend"]["option_logits"]
    if answer["type"] == "predicate":
        raw = [logits["true"], logits["false"]]
    elif answer["type"] == "choice":
        raw = [logits[i] for i in ids]
    else:
        raw = [0.0] * n
        for k, v in logits.items():
            raw[(int(k) + shift) % n] = v
    m = max(raw)
    w = [pow(2.718281828459045, r - m) for r in raw]
    s = sum(w)
    return served, [x / s for x in w]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8731")
    ap.add_argument("--questions", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--extra", default="{}")
    ap.add_argument("--rotate", type=int, default=0)
    ap.add_argument("--types", default="noul,choice,score")
    args = ap.parse_args()
    extra = json.loads(args.extra)
    extra["detail"] = "full"
    types = set(args.types.split(","))
    qs = [q for q in load(args.questions) if q["question"]["type"] in types]
    by_state = {}
    for q in qs:
        by_state.setdefault(q["state"], []).append(q)
    started = time.time()
    with open(args.out, "w", encoding="utf-8") as out:
        for s_i, (state, group) in enumerate(by_state.items()):
            if args.rotate:
                rotatable = [q for q in group if q["question"]["type"] != "noul"]
                per = {q["id"]: [] for q in rotatable}
                for j in range(args.rotate):
                    asked = []
                    for q in rotatable:
                        n = len(options_of(q))
                        k = min(args.rotate, n)
                        if j < k:
                            asked.append((q, j * n // k))
                    if not asked:
                        continue
                    body = {"model": MODEL, "input": state, "extra": extra,
                            "questions": [to_openai(q, f"q{i}", sh) for i, (q, sh) in enumerate(asked)]}
                    r = post(args.url, body)
                    for (q, sh), a in zip(asked, r["answers"]):
                        served, raw = dist(a, options_of(q), sh)
                        per[q["id"]].append({"shift": sh, "raw": raw, "served": served})
                for q in rotatable:
                    rec = {"id": q["id"], "kind": kind_of(q), "type": q["question"]["type"],
                           "options": options_of(q), "expected": expected_of(q), "orders": per[q["id"]]}
                    out.write(json.dumps(rec) + "\n")
            else:
                body = {"model": MODEL, "input": state, "extra": extra,
                        "questions": [to_openai(q, f"q{i}") for i, q in enumerate(group)]}
                r = post(args.url, body)
                for q, a in zip(group, r["answers"]):
                    if "probability" not in a and "probabilities" not in a:
                        rec = {"id": q["id"], "kind": kind_of(q), "refused": a}
                    else:
                        served, raw = dist(a, options_of(q))
                        audit = a["extra"]["audit"]
                        keep = ("readout", "renderer", "label_scheme", "setup_source", "calibration_policy",
                                "calibration_params", "permutation_shifts", "permutation_top", "option_mass")
                        rec = {"id": q["id"], "kind": kind_of(q), "type": q["question"]["type"],
                               "options": options_of(q), "expected": expected_of(q),
                               "served": served, "raw": raw,
                               "audit": {k: audit[k] for k in keep if k in audit}}
                    out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"\r{s_i + 1}/{len(by_state)} states, {time.time() - started:.0f} s",
                  end="", file=sys.stderr)
    print(f"\ndone in {time.time() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
