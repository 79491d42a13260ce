//! `mistral` (Hugging Face `MistralForCausalLM`, Ministral): Llama's block with sliding-window
//! attention on every layer where `sliding_window` is set. llama.cpp converts these to GGUF
//! `llama` (see [`super::llama`], which reads `llama.attention.sliding_window` when present).

use super::{llama::llama_like_hf, Arch, HfConfig};
use crate::error::Result;

pub(super) fn hf(c: &HfConfig) -> Result<Arch> {
    llama_like_hf(c, "mistral")
}
