#!/usr/bin/env python3
"""The reference readout a user would run instead of decide: Hugging Face transformers on the
same GPU, the same GGUF model dequantized to bf16, the same prompt text (decide's
`direct-options` renderer: system message, "Input: ... Question: ... Options: A. ..."), the
same chat template, reading the next-token log-softmax at the option letters.

    bench/reference.py --model /tmp/gpu/models/q15.gguf [--report FILE] [--quick]

Scenarios mirror bench/bench.py, in-process (no HTTP): `single` (one question per forward, one at
a time), `multi` (16 and 64 questions over one ~4k-token state, each its own full prompt,
batched 16 at a time: what transformers does without a shared-prefix engine), `load`
(throughput on short prompts, batched 32 at a time), `repeat` (one question on the long
state: transformers has no cross-request cache, so first and repeat both run the whole
prompt), and `accuracy` (calibration/default.jsonl read the same way: accuracy, ECE, mean
option mass, to compare with decide's startup calibration line).
Needs torch, transformers and the `gguf` package.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import TOPICS, long_state, percentile  # noqa: E402  same states as the HTTP benchmark

SYSTEM = ("You are a careful classifier. Read the input, then answer the question by replying with "
          "the label of exactly one option and nothing else.")
DEFAULT_QUESTION = "Which option best fits the input?"


def render(state: str, instructions: str, options: list) -> list:
    """decide's direct-options renderer: options are (text, description|None)."""
    labels = [chr(ord("A") + i) for i in range(len(options))]
    lines = "".join(f"{l}. {t}" + (f" - {d}" if d else "") + "\n" for l, (t, d) in zip(labels, options))
    user = (f"Input:\n{state}\n\nQuestion: {instructions or DEFAULT_QUESTION}\n\nOptions:\n{lines}\n"
            f"Reply with one label: {', '.join(labels)}.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def bench_question(i: int) -> tuple:
    """bench.py's question(i), compiled like decide's OpenAI question types."""
    topic = TOPICS[i % len(TOPICS)]
    kind = i % 3
    if kind == 0:
        return f"The log mentions {topic} issue number {i}.", [("Yes", None), ("No", None)]
    if kind == 1:
        return f"Which team handles question {i}?", [(t, None) for t in TOPICS[:4]]
    return f"How urgent is item {i}?", [("low", None), ("medium", None), ("high", None)]


def compile_systemone(q: dict) -> tuple:
    """The calibration set's Jev questions, compiled like decide's systemone plugins:
    (instructions, options, option keys)."""
    kind, criteria = q["type"], q.get("criteria")
    if kind == "noul":
        c = criteria or {}
        return q.get("instructions"), [("Yes", c.get("true")), ("No", c.get("false"))], [True, False]
    if kind == "choice":
        return q.get("instructions"), [(k, v) for k, v in criteria.items()], list(criteria)
    levels = [c if isinstance(c, str) else c.get("level") for c in criteria]
    return q.get("instructions"), [(l, None) for l in levels], list(range(len(levels)))


class Reader:
    def __init__(self, path: str) -> None:
        directory, name = os.path.split(path)
        started = time.perf_counter()
        self.tok = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        self.tok.padding_side = "left"
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(
            directory, gguf_file=name, dtype=torch.bfloat16).to("cuda").eval()
        self.load_s = time.perf_counter() - started
        self.letters = [self.tok.convert_tokens_to_ids(chr(ord("A") + i)) for i in range(26)]

    def prompt(self, messages: list) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    @torch.inference_mode()
    def read(self, prompts: list, counts: list) -> list:
        """Log-softmax at the letters after each prompt (one padded batch)."""
        batch = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to("cuda")
        logits = self.model(**batch, logits_to_keep=1).logits[:, -1, :].float()
        logp = torch.log_softmax(logits, dim=-1)
        out = []
        for row, n in zip(logp, counts):
            out.append(row[self.letters[:n]].tolist())
        torch.cuda.synchronize()
        return out


def timed(fn) -> tuple:
    torch.cuda.synchronize()
    started = time.perf_counter()
    result = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1000, result


def single(r: Reader, n: int) -> dict:
    state = "I was charged twice for my subscription this month. Please refund the extra charge."
    prompts = [(r.prompt(render(state, *bench_question(i))), len(bench_question(i)[1])) for i in range(n)]
    r.read([prompts[0][0]], [prompts[0][1]])
    times = [timed(lambda p=p: r.read([p[0]], [p[1]]))[0] for p in prompts]
    return {"n": n, "p50_ms": statistics.median(times), "p95_ms": percentile(times, 0.95)}


def multi(r: Reader, counts: list, words: int, batch: int) -> dict:
    state = long_state(words)
    out = {}
    for count in counts:
        prompts = [(r.prompt(render(state, *bench_question(i))), len(bench_question(i)[1])) for i in range(count)]
        tokens = len(r.tok(prompts[0][0], add_special_tokens=False).input_ids)

        def run():
            for k in range(0, count, batch):
                chunk = prompts[k:k + batch]
                r.read([p for p, _ in chunk], [n for _, n in chunk])
        run()  # warm-up
        ms, _ = timed(run)
        out[str(count)] = {"ms": ms, "ms_per_decision": ms / count, "prompt_tokens": tokens, "batch": batch}
    return out


def load(r: Reader, batch: int, rounds: int) -> dict:
    state = "The package arrived late and the box was damaged."
    prompts = [(r.prompt(render(state, *bench_question(i))), len(bench_question(i)[1])) for i in range(batch)]
    r.read([p for p, _ in prompts], [n for _, n in prompts])
    ms, _ = timed(lambda: [r.read([p for p, _ in prompts], [n for _, n in prompts]) for _ in range(rounds)])
    return {"batch": batch, "decisions_per_s": batch * rounds / (ms / 1000)}


def repeat(r: Reader, words: int) -> dict:
    prompt = r.prompt(render(long_state(words), *bench_question(0)))
    tokens = len(r.tok(prompt, add_special_tokens=False).input_ids)
    first, _ = timed(lambda: r.read([prompt], [2]))
    again, _ = timed(lambda: r.read([prompt], [2]))
    return {"input_tokens": tokens, "first_ms": first, "repeat_ms": again,
            "prefill_tokens_per_s": tokens / (again / 1000)}


def accuracy(r: Reader, path: str, batch: int) -> dict:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    items = []
    for row in rows:
        instructions, options, keys = compile_systemone(row["question"])
        items.append((r.prompt(render(row["state"], instructions, options)), len(options),
                      keys.index(row["expected"])))
    right, masses, tops = 0, [], []
    for k in range(0, len(items), batch):
        chunk = items[k:k + batch]
        for (_, n, expected), logps in zip(chunk, r.read([p for p, _, _ in chunk], [n for _, n, _ in chunk])):
            probs = torch.tensor(logps).exp()
            masses.append(probs.sum().item())
            probs = probs / probs.sum()
            top = int(probs.argmax())
            right += top == expected
            tops.append((probs[top].item(), top == expected))
    bins = [[] for _ in range(10)]
    for p, ok in tops:
        bins[min(9, int(p * 10))].append((p, ok))
    ece = sum(abs(sum(p for p, _ in b) / len(b) - sum(ok for _, ok in b) / len(b)) * len(b)
              for b in bins if b) / len(tops)
    return {"n": len(items), "accuracy": right / len(items), "ece": ece,
            "mean_option_mass": sum(masses) / len(masses)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--report")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--long-words", type=int, default=18000)
    parser.add_argument("--questions", default=os.path.join(os.path.dirname(__file__), "..", "calibration", "default.jsonl"))
    args = parser.parse_args()
    r = Reader(args.model)
    report = {"reference": f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, bf16",
              "model": args.model, "load_s": r.load_s, "gpu": torch.cuda.get_device_name(0)}
    scenarios = {
        "single": lambda: single(r, 5 if args.quick else 50),
        "multi": lambda: multi(r, [4] if args.quick else [16, 64], 150 if args.quick else 3000, 16),
        "load": lambda: load(r, 32, 2 if args.quick else 10),
        "repeat": lambda: repeat(r, 300 if args.quick else args.long_words),
        "accuracy": lambda: accuracy(r, args.questions, 16),
    }
    for name, run in scenarios.items():
        try:
            report[name] = run()
        except Exception as error:  # a scenario that fails (e.g. out of memory) is reported, not fatal
            report[name] = {"error": repr(error)[:500]}
            torch.cuda.empty_cache()
        print(json.dumps({name: report[name]}), flush=True)
        if args.report:
            with open(args.report, "w") as handle:
                json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
