//! `phi3`: Phi-3, Phi-3.5 and Phi-4-mini. Llama's block with the q/k/v projections in one
//! matrix (`qkv_proj`, GGUF `attn_qkv`) and gate and up in one (`gate_up_proj`, GGUF
//! `ffn_up` of twice the width), split at load; partial rotary (`partial_rotary_factor`);
//! LongRoPE scaling; a sliding window on every layer where the config sets one.
//!
//! LongRoPE picks one of two factor sets by sequence length (transformers: the short factors
//! while the sequence fits `original_max_position_embeddings`, the long ones for every
//! position once it does not). decide's RoPE tables serve cached prefixes of any later
//! length, so only the short factors are served, exactly, and the context is capped at
//! `original_max_position_embeddings` (4k for Phi-3.5-mini) instead of reading longer
//! prompts with other angles than transformers would.

use serde_json::Value;

use super::{gguf_shape, llama_hf_name, Arch, HfConfig, Rope};
use crate::error::{ModelError, Result};
use crate::forward::RopeStyle;
use crate::gguf::Gguf;

/// `1 / (factor_i * base^(2i/d))` as transformers' `_compute_longrope_parameters`.
fn longrope_inv_freq(base: f32, rotary_dim: usize, factors: &[f32]) -> Vec<f32> {
    (0..rotary_dim)
        .step_by(2)
        .zip(factors)
        .map(|(i, f)| 1f32 / (f * base.powf(i as f32 / rotary_dim as f32)))
        .collect()
}

pub(super) fn gguf(g: &mut Gguf) -> Result<Arch> {
    let (shape, ctx, eps, base) = gguf_shape(g, "phi3")?;
    let rotary = g.usize_opt("phi3.rope.dimension_count").unwrap_or(shape.4);
    let mut a = Arch::llama_like("phi3", shape, ctx, eps, RopeStyle::Half, Rope::plain(base));
    a.rotary_dim = rotary;
    if g.has_tensor("rope_factors_short.weight") {
        let short = g
            .tensor("rope_factors_short.weight", &candle_core::Device::Cpu)?
            .dequantize(&candle_core::Device::Cpu)?
            .to_vec1::<f32>()?;
        if short.len() != rotary / 2 {
            return Err(g.err(format!(
                "rope_factors_short has {} factors for {} rotary pairs",
                short.len(),
                rotary / 2
            )));
        }
        let original = g
            .usize_opt("phi3.rope.scaling.original_context_length")
            .unwrap_or(ctx);
        let mscale = g.f64_opt("phi3.rope.scaling.attn_factor").unwrap_or(1.0) as f32;
        a.ropes[0] = Rope {
            base,
            inv_freq: Some(longrope_inv_freq(base, rotary, &short)),
            mscale,
        };
        a.context_length = a.context_length.min(original);
    }
    if let Some(w) = g
        .usize_opt("phi3.attention.sliding_window")
        .filter(|&w| w > 0)
    {
        a.slide_every_layer(w);
    }
    Ok(a)
}

pub(super) fn hf(c: &HfConfig) -> Result<Arch> {
    let refuse = |reason: String| ModelError::Load {
        path: c.path.clone(),
        reason,
    };
    let shape = c.shape()?;
    let (theta, scaling) = c.rope_params(None)?;
    let partial = scaling
        .as_ref()
        .and_then(|s| s.get("partial_rotary_factor"))
        .and_then(Value::as_f64)
        .or_else(|| c.f64_opt("partial_rotary_factor"))
        .unwrap_or(1.0);
    let rotary = (shape.4 as f64 * partial) as usize;
    let max_pos = c.usize("max_position_embeddings")?;
    let ty = scaling
        .as_ref()
        .and_then(|s| s.get("rope_type").or_else(|| s.get("type")))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let mut context = max_pos;
    let rope = match ty {
        "longrope" => {
            let s = scaling
                .as_ref()
                .expect("a scaling type comes from an object");
            let short: Vec<f32> = s
                .get("short_factor")
                .and_then(Value::as_array)
                .ok_or_else(|| refuse("longrope needs `short_factor`".into()))?
                .iter()
                .map(|v| v.as_f64().map(|x| x as f32))
                .collect::<Option<_>>()
                .ok_or_else(|| refuse("`short_factor` holds a non-number".into()))?;
            if short.len() != rotary / 2 {
                return Err(refuse(format!(
                    "`short_factor` has {} entries for {} rotary pairs",
                    short.len(),
                    rotary / 2
                )));
            }
            let original = s
                .get("original_max_position_embeddings")
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .or_else(|| c.usize_opt("original_max_position_embeddings"));
            let factor = match original {
                Some(o) => max_pos as f64 / o as f64,
                None => s.get("factor").and_then(Value::as_f64).unwrap_or(1.0),
            };
            let original = original.unwrap_or(max_pos);
            let mscale = match s.get("attention_factor").and_then(Value::as_f64) {
                Some(f) => f,
                None if factor <= 1.0 => 1.0,
                None => (1.0 + factor.ln() / (original as f64).ln()).sqrt(),
            };
            context = original;
            Rope {
                base: theta as f32,
                inv_freq: Some(longrope_inv_freq(theta as f32, rotary, &short)),
                mscale: mscale as f32,
            }
        }
        _ => c.rope(theta, scaling.as_ref(), rotary)?,
    };
    let mut a = Arch::llama_like(
        "phi3",
        shape,
        context,
        c.f64("rms_norm_eps")? as f32,
        RopeStyle::Half,
        rope,
    );
    a.rotary_dim = rotary;
    if let Some(w) = c.usize_opt("sliding_window") {
        a.slide_every_layer(w);
    }
    Ok(a)
}

/// Phi-3's fused projections under their canonical (GGUF) names: `attn_qkv` and `ffn_up`
/// (gate and up together), split by the loader.
pub(super) fn hf_name(canonical: &str) -> Option<String> {
    let rest = canonical.strip_prefix("blk.");
    if let Some((i, name)) = rest.and_then(|r| r.split_once('.')) {
        let hf = match name {
            "attn_qkv.weight" => Some("self_attn.qkv_proj.weight"),
            "ffn_up.weight" => Some("mlp.gate_up_proj.weight"),
            _ => None,
        };
        if let Some(hf) = hf {
            return Some(format!("model.layers.{i}.{hf}"));
        }
    }
    llama_hf_name(canonical)
}
