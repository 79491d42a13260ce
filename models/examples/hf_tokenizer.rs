//! Writes a GGUF file's tokenizer and chat template as a Hugging Face directory's
//! `tokenizer.json` and `tokenizer_config.json`, so that a checkpoint made elsewhere (the
//! random-weight 8B shapes of bench/shapes_side_by_side.sh) reads text as the GGUF model does,
//! in decide and in vLLM alike. No Python: transformers reads GGUF tokenizers only with torch
//! installed.
//!
//! Run: `cargo run --release -p decide-models --example hf_tokenizer -- .models/q15.gguf OUT_DIR`
use std::path::PathBuf;

use candle_core::quantized::gguf_file::{Content, Value};
use decide_models::Prompter;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(gguf), Some(out)) = (args.next(), args.next()) else {
        return Err("usage: hf_tokenizer FILE.gguf OUT_DIR".into());
    };
    let (gguf, out) = (PathBuf::from(gguf), PathBuf::from(out));
    let prompter = Prompter::load(&gguf)?;
    let content = Content::read(&mut std::fs::File::open(&gguf)?)?;
    let text = |key: &str| match content.metadata.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    let token = |key: &str| -> Option<String> {
        let id = content.metadata.get(key)?.to_u32().ok()?;
        prompter.token_str(id).map(str::to_string)
    };
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("tokenizer.json"), prompter.tokenizer_json()?)?;
    let config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": text("tokenizer.chat_template"),
        "bos_token": token("tokenizer.ggml.bos_token_id"),
        "eos_token": token("tokenizer.ggml.eos_token_id"),
        "add_bos_token": prompter.adds_bos(),
        "model_max_length": 131072,
    });
    std::fs::write(
        out.join("tokenizer_config.json"),
        serde_json::to_string_pretty(&config)?,
    )?;
    println!(
        "{}: tokenizer.json ({} tokens) and tokenizer_config.json",
        out.display(),
        prompter.vocab_len()
    );
    Ok(())
}
