#!/usr/bin/env python3
"""Writes the per-family test fixtures of models/tests/families.rs: tiny checkpoints with random
weights but each family's real structure, in both formats decide loads, and what transformers
computes from them.

Run by a developer, not by CI (it needs torch and transformers):

    python3 -m venv /tmp/tiny && /tmp/tiny/bin/pip install torch transformers gguf safetensors
    scripts/fetch-model.sh smol && scripts/fetch-model.sh q05
    /tmp/tiny/bin/python scripts/make-tiny-models.py [FAMILY ...]

`g270` as FAMILY instead writes .models/g270-hf/ (see build_g270; needs
scripts/fetch-model.sh g270 and `pip install accelerate`).

Per family, under models/tests/fixtures/<family>/ (under 2 MB each):

- hf/        a Hugging Face directory: config.json, safetensors (qwen3's sharded, with its
             index), and tokenizer.json: SmolLM2's byte-level BPE cut to its first 512
             tokens and the merges among them (a real tokenizer's pipeline whose vocabulary
             keeps the embedding small).
- model.gguf the same weights as llama.cpp's converter lays them out (q/k permuted for
             `llama`, Gemma's norms shifted by 1, Llama 3.1's RoPE scaling as `rope_freqs`,
             Phi-3's fused matrices), with the same small vocabulary.
- expected.json  per prompt (random ids, and one text with the ids `tokenizers` gives it):
             the logits transformers computes on CPU from the saved directory at every
             position, at a fixed sample of vocabulary columns, plus each position's
             log-sum-exp over the whole vocabulary. They are computed in f64, the exact values
             both f32 implementations round differently from; transformers' own f32 logits are
             recorded as far from them as `transformers_f32_vs_f64` says (at most 5e-5,
             checked here: tiny widths can make a norm amplify rounding, and such a fixture
             could not test decide at 1e-4).

And models/tests/fixtures/templates.json: transformers' apply_chat_template ids for the chat
templates the project's GGUF files carry (one copy of each tokenizer: .models/q05.gguf and
.models/smol.gguf, which CI fetches).

Weights are random (seeded) with a larger spread than the default initializer so that logits
differ visibly between positions; every value is rounded to one representable in both stored
precisions, so both formats hold exactly the same numbers.
"""

import json
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from gguf import GGUFReader, GGUFWriter, GGUFValueType
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("DECIDE_MODELS_DIR", REPO / ".models"))
OUT = REPO / "models" / "tests" / "fixtures"

# Long enough to pass every sliding window below (8 tokens) several times.
CHATS = [
    [{"role": "user", "content": "Is the sky green? A) yes B) no. Answer with the letter."}],
    [
        {"role": "system", "content": "You sort parcels. Reply with one letter."},
        {
            "role": "user",
            "content": "Parcel 4471 weighs 12.5 kg and goes to Lyon on 2026-03-14.\n"
            "Is it A) light, B) heavy or C) unknown?",
        },
    ],
]
TEXTS = [
    "The quick brown fox jumps over the lazy dog. 1234567 + 89 = ?",
]
SAMPLED_COLUMNS = 96
# Random token ids: two prompts longer than every sliding window (8) several times over.
PROMPT_LENGTHS = [46, 66, 24]


