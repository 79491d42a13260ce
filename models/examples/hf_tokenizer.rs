//! Writes a GGUF file's tokenizer and chat template as a Hugging Face directory's
//! `tokenizer.json` and `tokenizer_config.json`, so that a checkpoint made elsewhere (the
//! random-weight 8B shapes of bench/shapes_side_by_side.sh) reads text as the GGUF model does,
//! in decide and in vLLM alike. No Python: transformers reads GGUF tokenizers only with torch
//! installed. The files are written by `decide_models::prompter::write_hf_tokenizer`, which
//! `examples/gguf_to_hf.rs` (the whole model as a directory) uses too.
//!
//! Run: `cargo run --release -p decide-models --example hf_tokenizer -- .models/q15.gguf OUT_DIR`
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(gguf), Some(out)) = (args.next(), args.next()) else {
        return Err("usage: hf_tokenizer FILE.gguf OUT_DIR".into());
    };
    let (gguf, out) = (PathBuf::from(gguf), PathBuf::from(out));
    let prompter = decide_models::prompter::write_hf_tokenizer(&gguf, &out)?;
    println!(
        "{}: tokenizer.json ({} tokens) and tokenizer_config.json",
        out.display(),
        prompter.vocab_len()
    );
    Ok(())
}
