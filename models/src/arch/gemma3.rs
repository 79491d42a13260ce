//! `gemma3` (Hugging Face `gemma3_text`): Gemma 3's text decoder.
//!
//! Its block differs from Llama's in every switch [`Arch`] has: interleaved local
//! (sliding-window) and global layers, each kind with its own RoPE base (local 10,000 unscaled;
//! global `rope_theta` with the model's scaling); an RMSNorm over each head's q and k; norms
//! before *and* after attention and the MLP; a GELU-tanh MLP; embeddings multiplied by
//! `sqrt(hidden)`; scores scaled by `query_pre_attn_scalar`; RMSNorm weights applied as
//! `1 + w` (llama.cpp's converter adds the 1 to the GGUF weights, so only Hugging Face
//! weights are shifted at load).

use super::{
    gguf_shape, llama::gguf_rope, llama_hf_name, Activation, Arch, HfConfig, LayerShape, Rope,
};
use crate::error::{ModelError, Result};
use crate::forward::RopeStyle;
use crate::gguf::Gguf;

/// Every sixth layer is global, the others local, in llama.cpp (`set_swa_pattern(6)`) and in
/// configs that predate `layer_types`.
const SWA_PATTERN: usize = 6;

/// The local layers' RoPE base (llama.cpp's `rope_freq_base_train_swa`; transformers'
/// `rope_local_base_freq`).
const LOCAL_BASE: f32 = 10_000.0;

/// Gemma 3's block switches on a Llama-shaped start: `windows[i]` is layer i's window.
fn gemma(
    shape: (usize, usize, usize, usize, usize),
    ctx: usize,
    eps: f32,
    global: Rope,
    local: Rope,
    windows: Vec<Option<usize>>,
    query_pre_attn_scalar: f64,
    norm_shift: f32,
) -> Arch {
    let mut a = Arch::llama_like("gemma3", shape, ctx, eps, RopeStyle::Half, global);
    a.ropes.push(local);
    a.layers = windows
        .into_iter()
        .map(|window| LayerShape {
            rope: if window.is_some() { 1 } else { 0 },
            window,
        })
        .collect();
    a.qk_norm = true;
    a.sandwich_norms = true;
    a.norm_shift = norm_shift;
    a.activation = Activation::GeluTanh;
    a.embed_scale = Some((shape.1 as f64).sqrt() as f32);
    a.score_div = query_pre_attn_scalar.sqrt();
    a
}

pub(super) fn gguf(g: &mut Gguf) -> Result<Arch> {
    let (shape, ctx, eps, base) = gguf_shape(g, "gemma3")?;
    let rotary = g
        .usize_opt("gemma3.rope.dimension_count")
        .unwrap_or(shape.4);
    if rotary != shape.4 {
        return Err(g.err(format!(
            "partial rotary ({rotary} of {}) in gemma3",
            shape.4
        )));
    }
    let window = g.usize("gemma3.attention.sliding_window")?;
    let pattern = g
        .usize_opt("gemma3.attention.sliding_window_pattern")
        .unwrap_or(SWA_PATTERN);
    let windows = (0..shape.0)
        .map(|i| ((i + 1) % pattern != 0).then_some(window))
        .collect();
    let global = gguf_rope(g, "gemma3", base, shape.4)?;
    // llama.cpp: 1/sqrt(head width), except Gemma 3 27B (62 layers): 1/sqrt(hidden / heads).
    let scalar = if shape.0 == 62 {
        (shape.1 / shape.2) as f64
    } else {
        shape.4 as f64
    };
    Ok(gemma(
        shape,
        ctx,
        eps,
        global,
        Rope::plain(LOCAL_BASE),
        windows,
        scalar,
        0.0,
    ))
}

pub(super) fn hf(c: &HfConfig) -> Result<Arch> {
    let refuse = |reason: String| ModelError::Load {
        path: c.path.clone(),
        reason,
    };
    for key in ["final_logit_softcapping", "attn_logit_softcapping"] {
        if c.get(key).is_some() {
            return Err(refuse(format!("gemma3: `{key}` is not supported")));
        }
    }
    let act = c
        .get("hidden_activation")
        .and_then(|v| v.as_str())
        .unwrap_or("gelu_pytorch_tanh");
    if act != "gelu_pytorch_tanh" {
        return Err(refuse(format!(
            "gemma3: activation `{act}` is not supported (supported: gelu_pytorch_tanh)"
        )));
    }
    let shape = c.shape()?;
    let window = c.usize("sliding_window")?;
    let windows: Vec<Option<usize>> = match c.layer_types() {
        Some(types) if types.len() == shape.0 => types
            .iter()
            .map(|t| match t.as_str() {
                "sliding_attention" => Ok(Some(window)),
                "full_attention" => Ok(None),
                other => Err(refuse(format!("gemma3: unknown layer type `{other}`"))),
            })
            .collect::<Result<_>>()?,
        Some(types) => {
            return Err(refuse(format!(
                "gemma3: {} layer types for {} layers",
                types.len(),
                shape.0
            )))
        }
        None => {
            let pattern = c.usize_opt("sliding_window_pattern").unwrap_or(SWA_PATTERN);
            (0..shape.0)
                .map(|i| ((i + 1) % pattern != 0).then_some(window))
                .collect()
        }
    };
    let (theta, scaling) = c.rope_params(Some("full_attention"))?;
    let global = c.rope(theta, scaling.as_ref(), shape.4)?;
    let local = match c.get("rope_parameters") {
        Some(_) => {
            let (theta, scaling) = c.rope_params(Some("sliding_attention"))?;
            c.rope(theta, scaling.as_ref(), shape.4)?
        }
        None => Rope::plain(
            c.f64_opt("rope_local_base_freq")
                .map_or(LOCAL_BASE, |b| b as f32),
        ),
    };
    let scalar = c.f64_opt("query_pre_attn_scalar").unwrap_or(shape.4 as f64);
    Ok(gemma(
        shape,
        c.usize("max_position_embeddings")?,
        c.f64("rms_norm_eps")? as f32,
        global,
        local,
        windows,
        scalar,
        1.0,
    ))
}

/// Gemma 3's Hugging Face names: Llama's, but `post_attention_layernorm` is the norm after
/// attention and the MLP has norms of its own before and after it.
pub(super) fn hf_name(canonical: &str) -> Option<String> {
    let rest = canonical.strip_prefix("blk.");
    if let Some((i, name)) = rest.and_then(|r| r.split_once('.')) {
        let hf = match name {
            "post_attention_norm.weight" => Some("post_attention_layernorm"),
            "ffn_norm.weight" => Some("pre_feedforward_layernorm"),
            "post_ffw_norm.weight" => Some("post_feedforward_layernorm"),
            _ => None,
        };
        if let Some(hf) = hf {
            return Some(format!("model.layers.{i}.{hf}.weight"));
        }
    }
    llama_hf_name(canonical)
}
