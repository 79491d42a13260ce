//! `llama`: Llama 2/3.x, SmolLM2 (tied embeddings), and Mistral checkpoints converted by
//! llama.cpp. Pre-norm block, SwiGLU, optional q/k/v bias, RoPE with Llama 3.1 scaling.
//!
//! RoPE layout: llama.cpp's converter permutes the GGUF q/k weights so that rotary pairs are
//! adjacent ([`RopeStyle::Interleaved`]); Hugging Face checkpoints keep the half-split layout.
//! Llama 3.1's scaling is stored in GGUF as the tensor `rope_freqs` (a divisor per pair),
//! in `config.json` as `rope_scaling.rope_type = llama3`.

use super::{gguf_full_rotary, gguf_shape, inv_freq, Arch, HfConfig, Rope};
use crate::error::Result;
use crate::forward::RopeStyle;
use crate::gguf::Gguf;

pub(super) fn gguf(g: &mut Gguf) -> Result<Arch> {
    let (shape, ctx, eps, base) = gguf_shape(g, "llama")?;
    gguf_full_rotary(g, "llama", shape.4)?;
    let mut a = Arch::llama_like(
        "llama",
        shape,
        ctx,
        eps,
        RopeStyle::Interleaved,
        Rope::plain(base),
    );
    a.ropes[0] = gguf_rope(g, "llama", base, shape.4)?;
    // Mistral converted with a window kept (llama.cpp ignores it; transformers does not).
    if let Some(w) = g
        .usize_opt("llama.attention.sliding_window")
        .filter(|&w| w > 0)
    {
        a.slide_every_layer(w);
    }
    Ok(a)
}

/// The RoPE of `{arch}.*`: unscaled, or divided per pair by the `rope_freqs` tensor (how
/// llama.cpp stores Llama 3.1's scaling); `rope.scaling.type` other than none/linear is
/// refused.
pub(super) fn gguf_rope(g: &mut Gguf, arch: &str, base: f32, rotary_dim: usize) -> Result<Rope> {
    let mut inv = None;
    match g.str_opt(&format!("{arch}.rope.scaling.type")) {
        None | Some("none") => {}
        Some("linear") => {
            let factor = g.f64(&format!("{arch}.rope.scaling.factor"))? as f32;
            inv = Some(
                inv_freq(base, rotary_dim)
                    .iter()
                    .map(|f| f / factor)
                    .collect(),
            );
        }
        Some(other) => {
            return Err(g.err(format!(
                "RoPE scaling `{other}` is not supported for `{arch}` (supported: none, linear, \
                 and Llama 3.1's `rope_freqs`)"
            )))
        }
    }
    if g.has_tensor("rope_freqs.weight") {
        let factors = g
            .tensor("rope_freqs.weight", &candle_core::Device::Cpu)?
            .dequantize(&candle_core::Device::Cpu)?
            .to_vec1::<f32>()?;
        if factors.len() != rotary_dim / 2 {
            return Err(g.err(format!(
                "rope_freqs has {} factors for {} rotary pairs",
                factors.len(),
                rotary_dim / 2
            )));
        }
        let base_inv = inv.unwrap_or_else(|| inv_freq(base, rotary_dim));
        inv = Some(base_inv.iter().zip(&factors).map(|(f, d)| f / d).collect());
    }
    Ok(Rope {
        base,
        inv_freq: inv,
        mscale: 1.0,
    })
}

pub(super) fn hf(c: &HfConfig) -> Result<Arch> {
    llama_like_hf(c, "llama")
}

/// A Llama-shaped Hugging Face config (Llama, Mistral): shape, epsilon, context, RoPE with
/// its scaling, `sliding_window` where set.
pub(super) fn llama_like_hf(c: &HfConfig, family: &'static str) -> Result<Arch> {
    let shape = c.shape()?;
    if c.bool_opt("mlp_bias") == Some(true) {
        return Err(crate::ModelError::Load {
            path: c.path.clone(),
            reason: "`mlp_bias: true` is not supported".into(),
        });
    }
    let (theta, scaling) = c.rope_params(None)?;
    let rope = c.rope(theta, scaling.as_ref(), shape.4)?;
    let mut a = Arch::llama_like(
        family,
        shape,
        c.usize("max_position_embeddings")?,
        c.f64("rms_norm_eps")? as f32,
        RopeStyle::Half,
        rope,
    );
    if let Some(w) = c.usize_opt("sliding_window") {
        a.slide_every_layer(w);
    }
    Ok(a)
}
