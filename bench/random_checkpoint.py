#!/usr/bin/env python3
"""Write a Hugging Face checkpoint of a real model's shape with random bf16 weights: issue 53's
8B shapes (Qwen3-8B, Llama-3.1-8B), read side by side by decide and vLLM on the GPU machine
(bench/shapes_side_by_side.sh). No registry here ships those weights; speed depends on the
shapes alone, answers do not matter.

    bench/random_checkpoint.py SHAPE OUT_DIR --tokenizer DIR [--seed 0]

SHAPE: qwen3-8b | llama31-8b (the configs below are the published ones' structure: widths,
layers, heads, vocabulary, RoPE and its Llama 3.1 scaling). The tokenizer directory
(`tokenizer.json`, `tokenizer_config.json` with the chat template; written from a GGUF file by
models/examples/hf_tokenizer.rs) is copied in: Qwen2.5's from q15.gguf for the Qwen3 shape
(the same byte-level BPE and ChatML markers; 151,936 rows as Qwen3's), SmolLM2's from
smol.gguf for the Llama shape (49,152 tokens under a 128,256-row head).

Weights: N(0, 0.02) matrices, unit norms, made on the GPU with torch (on the GPU machine) and
written as one safetensors file by hand (the format is an 8-byte header length, a JSON header,
then the tensors' bytes), so nothing beyond torch is needed. ~16 GB per shape.
"""
import argparse
import json
import shutil
import struct
import time
from pathlib import Path

SHAPES = {
    "qwen3-8b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
        "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "max_position_embeddings": 40960, "vocab_size": 151936,
        "tie_word_embeddings": False, "attention_bias": False, "hidden_act": "silu",
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 36,
        "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645,
    },
    "llama31-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "max_position_embeddings": 131072, "vocab_size": 128256, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
    },
}


def tensors(c: dict):
    """(name, shape, is_norm) of every weight, in the HF names of both families."""
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    yield "model.embed_tokens.weight", (v, h), False
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,), True
        yield p + "self_attn.q_proj.weight", (nh * d, h), False
        yield p + "self_attn.k_proj.weight", (nkv * d, h), False
        yield p + "self_attn.v_proj.weight", (nkv * d, h), False
        yield p + "self_attn.o_proj.weight", (h, nh * d), False
        if c["model_type"] == "qwen3":
            yield p + "self_attn.q_norm.weight", (d,), True
            yield p + "self_attn.k_norm.weight", (d,), True
        yield p + "post_attention_layernorm.weight", (h,), True
        yield p + "mlp.gate_proj.weight", (f, h), False
        yield p + "mlp.up_proj.weight", (f, h), False
        yield p + "mlp.down_proj.weight", (h, f), False
    yield "model.norm.weight", (h,), True
    yield "lm_head.weight", (v, h), False


def weights(specs, seed: int):
    """Each tensor's bytes (bf16, little-endian), in `specs` order: torch on the GPU where
    there is one, else numpy (bf16 as the top half of each f32)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None:
        import numpy as np
        rng = np.random.default_rng(seed)
        for _, shape, is_norm in specs:
            x = np.ones(shape, np.float32) if is_norm else rng.normal(0, 0.02, shape).astype(np.float32)
            yield (x.view(np.uint32) >> 16).astype("<u2").tobytes()
        return
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(seed)
    for _, shape, is_norm in specs:
        if is_norm:
            t = torch.ones(shape, dtype=torch.bfloat16, device=dev)
        else:
            t = (torch.randn(shape, generator=g, device=dev) * 0.02).to(torch.bfloat16)
        yield t.contiguous().view(torch.uint8).cpu().numpy().tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true",
                    help="2 layers 64 wide (vocabulary kept), from numpy when torch is absent: "
                         "a check of the files on a machine without a GPU")
    a = ap.parse_args()
    t0 = time.time()
    c = dict(SHAPES[a.shape])
    if a.tiny:
        c.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, head_dim=64,
                 num_attention_heads=2, num_key_value_heads=1)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "config.json").write_text(json.dumps(c, indent=1))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(a.tokenizer / name, a.out / name)
    specs = list(tensors(c))
    header, offset = {}, 0
    for name, shape, _ in specs:
        n = 2
        for s in shape:
            n *= s
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"format": "pt", "made_by": f"bench/random_checkpoint.py {a.shape}"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path = a.out / "model.safetensors"
    # Renamed when whole: a server started meanwhile never finds half a file.
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for chunk in weights(specs, a.seed):
            f.write(chunk)
    partial.rename(path)
    params = offset // 2
    print(json.dumps({"shape": a.shape, "dir": str(a.out), "parameters": params,
                      "bytes": path.stat().st_size, "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
