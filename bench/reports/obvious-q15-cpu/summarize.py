#!/usr/bin/env python3
"""Figures per kind from measure.py's answer files.

    summarize.py [--json OUT] NAME=answers.jsonl [NAME=answers.jsonl ...]

For every file, per kind (yes, no, choice, score) and over all: n, the share whose expected
option has p > 0.5 (`>0.5`: the right side of 0.5), p > 0.7 (`>0.7`: beyond 0.7 / below 0.3
for yes/no), the share where the expected option is the argmax, the mean and the lowest p of
the expected option; on the served (calibrated) distribution and on the raw one.

    summarize.py --orders permuted.jsonl direct.jsonl [rotated.jsonl]

Per-order view of a `permutation` read: for yes/no questions the order-0 read (`A. Yes`,
`B. No`) is the direct read, and the order-1 read (`A. No`, `B. Yes`) is recovered from the
average (p1 = 2 * mean - p0); for choices and scores each rotated read (measure.py --rotate).
"""
import json
import sys

KINDS = ["yes", "no", "choice", "score"]


def load(path):
    return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]


def figures(recs, which):
    out = {}
    for kind in KINDS + ["all"]:
        rs = [r for r in recs if (kind == "all" or r["kind"] == kind) and which in r]
        if not rs:
            continue
        ps = [r[which][r["expected"]] for r in rs]
        top = [max(range(len(r[which])), key=lambda i: r[which][i]) == r["expected"] for r in rs]
        n = len(rs)
        out[kind] = {
            "n": n,
            "right_side": sum(p > 0.5 for p in ps) / n,
            "beyond_0.7": sum(p > 0.7 for p in ps) / n,
            "argmax": sum(top) / n,
            "mean_p": sum(ps) / n,
            "min_p": min(ps),
            "refused": sum(1 for r in recs if (kind == "all" or r["kind"] == kind) and which not in r),
        }
    return out


def table(name, figs):
    lines = [f"{name} | n | right side of 0.5 | beyond 0.7 / below 0.3 | argmax right | mean p(right) | lowest p(right)",
             "---|---|---|---|---|---|---"]
    for kind, f in figs.items():
        lines.append(f"{kind} | {f['n']} | {f['right_side']:.3f} | {f['beyond_0.7']:.3f} | {f['argmax']:.3f} | "
                     f"{f['mean_p']:.3f} | {f['min_p']:.3f}")
    return "\n".join(lines)


def orders(permuted, direct, rotated=None):
    by_direct = {r["id"]: r for r in direct}
    rows = {}
    for r in permuted:
        if r.get("type") != "noul" or r["id"] not in by_direct:
            continue
        avg = r["raw"][0]
        p0 = by_direct[r["id"]]["raw"][0]
        p1 = min(1.0, max(0.0, 2 * avg - p0))
        rows[r["id"]] = {"kind": r["kind"], "expected": r["expected"], "p_true": [p0, p1], "mean": avg}
    out = {}
    for kind in ("yes", "no"):
        rs = [v for v in rows.values() if v["kind"] == kind]
        if not rs:
            continue
        n = len(rs)
        want = (lambda p: p > 0.5) if kind == "yes" else (lambda p: p < 0.5)
        out[kind] = {
            "n": n,
            "order0_A=Yes_right": sum(want(v["p_true"][0]) for v in rs) / n,
            "order1_A=No_right": sum(want(v["p_true"][1]) for v in rs) / n,
            "orders_disagree": sum(want(v["p_true"][0]) != want(v["p_true"][1]) for v in rs) / n,
            "mean_p_true_order0": sum(v["p_true"][0] for v in rs) / n,
            "mean_p_true_order1": sum(v["p_true"][1] for v in rs) / n,
            "mean_p_true_averaged": sum(v["mean"] for v in rs) / n,
            "mean_p_label_A": sum((v["p_true"][0] + 1 - v["p_true"][1]) / 2 for v in rs) / n,
        }
    if rotated:
        for kind in ("choice", "score"):
            rs = [r for r in rotated if r["kind"] == kind and r["orders"]]
            if not rs:
                continue
            k = max(len(r["orders"]) for r in rs)
            per = []
            for j in range(k):
                have = [r for r in rs if len(r["orders"]) > j]
                per.append({
                    "n": len(have),
                    "argmax_right": sum(max(range(len(r["options"])), key=lambda i: r["orders"][j]["raw"][i]) == r["expected"] for r in have) / len(have),
                    "mean_p_right": sum(r["orders"][j]["raw"][r["expected"]] for r in have) / len(have),
                    # share of mass the model put on list position 0 (label A) under this order
                    "mean_p_label_A": sum(r["orders"][j]["raw"][r["orders"][j]["shift"] % len(r["options"])] for r in have) / len(have),
                })
            agree = sum(len({max(range(len(r["options"])), key=lambda i: o["raw"][i]) for o in r["orders"]}) == 1 for r in rs) / len(rs)
            out[kind] = {"n": len(rs), "per_order": per, "all_orders_agree": agree}
    return out, rows


def main():
    args = sys.argv[1:]
    if args and args[0] == "--orders":
        result, rows = orders(load(args[1]), load(args[2]), load(args[3]) if len(args) > 3 else None)
        print(json.dumps(result, indent=1))
        return
    out_json = None
    if args and args[0] == "--json":
        out_json = args[1]
        args = args[2:]
    everything = {}
    for spec in args:
        name, path = spec.split("=", 1)
        recs = load(path)
        served, raw = figures(recs, "served"), figures(recs, "raw")
        everything[name] = {"served": served, "raw": raw}
        print(table(f"{name} (served)", served))
        print()
        print(table(f"{name} (raw)", raw))
        print()
    if out_json:
        with open(out_json, "w") as f:
            json.dump(everything, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
