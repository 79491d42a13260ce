#!/usr/bin/env python3
"""Record a server's answers to the first requests of workload files, and compare two records:
an end-to-end check that a change meant to alter only speed (say, `--matmuls`) leaves the
probabilities within rounding.

    bench/answers.py record --url URL --out answers.json [--per-file 24] WORKLOAD.jsonl...
    bench/answers.py compare A.json B.json [--report diff.json]

`record` sends each file's first requests (decide-loadgen workload lines: method, path, body)
one at a time and keeps, per request, every number found under a `probability` key of the
response, in order. `compare` prints, per file and over all, the largest and mean absolute
difference between the two records and how many answers' most probable option differs.
Standard library only.
"""
import argparse
import json
import sys
import urllib.request
from pathlib import Path


def probabilities(value) -> list:
    """Every number under a `probability` key, depth first, in document order."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "probability" and isinstance(item, (int, float)):
                found.append(float(item))
            else:
                found.extend(probabilities(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(probabilities(item))
    return found


def top_choices(value) -> list:
    """Per list of options that carry probabilities, the index of the most probable one."""
    tops = []
    if isinstance(value, dict):
        for item in value.values():
            tops.extend(top_choices(item))
    elif isinstance(value, list):
        scored = [item.get("probability") for item in value if isinstance(item, dict)]
        if len(scored) > 1 and all(isinstance(p, (int, float)) for p in scored):
            tops.append(max(range(len(scored)), key=scored.__getitem__))
        for item in value:
            tops.extend(top_choices(item))
    return tops


def record(args) -> None:
    out = {}
    for path in args.workloads:
        rows = []
        with open(path) as f:
            for line, _ in zip(f, range(args.per_file)):
                spec = json.loads(line)
                req = urllib.request.Request(args.url + spec["path"], data=json.dumps(spec["body"]).encode(),
                                             headers={"content-type": "application/json"}, method=spec["method"])
                with urllib.request.urlopen(req, timeout=120) as r:
                    body = json.loads(r.read())
                rows.append({"probabilities": probabilities(body), "tops": top_choices(body)})
        out[Path(path).name] = rows
        print(f"{Path(path).name}: {len(rows)} requests, {sum(len(r['probabilities']) for r in rows)} probabilities")
    Path(args.out).write_text(json.dumps(out))


def compare(args) -> None:
    a, b = (json.loads(Path(p).read_text()) for p in (args.a, args.b))
    report, worst, total, count, flips, answers = {}, 0.0, 0.0, 0, 0, 0
    for name in sorted(set(a) & set(b)):
        diffs, file_flips, file_answers = [], 0, 0
        for ra, rb in zip(a[name], b[name]):
            if len(ra["probabilities"]) != len(rb["probabilities"]):
                sys.exit(f"{name}: the records differ in shape")
            diffs.extend(abs(x - y) for x, y in zip(ra["probabilities"], rb["probabilities"]))
            file_flips += sum(x != y for x, y in zip(ra["tops"], rb["tops"]))
            file_answers += len(ra["tops"])
        report[name] = {"probabilities": len(diffs), "max_abs_diff": max(diffs, default=0.0),
                        "mean_abs_diff": sum(diffs) / len(diffs) if diffs else 0.0,
                        "answers": file_answers, "top_choice_differs": file_flips}
        worst, total, count = max(worst, max(diffs, default=0.0)), total + sum(diffs), count + len(diffs)
        flips, answers = flips + file_flips, answers + file_answers
    report["all"] = {"probabilities": count, "max_abs_diff": worst, "mean_abs_diff": total / count if count else 0.0,
                     "answers": answers, "top_choice_differs": flips}
    for name, figures in report.items():
        print(f"{name:32} {json.dumps(figures)}")
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--url", required=True)
    rec.add_argument("--out", required=True)
    rec.add_argument("--per-file", type=int, default=24)
    rec.add_argument("workloads", nargs="+")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("a")
    cmp_.add_argument("b")
    cmp_.add_argument("--report")
    args = parser.parse_args()
    if args.command == "record":
        record(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