def seed_weights(model, spread, both, seed=1234):
    """Normal weights of std `spread`, norms around 1 (Gemma's around 0: it applies 1 + w),
    rounded through `both` dtypes so each stored format holds the same values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                centre = 0.0 if model.config.model_type.startswith("gemma") else 1.0
                v = centre + 0.2 * torch.randn(p.shape, generator=g)
            elif name.endswith("bias"):
                v = 0.2 * torch.randn(p.shape, generator=g)
            else:
                v = spread * torch.randn(p.shape, generator=g)
            for dt in both:
                v = v.to(dt).to(torch.float32)
            p.copy_(v)


def copy_tokenizer_kv(src: Path, w: GGUFWriter):
    """Copies every tokenizer.* key of a GGUF file."""
    r = GGUFReader(str(src))
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = f.types[0]
        if vtype == GGUFValueType.ARRAY:
            sub = f.types[1]
            if sub == GGUFValueType.STRING:
                val = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(key, val, vtype, sub_type=sub)
        elif vtype == GGUFValueType.STRING:
            w.add_key_value(key, bytes(f.parts[f.data[0]]).decode("utf-8"), vtype)
        else:
            w.add_key_value(key, f.parts[f.data[0]].tolist()[0], vtype)
    return len(r.fields["tokenizer.ggml.tokens"].data)


def permute(w, n_head):
    """llama.cpp's q/k permutation for GGUF `llama`: rotary pairs made adjacent."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def llama3_factors(cfg, head_dim):
    """llama.cpp's `rope_freqs` for rope_type llama3 (convert_hf_to_gguf.py)."""
    rs = cfg.rope_parameters if hasattr(cfg, "rope_parameters") and cfg.rope_parameters else cfg.rope_scaling
    base = rs["rope_theta"] if "rope_theta" in rs else cfg.rope_theta
    factor, lo, hi, old = (
        rs["factor"],
        rs["low_freq_factor"],
        rs["high_freq_factor"],
        rs["original_max_position_embeddings"],
    )
    freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    lo_w, hi_w = old / lo, old / hi
    out = []
    for f in freqs.tolist():
        wl = 2 * math.pi / f
        if wl < hi_w:
            out.append(1.0)
        elif wl > lo_w:
            out.append(factor)
        else:
            smooth = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path, fam, model, tok_src, np_dtype):
    cfg = model.config
    arch = fam["gguf_arch"]
    w = GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{fam['name']}")
    n_head, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_head
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    rotary = int(head_dim * fam.get("partial_rotary", 1.0))
    w.add_rope_dimension_count(rotary)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    theta = fam["rope_theta"]
    w.add_rope_freq_base(theta)
    if fam.get("window"):
        w.add_sliding_window(fam["window"])
    if fam.get("longrope"):
        lr = fam["longrope"]
        w.add_rope_scaling_attn_factors(
            math.sqrt(1 + math.log(cfg.max_position_embeddings / lr["original"]) / math.log(lr["original"])))
        w.add_rope_scaling_orig_ctx_len(lr["original"])
    tokens, merges = tok_src
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges([f"{a} {b}" for a, b in merges])

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    tensors = {}
    gemma = arch == "gemma3"

    def put(name, arr, norm=False):
        arr = arr + 1.0 if (norm and gemma) else arr
        # Norms and biases stay f32, as llama.cpp writes them.
        tensors[name] = arr.astype(np.float32 if arr.ndim == 1 else np_dtype)

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"], norm=True)
    if "lm_head.weight" in sd and not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        if arch == "phi3":
            # llama.cpp keeps Phi-3's fused matrices: attn_qkv, and gate+up as ffn_up.
            put(f"blk.{i}.attn_qkv.weight", sd[p + "self_attn.qkv_proj.weight"])
        else:
            q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
            if arch == "llama":
                q, k = permute(q, n_head), permute(k, n_kv)
            put(f"blk.{i}.attn_q.weight", q)
            put(f"blk.{i}.attn_k.weight", k)
            put(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        for b in "qkv":
            key = p + f"self_attn.{b}_proj.bias"
            if key in sd:
                put(f"blk.{i}.attn_{b}.bias", sd[key])
        if p + "self_attn.q_norm.weight" in sd:
            put(f"blk.{i}.attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"], norm=True)
            put(f"blk.{i}.attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"], norm=True)
        put(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"], norm=True)
        if gemma:
            put(f"blk.{i}.post_attention_norm.weight", sd[p + "post_attention_layernorm.weight"], norm=True)
            put(f"blk.{i}.ffn_norm.weight", sd[p + "pre_feedforward_layernorm.weight"], norm=True)
            put(f"blk.{i}.post_ffw_norm.weight", sd[p + "post_feedforward_layernorm.weight"], norm=True)
        else:
            put(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], norm=True)
        if arch == "phi3":
            put(f"blk.{i}.ffn_up.weight", sd[p + "mlp.gate_up_proj.weight"])
        else:
            put(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
            put(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    if fam.get("llama3"):
        tensors["rope_freqs.weight"] = llama3_factors(cfg, head_dim)
    if fam.get("longrope"):
        tensors["rope_factors_long.weight"] = np.array(fam["longrope"]["long"], dtype=np.float32)
        tensors["rope_factors_short.weight"] = np.array(fam["longrope"]["short"], dtype=np.float32)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


FAMILIES = {
    "qwen2": dict(
        gguf_arch="qwen2", tok="q05.gguf", hf_dtype=torch.float16, gguf_dtype=np.float16,
        rope_theta=1_000_000.0,
        config=dict(
            model_type="qwen2", hidden_size=32, intermediate_size=24, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
            max_position_embeddings=4096, tie_word_embeddings=True, use_sliding_window=False,
        ),
    ),
    "qwen3": dict(
        gguf_arch="qwen3", tok="q05.gguf", hf_dtype=torch.bfloat16, gguf_dtype=np.float16,
        rope_theta=1_000_000.0, shard="100KB",
        config=dict(
            model_type="qwen3", hidden_size=32, intermediate_size=24, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=128, rms_norm_eps=1e-6,
            max_position_embeddings=4096, tie_word_embeddings=True, attention_bias=False,
            use_sliding_window=False,
        ),
    ),
    "llama": dict(
        gguf_arch="llama", tok="smol.gguf", hf_dtype=torch.float32, gguf_dtype=np.float32,
        rope_theta=500_000.0, llama3=True,
        config=dict(
            model_type="llama", hidden_size=16, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
            max_position_embeddings=4096, tie_word_embeddings=True,
            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=64),
        ),
    ),
    "mistral": dict(
        gguf_arch="llama", tok="smol.gguf", hf_dtype=torch.float16, gguf_dtype=np.float16,
        rope_theta=1_000_000.0, window=8,
        config=dict(
            model_type="mistral", hidden_size=16, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=1, head_dim=128, rms_norm_eps=1e-5,
            max_position_embeddings=4096, tie_word_embeddings=False, sliding_window=8,
        ),
    ),
    "phi3": dict(
        # Phi-3's 96-wide head (transformers derives it from hidden / heads), 3/4 rotary as
        # Phi-4-mini, LongRoPE, a window shorter than the prompts.
        # Weights spread as 1/sqrt(width): at 0.25 the 192-wide logits rounded 1.7e-4 apart
        # in f32 and f64.
        spread=0.08, gguf_arch="phi3", tok="smol.gguf", hf_dtype=torch.float16, gguf_dtype=np.float16,
        rope_theta=10_000.0, window=8, partial_rotary=0.75,
        longrope=dict(
            original=4096,
            short=[1.0 + 0.05 * i for i in range(36)],
            long=[2.0 + 0.1 * i for i in range(36)],
        ),
        config=dict(
            model_type="phi3", hidden_size=192, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-5,
            max_position_embeddings=131072, original_max_position_embeddings=4096,
            partial_rotary_factor=0.75, tie_word_embeddings=True, sliding_window=8,
            rope_scaling=dict(
                rope_type="longrope",
                short_factor=[1.0 + 0.05 * i for i in range(36)],
                long_factor=[2.0 + 0.1 * i for i in range(36)],
            ),
        ),
    ),
    "gemma3": dict(
        # Seed 5: with the default seed transformers' own f32 logits were 5.4e-5 from f64's.
        gguf_arch="gemma3", tok="q05.gguf", seed=5, hf_dtype=torch.bfloat16, gguf_dtype=np.float16,
        rope_theta=1_000_000.0, window=8,
        config=dict(
            model_type="gemma3_text", hidden_size=32, intermediate_size=16, num_hidden_layers=6,
            num_attention_heads=2, num_key_value_heads=1, head_dim=256, rms_norm_eps=1e-6,
            max_position_embeddings=4096, sliding_window=8, query_pre_attn_scalar=256,
            layer_types=["sliding_attention"] * 5 + ["full_attention"],
            rope_local_base_freq=10_000.0, final_logit_softcapping=None,
            attn_logit_softcapping=None, tie_word_embeddings=True,
        ),
    ),
}


SMALL_VOCAB = 512


def small_tokenizer():
    """SmolLM2's byte-level BPE cut to its first SMALL_VOCAB tokens and the merges among them:
    a real tokenizer (the same pipeline, the same first merges) whose vocabulary keeps the
    embedding, and so the fixture, small. Returns (tokens, merges)."""
    r = GGUFReader(str(MODELS / "smol.gguf"))
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data][:SMALL_VOCAB]
    f = r.fields["tokenizer.ggml.merges"]
    keep = set(tokens)
    merges = []
    for i in f.data:
        a, b = bytes(f.parts[i]).decode("utf-8").split(" ", 1)
        if a in keep and b in keep and a + b in keep:
            merges.append((a, b))
    return tokens, merges


