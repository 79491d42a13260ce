#!/usr/bin/env python3
"""Write the workload files of the side-by-side benchmark (issue 17): the same decisions for
decide and for vLLM, token for token, as `decide-loadgen` workloads (JSONL).

    bench/workloads.py --url http://127.0.0.1:8000 --out DIR [--quick] [--extra JSON]

It asks the running decide server for every question once with `return_prompt`, and writes
for each scenario two files:

- `DIR/decide-<scenario>.jsonl`: `/v1/decisions` requests as a decide user sends them (all of a
  scenario's questions over one input in one request);
- `DIR/vllm-<scenario>.jsonl`: `/v1/completions` requests as a vLLM user sends them: one request
  per model read decide made (two for a read of more than 128 labels, vLLM's limit), `prompt` =
  decide's token ids, `max_tokens: 1`,
  `logprob_token_ids` = the label token ids decide read (so both servers read exactly the same
  tokens at the same position); the requests of one decision unit share a `group` and go
  concurrently, which is how vLLM's prefix cache shares their input.

Cold scenarios give every unit its own cache key (decide's `prompt_cache_key`, vLLM's
`cache_salt`), so no unit finds another's prefix; warm ones share one key. The scenarios are
bench.py's inputs and questions (`long_state`, `question`), with the sizes issue 17 names:

| scenario | unit |
| --- | --- |
| short | one question over a one-line input, 256 different questions (the clients and rate sweeps) |
| multi16-cold, multi64-cold | 16 / 64 questions over one ~4k-token input, a new key per unit |
| multi16-warm, multi64-warm | the same, one key |
| long-first, long-repeat | one question over a ~28k-token input: a new key per unit / one key |
| long-spaced | long-first's unit under keys of its own (24 units: side_by_side.sh sends them 1 s apart) |
| options255 | one question of 255 choices over a one-line input |

`--extra` is merged into every decide request's `extra` (for example
`{"backend_options": {"readout": "direct"}}`), and what decide reads with it is what vLLM is
sent. Standard library only.
"""
import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import long_state, question  # noqa: E402

# vLLM 0.26 reads at most 128 given token ids per request (sampling_params.MAX_LOGPROB_TOKEN_IDS):
# a vLLM user asks a 255-option question as two requests over the same prompt.
VLLM_MAX_LOGPROB_TOKEN_IDS = 128


def chunks(ids: list, size: int) -> list:
    return [ids[i:i + size] for i in range(0, len(ids), size)]


SHORT_STATE = "The package arrived late and the box was damaged."
MULTI_WORDS = 3000
LONG_WORDS = 18000
# long-spaced's keys: more than side_by_side.sh sends (one a second for 16 s), so none is read
# twice.
LONG_SPACED_UNITS = 24


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=1800) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        sys.exit(f"decide answered {error.code}: {error.read()[:2000].decode(errors='replace')}")


def options255() -> dict:
    return {"type": "choice", "instructions": "Which product line is this ticket about?",
            "choices": [{"value": f"product line {i}"} for i in range(255)]}


