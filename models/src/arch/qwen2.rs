//! `qwen2`: Qwen2 / Qwen2.5. Llama's block with q/k/v bias, half-split RoPE in both formats.
//! Sliding windows (`use_sliding_window`) are off in every released checkpoint and refused.

use super::{gguf_full_rotary, gguf_no_scaling, gguf_shape, Arch, HfConfig, Rope};
use crate::error::{ModelError, Result};
use crate::forward::RopeStyle;
use crate::gguf::Gguf;

pub(super) fn gguf(g: &mut Gguf) -> Result<Arch> {
    let (shape, ctx, eps, base) = gguf_shape(g, "qwen2")?;
    gguf_full_rotary(g, "qwen2", shape.4)?;
    gguf_no_scaling(g, "qwen2")?;
    Ok(Arch::llama_like(
        "qwen2",
        shape,
        ctx,
        eps,
        RopeStyle::Half,
        Rope::plain(base),
    ))
}

pub(super) fn hf(c: &HfConfig) -> Result<Arch> {
    qwen_hf(c, "qwen2")
}

/// Qwen2/Qwen3's config: Llama's keys; `use_sliding_window: true` refused.
pub(super) fn qwen_hf(c: &HfConfig, family: &'static str) -> Result<Arch> {
    if c.bool_opt("use_sliding_window") == Some(true) {
        return Err(ModelError::Load {
            path: c.path.clone(),
            reason: "`use_sliding_window: true` is not supported for Qwen".into(),
        });
    }
    let shape = c.shape()?;
    let (theta, scaling) = c.rope_params(None)?;
    let rope = c.rope(theta, scaling.as_ref(), shape.4)?;
    Ok(Arch::llama_like(
        family,
        shape,
        c.usize("max_position_embeddings")?,
        c.f64("rms_norm_eps")? as f32,
        RopeStyle::Half,
        rope,
    ))
}