def write_small_tokenizer(hf_dir, tokens, merges):
    """tokenizer.json of the small vocabulary, as the `tokenizers` library writes it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    t = Tokenizer(models.BPE({tok: i for i, tok in enumerate(tokens)}, merges))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.decoder = decoders.ByteLevel()
    t.save(str(hf_dir / "tokenizer.json"))
    (hf_dir / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return t


def build(name):
    fam = dict(FAMILIES[name], name=name)
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    (out / "hf").mkdir(parents=True)
    tokens, merges = small_tokenizer()
    vocab = len(tokens)
    c = dict(fam["config"])
    mt = c.pop("model_type")
    c["rope_theta"] = fam["rope_theta"]
    cfg = AutoConfig.for_model(mt, vocab_size=vocab, bos_token_id=None, eos_token_id=None,
                               pad_token_id=None, **c)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    both = [fam["hf_dtype"], {np.float16: torch.float16, np.float32: torch.float32}[fam["gguf_dtype"]]]
    seed_weights(model, fam.get("spread", 0.25), both, int(os.environ.get("TINY_SEED", fam.get("seed", 1234))))
    model.to(fam["hf_dtype"]).save_pretrained(
        out / "hf", max_shard_size=fam.get("shard", "50GB"), safe_serialization=True
    )
    tok = write_small_tokenizer(out / "hf", tokens, merges)
    (out / "hf" / "generation_config.json").unlink(missing_ok=True)
    write_gguf(out / "model.gguf", fam, model.float(), (tokens, merges), fam["gguf_dtype"])

    # The reference: transformers on the saved directory, in f64 (see the module docs), its
    # own f32 logits checked to be close to those.
    ref = AutoModelForCausalLM.from_pretrained(out / "hf", dtype=torch.float32).eval()
    exact = AutoModelForCausalLM.from_pretrained(out / "hf", dtype=torch.float64).eval()
    rng = np.random.default_rng(11)
    prompts = [dict(ids=[int(x) for x in rng.integers(0, vocab, n)]) for n in PROMPT_LENGTHS]
    # And one real text through the small tokenizer (its ids as `tokenizers` gives them).
    prompts.append(dict(text=TEXTS[0], ids=tok.encode(TEXTS[0]).ids))
    cols = sorted(rng.choice(vocab, SAMPLED_COLUMNS, replace=False).tolist())
    for p in prompts:
        with torch.no_grad():
            f32 = ref(torch.tensor([p["ids"]])).logits[0].double()
            logits = exact(torch.tensor([p["ids"]])).logits[0]
        rounding = (logits - f32).abs().max().item()
        assert rounding < 5e-5, f"{name}: transformers' f32 logits are {rounding} from f64's"
        p["transformers_f32_vs_f64"] = float(f"{rounding:.3g}")
        p["columns"] = cols
        p["logits"] = [[float(f"{x:.8g}") for x in row] for row in logits[:, cols].tolist()]
        p["logsumexp"] = [float(f"{x:.8g}") for x in torch.logsumexp(logits, -1).tolist()]
    meta = dict(
        family=name, transformers=transformers.__version__, torch=torch.__version__,
        vocab=vocab, window=fam.get("window"), prompts=prompts,
    )
    (out / "expected.json").write_text(json.dumps(meta))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{name}: {size / 1e6:.2f} MB, {len(prompts)} prompts, "
          f"lengths {[len(p['ids']) for p in prompts]}", file=sys.stderr)


def build_templates():
    """transformers' apply_chat_template ids for the chat templates and tokenizers the
    project's GGUF files carry (Qwen2.5's in q05.gguf, SmolLM2's in smol.gguf), which
    families.rs compares with decide's rendering of the same files (one copy of each
    tokenizer: the GGUF files CI fetches, not a tokenizer.json per fixture)."""
    out = {}
    for key in ["q05", "smol"]:
        tok = AutoTokenizer.from_pretrained(str(MODELS), gguf_file=f"{key}.gguf")
        cases = []
        for msgs in CHATS:
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                          enable_thinking=False)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            cases.append(dict(messages=msgs, ids=list(map(int, ids))))
        out[key] = cases
    (OUT / "templates.json").write_text(json.dumps(dict(transformers=transformers.__version__, models=out)))


def build_g270():
    """Gemma 3 270M with its real weights: transformers dequantizes .models/g270.gguf (Q4_K_M)
    to f32 and writes it as a Hugging Face directory, .models/g270-hf/ (1 GB, not committed),
    with Gemma 3's own tokenizer.json and transformers' logits for prompts longer than its
    512-token window (models/tests/families.rs reads it when present)."""
    out = MODELS / "g270-hf"
    shutil.rmtree(out, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(str(MODELS), gguf_file="g270.gguf", dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(MODELS), gguf_file="g270.gguf")
    # transformers refuses to save a model loaded from GGUF: the same weights in a fresh model.
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    fresh = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    fresh.load_state_dict(model.state_dict())
    fresh.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "generation_config.json").unlink(missing_ok=True)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(out)
    rng = np.random.default_rng(3)
    words = "parcel weight route customer refund invoice the a of to and is was 12 7 2026 Lyon".split()
    texts = [
        "The capital of France is",
        " ".join(rng.choice(words, 700).tolist()) + ". In short, the parcel is",
    ]
    prompts = []
    vocab = model.config.vocab_size
    cols = sorted(set(rng.choice(vocab, SAMPLED_COLUMNS, replace=False).tolist()))
    for text in texts:
        ids = tok(text, add_special_tokens=True).input_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        # Every position of the short prompt; the last 64 of the long one (the window's
        # effect shows past position 512).
        rows = list(range(len(ids))) if len(ids) < 64 else list(range(len(ids) - 64, len(ids)))
        prompts.append(dict(text=text, ids=ids, rows=rows, columns=cols,
                            logits=logits[rows][:, cols].tolist(),
                            logsumexp=torch.logsumexp(logits[rows], -1).tolist()))
    (out / "expected.json").write_text(json.dumps(dict(
        transformers=transformers.__version__, torch=torch.__version__, prompts=prompts)))
    print(f"g270-hf: prompt lengths {[len(p['ids']) for p in prompts]}", file=sys.stderr)


if __name__ == "__main__":
    for n in sys.argv[1:] or list(FAMILIES) + ["templates"]:
        if n == "g270":
            build_g270()
        elif n == "templates":
            build_templates()
        else:
            build(n)
