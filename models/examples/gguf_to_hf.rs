//! Writes a `qwen2` GGUF model as a bf16 Hugging Face directory: `config.json`,
//! `model.safetensors`, `tokenizer.json` and `tokenizer_config.json`.
//!
//! Why: issue 53 asks that q15 as a directory answers as q15.gguf does, and the vLLM peer kit
//! (`.peer/make_hf.py`) serves q15 from exactly such a directory, made by transformers from
//! the GGUF. transformers needs torch to read a GGUF, and none is installed here, so this does
//! the same in Rust: every tensor dequantized to f32 by candle (the code decide's GGUF loader
//! runs), then rounded to bf16 to nearest even (candle's `to_dtype(BF16)`), under the names
//! decide's directory loader reads (`decide_models::arch::hf_naming`, the mapping the loader
//! itself uses); the tokenizer files come from `prompter::write_hf_tokenizer`, as in
//! `examples/hf_tokenizer.rs`.
//!
//! `--amx-exact` keeps in f32 the tensors that decide's AMX forward (`--weights amx`) does not
//! round to bf16 (norms, biases, the embedding table and the output head): the directory then
//! holds exactly the numbers the GGUF's AMX forward multiplies with, a check of the converter
//! and the loader. Without it (as the peer kit writes) those tensors are rounded too.
//!
//! Only `qwen2` is written: llama.cpp permutes `llama` q/k weights for interleaved RoPE, which
//! a directory would need un-permuted, and no other family's GGUF is at hand to test.
//!
//! Run: `cargo run --release -p decide-models --example gguf_to_hf -- .models/q15.gguf
//! /tmp/q15-hf [--amx-exact]`
use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::quantized::gguf_file::Content;
use candle_core::{DType, Device, Tensor};

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let amx_exact = args.iter().any(|a| a == "--amx-exact");
    let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [gguf, out] = paths[..] else {
        return Err("usage: gguf_to_hf FILE.gguf OUT_DIR [--amx-exact]".into());
    };
    let (gguf, out) = (PathBuf::from(gguf), PathBuf::from(out));

    let mut file = std::fs::File::open(&gguf)?;
    let content = Content::read(&mut file)?;
    let meta = |key: &str| {
        content
            .metadata
            .get(key)
            .ok_or_else(|| format!("{}: no metadata `{key}`", gguf.display()))
    };
    let arch = meta("general.architecture")?.to_string()?.clone();
    if arch != "qwen2" {
        return Err(format!("architecture `{arch}`: only qwen2 is written (see the docs)").into());
    }
    let (model_type, hf_name) =
        decide_models::arch::hf_naming(&arch).ok_or("no family for the architecture")?;
    let int = |key: &str| -> Result<u32, Error> { Ok(meta(&format!("{arch}.{key}"))?.to_u32()?) };
    // Through the f32's shortest decimal, so 1e-6 is written 1e-6, not 9.99999997e-7.
    let float = |key: &str| -> Result<f64, Error> {
        Ok(meta(&format!("{arch}.{key}"))?
            .to_f32()?
            .to_string()
            .parse()?)
    };

    // Weights: names sorted, so the file is the same on every run.
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, Tensor)> = Vec::with_capacity(names.len());
    for name in names {
        let hf = hf_name(name).ok_or_else(|| format!("no Hugging Face name for `{name}`"))?;
        let f32 = content
            .tensor(&mut file, name, &Device::Cpu)?
            .dequantize(&Device::Cpu)?;
        let unrounded_by_amx =
            f32.rank() == 1 || name == "token_embd.weight" || name == "output.weight";
        let w = if amx_exact && unrounded_by_amx {
            f32
        } else {
            f32.to_dtype(DType::BF16)?
        };
        tensors.push((hf, w));
    }
    let vocab_size = content.tensor_infos["token_embd.weight"].shape.dims()[0];
    let tied = !content.tensor_infos.contains_key("output.weight");
    std::fs::create_dir_all(&out)?;
    let format = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(tensors, Some(format), &out.join("model.safetensors"))?;

    let config = serde_json::json!({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": model_type,
        "hidden_size": int("embedding_length")?,
        "intermediate_size": int("feed_forward_length")?,
        "num_hidden_layers": int("block_count")?,
        "num_attention_heads": int("attention.head_count")?,
        "num_key_value_heads": int("attention.head_count_kv")?,
        "rms_norm_eps": float("attention.layer_norm_rms_epsilon")?,
        "rope_theta": float("rope.freq_base")?,
        "max_position_embeddings": int("context_length")?,
        "vocab_size": vocab_size,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "use_sliding_window": false,
        "bos_token_id": meta("tokenizer.ggml.bos_token_id")?.to_u32()?,
        "eos_token_id": meta("tokenizer.ggml.eos_token_id")?.to_u32()?,
        "torch_dtype": "bfloat16",
    });
    std::fs::write(
        out.join("config.json"),
        serde_json::to_string_pretty(&config)? + "\n",
    )?;
    decide_models::prompter::write_hf_tokenizer(&gguf, &out)?;
    println!(
        "{}: config.json, model.safetensors ({} tensors, bf16{}), tokenizer.json, tokenizer_config.json",
        out.display(),
        content.tensor_infos.len(),
        if amx_exact {
            "; norms, biases, embedding and head f32"
        } else {
            ""
        }
    );
    Ok(())
}