class Scenarios:
    """Builds each scenario's unit, asks decide for its prompts once, and writes both files."""

    def __init__(self, url: str, out: Path, extra: dict, units: int, vllm_model: str = "q15") -> None:
        self.vllm_model = vllm_model
        self.url = url.rstrip("/")
        self.out = out
        self.extra = extra
        self.units = units
        models = json.load(urllib.request.urlopen(f"{self.url}/v1/models"))
        self.model = models["data"][0]["id"]
        self.summary = {}

    def decide_body(self, state: str, questions: list, key: str, return_prompt: bool = False) -> dict:
        extra = dict(self.extra)
        if return_prompt:
            extra["return_prompt"] = True
        body = {"model": self.model, "input": state, "questions": questions, "prompt_cache_key": key}
        if extra:
            body["extra"] = extra
        return body

    def reads(self, state: str, questions: list) -> list:
        """Per question, decide's reads: [{token_ids, label_token_ids, ...}, ...]."""
        answer = post(f"{self.url}/v1/decisions", self.decide_body(state, questions, "workloads-probe", True))
        out = []
        for i, item in enumerate(answer["answers"]):
            prompt = (item.get("extra") or {}).get("prompt")
            if not prompt:
                sys.exit(f"question {i} has no prompt (refused?): {json.dumps(item)[:500]}")
            out.append(prompt["reads"])
        return out

    def write(self, name: str, state: str, questions: list, cold: bool, split: bool = False,
              cold_units: int = 0) -> None:
        """`cold`: a new key per unit (`cold_units` of them, else --units). `split`: each question
        is a unit of its own (a client asking one question per request), else all of them are
        one unit."""
        per_question = self.reads(state, questions)
        if split:
            units = [(f"{name}", [i]) for i in range(len(questions))]
        else:
            every = list(range(len(questions)))
            count = (cold_units or self.units) if cold else 1
            units = [(f"{name}-{u}" if cold else name, every) for u in range(count)]
        decide_lines, vllm_lines = [], []
        for u, (key, members) in enumerate(units):
            decide_lines.append({"method": "POST", "path": "/v1/decisions", "decisions": len(members),
                                 "body": self.decide_body(state, [questions[i] for i in members], key)})
            for q in members:
                requests = [(read, ids) for read in per_question[q]
                            for ids in chunks(read["label_token_ids"], VLLM_MAX_LOGPROB_TOKEN_IDS)]
                for r, (read, ids) in enumerate(requests):
                    vllm_lines.append({
                        "method": "POST", "path": "/v1/completions", "group": f"unit-{u}",
                        "decisions": 1 if r == 0 else 0,
                        "body": {"model": self.vllm_model, "prompt": read["token_ids"], "max_tokens": 1,
                                 "temperature": 0.0, "logprobs": 20,
                                 "logprob_token_ids": ids, "cache_salt": key}})
        for server, lines in (("decide", decide_lines), ("vllm", vllm_lines)):
            with open(self.out / f"{server}-{name}.jsonl", "w") as f:
                for line in lines:
                    f.write(json.dumps(line) + "\n")
        tokens = [len(read["token_ids"]) for reads in per_question for read in reads]
        self.summary[name] = {"questions": len(questions), "reads": len(tokens), "units": len(decide_lines),
                              "prompt_tokens_max": max(tokens), "prompt_tokens_total": sum(tokens),
                              "prefix_tokens": per_question[0][0]["prefix_tokens"]}
        print(f"{name}: {self.summary[name]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a running decide server")
    parser.add_argument("--out", required=True, help="directory for the workload files")
    parser.add_argument("--quick", action="store_true", help="small inputs (a CPU check of the harness)")
    parser.add_argument("--extra", default="{}", help="JSON merged into every decide request's extra")
    parser.add_argument("--units", type=int, default=64, help="units of a cold scenario (distinct keys)")
    parser.add_argument("--vllm-model", default="q15", help="the model name vLLM serves (--served-model-name)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    s = Scenarios(args.url, out, json.loads(args.extra), args.units, args.vllm_model)
    multi_state = long_state(150 if args.quick else MULTI_WORDS)
    long_text = long_state(300 if args.quick else LONG_WORDS)
    s.write("short", SHORT_STATE, [question(i) for i in range(16 if args.quick else 256)], cold=False, split=True)
    for count in (16, 64):
        questions = [question(i) for i in range(count)]
        s.write(f"multi{count}-cold", multi_state, questions, cold=True)
        s.write(f"multi{count}-warm", multi_state, questions, cold=False)
    s.write("long-first", long_text, [question(0)], cold=True)
    s.write("long-repeat", long_text, [question(0)], cold=False)
    s.write("long-spaced", long_text, [question(0)], cold=True, cold_units=LONG_SPACED_UNITS)
    s.write("options255", SHORT_STATE, [options255()], cold=False)
    (out / "workloads.json").write_text(json.dumps({"model": s.model, "extra": s.extra, "scenarios": s.summary},
                                                   indent=1))


if __name__ == "__main__":
    main()
