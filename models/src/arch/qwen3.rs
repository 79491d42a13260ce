//! `qwen3`: Qwen3 dense. Qwen2's block without q/k/v bias and with an RMSNorm over each
//! head's q and k (weights `attn_q_norm` / `q_norm`, one per head width) before RoPE;
//! `head_dim` is set apart from `hidden / heads` (128 on every size).

use super::{gguf_full_rotary, gguf_no_scaling, gguf_shape, qwen2::qwen_hf, Arch, HfConfig, Rope};
use crate::error::Result;
use crate::forward::RopeStyle;
use crate::gguf::Gguf;

pub(super) fn gguf(g: &mut Gguf) -> Result<Arch> {
    let (shape, ctx, eps, base) = gguf_shape(g, "qwen3")?;
    gguf_full_rotary(g, "qwen3", shape.4)?;
    gguf_no_scaling(g, "qwen3")?;
    let mut a = Arch::llama_like("qwen3", shape, ctx, eps, RopeStyle::Half, Rope::plain(base));
    a.qk_norm = true;
    Ok(a)
}

pub(super) fn hf(c: &HfConfig) -> Result<Arch> {
    let mut a = qwen_hf(c, "qwen3")?;
    a.qk_norm = true;
    Ok(a)
}
