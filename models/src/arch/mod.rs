//! What differs between model families, as data: one file per architecture turns a GGUF
//! file's metadata or a Hugging Face `config.json` into an [`Arch`], and names the family's
//! weights. The one forward pass in [`crate::forward`] reads the [`Arch`] and runs every
//! family on the same machinery (explicit KV cache, shared prefixes, packed suffixes, output
//! head at read rows only), as text-embeddings-inference keeps `backends/candle/src/models/`.
//!
//! Why data and not a trait with a forward method per family: the families here differ in a
//! handful of switches inside one decoder block (q/k norm, norm placement, activation, RoPE
//! tables, sliding windows, an embedding scale); a forward per family would copy the cache,
//! packing and split-invariance logic, which is most of the code and all of the subtle parts.
//!
//! Adding a family: a file here with `gguf` and/or `hf` constructors (and `hf_name` when its
//! Hugging Face weight names differ from Llama's), an entry in [`FAMILIES`], a fixture from
//! `scripts/make-tiny-models.py` and a test in `models/tests/families.rs`.

use serde_json::Value;

use crate::error::{ModelError, Result};
use crate::forward::RopeStyle;
use crate::gguf::Gguf;

mod gemma3;
mod llama;
mod mistral;
mod phi3;
mod qwen2;
mod qwen3;

/// A family: its GGUF `general.architecture`, the Hugging Face `model_type`s it reads, and its
/// constructors.
struct Family {
    gguf_arch: &'static str,
    hf_types: &'static [&'static str],
    gguf: Option<fn(&mut Gguf) -> Result<Arch>>,
    hf: Option<fn(&HfConfig) -> Result<Arch>>,
    /// A canonical (GGUF-style) tensor name to the family's Hugging Face name.
    hf_name: fn(&str) -> Option<String>,
}

/// Every family with a forward here.
const FAMILIES: &[Family] = &[
    Family {
        gguf_arch: "llama",
        hf_types: &["llama"],
        gguf: Some(llama::gguf),
        hf: Some(llama::hf),
        hf_name: llama_hf_name,
    },
    Family {
        gguf_arch: "qwen2",
        hf_types: &["qwen2"],
        gguf: Some(qwen2::gguf),
        hf: Some(qwen2::hf),
        hf_name: llama_hf_name,
    },
    Family {
        gguf_arch: "qwen3",
        hf_types: &["qwen3"],
        gguf: Some(qwen3::gguf),
        hf: Some(qwen3::hf),
        hf_name: llama_hf_name,
    },
    Family {
        // llama.cpp writes Mistral checkpoints as `llama`; `mistral` here is the HF type.
        gguf_arch: "mistral",
        hf_types: &["mistral"],
        gguf: None,
        hf: Some(mistral::hf),
        hf_name: llama_hf_name,
    },
    Family {
        gguf_arch: "phi3",
        hf_types: &["phi3"],
        gguf: Some(phi3::gguf),
        hf: Some(phi3::hf),
        hf_name: phi3::hf_name,
    },
    Family {
        gguf_arch: "gemma3",
        hf_types: &["gemma3_text"],
        gguf: Some(gemma3::gguf),
        hf: Some(gemma3::hf),
        hf_name: gemma3::hf_name,
    },
];

/// The supported architectures, for error messages: GGUF `general.architecture` values and
/// Hugging Face `model_type`s.
pub fn supported() -> String {
    let gguf: Vec<&str> = FAMILIES
        .iter()
        .filter(|f| f.gguf.is_some())
        .map(|f| f.gguf_arch)
        .collect();
    let hf: Vec<&str> = FAMILIES
        .iter()
        .filter(|f| f.hf.is_some())
        .flat_map(|f| f.hf_types.iter().copied())
        .collect();
    format!(
        "GGUF `general.architecture` {}; Hugging Face `model_type` {}",
        gguf.join(", "),
        hf.join(", ")
    )
}

/// The Hugging Face `model_type` of the family whose GGUF `general.architecture` is
/// `gguf_arch`, and its weight naming (canonical GGUF tensor name to Hugging Face name): what
/// the directory loader reads, for a converter that writes a GGUF model as a directory
/// (`examples/gguf_to_hf.rs`). `None` for an architecture with no family here.
pub fn hf_naming(gguf_arch: &str) -> Option<(&'static str, fn(&str) -> Option<String>)> {
    FAMILIES
        .iter()
        .find(|f| f.gguf_arch == gguf_arch)
        .map(|f| (f.hf_types[0], f.hf_name))
}

/// Refuses a GGUF file whose `general.architecture` has no family here.
pub(crate) fn check_gguf_arch(g: &Gguf) -> Result<()> {
    let arch = g.str("general.architecture")?;
    if FAMILIES
        .iter()
        .any(|f| f.gguf_arch == arch && f.gguf.is_some())
    {
        Ok(())
    } else {
        Err(ModelError::UnsupportedArch {
            arch: arch.to_string(),
        })
    }
}

/// The [`Arch`] of a GGUF file, by its `general.architecture`.
pub(crate) fn from_gguf(g: &mut Gguf) -> Result<Arch> {
    let arch = g.str("general.architecture")?.to_string();
    match FAMILIES
        .iter()
        .find(|f| f.gguf_arch == arch)
        .and_then(|f| f.gguf)
    {
        Some(make) => {
            let a = make(g)?;
            a.check().map_err(|e| g.err(e))?;
            Ok(a)
        }
        None => Err(ModelError::UnsupportedArch { arch }),
    }
}

/// The [`Arch`] of a Hugging Face `config.json`, by its `model_type`, and the family's weight
/// naming.
pub(crate) fn from_hf(c: &HfConfig) -> Result<(Arch, fn(&str) -> Option<String>)> {
    let ty = c.str("model_type")?;
    match FAMILIES
        .iter()
        .find(|f| f.hf_types.contains(&ty))
        .and_then(|f| f.hf.map(|make| (make, f.hf_name)))
    {
        Some((make, names)) => {
            let a = make(c)?;
            a.check().map_err(|e| c.err(e))?;
            Ok((a, names))
        }
        None => Err(ModelError::UnsupportedArch {
            arch: ty.to_string(),
        }),
    }
}

/// The activation of the gated MLP `down(act(gate(h)) * up(h))`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (SwiGLU): Llama, Qwen, Mistral, Phi-3.
    Silu,
    /// GELU with the tanh approximation (GeGLU): Gemma.
    GeluTanh,
}

/// One table of rotary angles: a base and, where the family rescales frequencies, the
/// inverse frequencies themselves.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// `rope_theta` / `rope.freq_base`.
    pub base: f32,
    /// Inverse frequencies per rotary pair, when scaling changes them (Llama 3.1's
    /// `rope_type = llama3`, GGUF `rope_freqs`, linear scaling); `None`: `base^(-2i/d)`.
    pub inv_freq: Option<Vec<f32>>,
    /// cos and sin are multiplied by this (LongRoPE's attention factor); 1 otherwise.
    pub mscale: f32,
}

impl Rope {
    /// Unscaled RoPE with `base`.
    pub fn plain(base: f32) -> Self {
        Rope {
            base,
            inv_freq: None,
            mscale: 1.0,
        }
    }
}

/// Per decoder block: which RoPE table it uses and its attention window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerShape {
    /// Index into [`Arch::ropes`].
    pub rope: usize,
    /// Sliding window: a query at position p sees keys at positions > p - window; `None`:
    /// every earlier position (global attention).
    pub window: Option<usize>,
}

/// A family's shape and the switches of its decoder block: everything the forward pass needs
/// to know beyond the weights.
#[derive(Clone, Debug, PartialEq)]
pub struct Arch {
    /// The family (`llama`, `qwen2`, `qwen3`, `mistral`, `gemma3`).
    pub family: &'static str,
    /// Decoder blocks.
    pub n_layers: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_kv_head: usize,
    /// Per-head width (Qwen3 and Gemma set it apart from `hidden / n_head`).
    pub head_dim: usize,
    /// Longest sequence.
    pub context_length: usize,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// How rotary pairs are laid out in the stored q/k weights.
    pub rope_style: RopeStyle,
    /// Leading dims of a head that rotate (Phi's partial rotary); the rest pass through.
    pub rotary_dim: usize,
    /// The distinct RoPE tables; [`LayerShape::rope`] indexes them.
    pub ropes: Vec<Rope>,
    /// Per block.
    pub layers: Vec<LayerShape>,
    /// RMSNorm over each head's q and k before RoPE (Qwen3, Gemma 3).
    pub qk_norm: bool,
    /// Norms after attention and after the MLP as well as before them (Gemma 2/3).
    pub sandwich_norms: bool,
    /// Added to every RMSNorm weight at load: Gemma's norms multiply by `1 + w` in its
    /// checkpoints (llama.cpp's converter adds the 1 to the GGUF weights itself).
    pub norm_shift: f32,
    /// The MLP's gate activation.
    pub activation: Activation,
    /// Embeddings multiplied by this (Gemma: `sqrt(hidden)`).
    pub embed_scale: Option<f32>,
    /// Attention scores are divided by this (`sqrt(head_dim)`, Gemma's
    /// `sqrt(query_pre_attn_scalar)`).
    pub score_div: f64,
}

impl Arch {
    /// A Llama-shaped block: pre-norms, SwiGLU, full attention, one RoPE table.
    pub(crate) fn llama_like(
        family: &'static str,
        (n_layers, hidden, n_head, n_kv_head, head_dim): (usize, usize, usize, usize, usize),
        context_length: usize,
        eps: f32,
        rope_style: RopeStyle,
        rope: Rope,
    ) -> Self {
        Arch {
            family,
            n_layers,
            hidden,
            n_head,
            n_kv_head,
            head_dim,
            context_length,
            eps,
            rope_style,
            rotary_dim: head_dim,
            ropes: vec![rope],
            layers: vec![
                LayerShape {
                    rope: 0,
                    window: None
                };
                n_layers
            ],
            qk_norm: false,
            sandwich_norms: false,
            norm_shift: 0.0,
            activation: Activation::Silu,
            embed_scale: None,
            score_div: (head_dim as f64).sqrt(),
        }
    }

    /// Every layer attends within a sliding window of `window` keys (Mistral, Phi-3 where
    /// the config sets one), on the first RoPE table.
    pub(crate) fn slide_every_layer(&mut self, window: usize) {
        self.layers = vec![
            LayerShape {
                rope: 0,
                window: Some(window)
            };
            self.n_layers
        ];
    }

    /// Why decide's fused CUDA kernels cannot run this family (they implement the
    /// Llama/Qwen2/Qwen3 block: pre-norms, optional q/k norm, SwiGLU, one RoPE table over all
    /// or the leading part of each head, one attention window or none, heads 64 or 128 wide);
    /// `None` when they can.
    pub fn fused_blocker(&self) -> Option<String> {
        let mut why = Vec::new();
        let heads = format!("{}-wide heads (built: 64, 128)", self.head_dim);
        if !matches!(self.head_dim, 64 | 128) {
            why.push(heads.as_str());
        }
        if self.sandwich_norms {
            why.push("post-norms");
        }
        if self.activation != Activation::Silu {
            why.push("GELU MLP");
        }
        if self.embed_scale.is_some() {
            why.push("scaled embeddings");
        }
        if self
            .layers
            .iter()
            .any(|l| l.window != self.layers[0].window)
        {
            why.push("sliding windows on some layers only");
        }
        if self.ropes.len() > 1 {
            why.push("per-layer RoPE bases");
        }
        if self.score_div != (self.head_dim as f64).sqrt() {
            why.push("attention scale");
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    /// Checks the attention shape is consistent.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        if self.n_head == 0
            || self.n_kv_head == 0
            || self.head_dim == 0
            || self.n_head % self.n_kv_head != 0
        {
            return Err(format!(
                "inconsistent attention shape: {} heads, {} kv heads, head width {}",
                self.n_head, self.n_kv_head, self.head_dim
            ));
        }
        if self.rotary_dim % 2 != 0 || self.rotary_dim > self.head_dim {
            return Err(format!(
                "rotary width {} does not fit head width {}",
                self.rotary_dim, self.head_dim
            ));
        }
        Ok(())
    }
}

/// Llama's Hugging Face weight names for the canonical (GGUF) names the forward loads, shared
/// by the families that keep them (Qwen2/3, Mistral).
pub(crate) fn llama_hf_name(canonical: &str) -> Option<String> {
    let top = match canonical {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(t.to_string());
    }
    let rest = canonical.strip_prefix("blk.")?;
    let (i, name) = rest.split_once('.')?;
    let (base, kind) = name.rsplit_once('.')?;
    let hf = match base {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{i}.{hf}.{kind}"))
}

/// A Hugging Face `config.json` (the text part of a multimodal one is not read: only
/// text-only `model_type`s are supported).
pub(crate) struct HfConfig {
    pub json: Value,
    /// For errors.
    pub path: std::path::PathBuf,
}

impl HfConfig {
    fn err(&self, reason: String) -> ModelError {
        ModelError::Load {
            path: self.path.clone(),
            reason,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.json.get(key).filter(|v| !v.is_null())
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        self.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| self.err(format!("config.json: missing string `{key}`")))
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.usize_opt(key)
            .ok_or_else(|| self.err(format!("config.json: missing integer `{key}`")))
    }

    pub fn usize_opt(&self, key: &str) -> Option<usize> {
        self.get(key).and_then(Value::as_u64).map(|x| x as usize)
    }

    pub fn f64(&self, key: &str) -> Result<f64> {
        self.f64_opt(key)
            .ok_or_else(|| self.err(format!("config.json: missing number `{key}`")))
    }

    pub fn f64_opt(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    pub fn bool_opt(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    /// The shape every family states the same way: (layers, hidden, heads, kv heads, head
    /// width).
    pub fn shape(&self) -> Result<(usize, usize, usize, usize, usize)> {
        let hidden = self.usize("hidden_size")?;
        let n_head = self.usize("num_attention_heads")?;
        let n_kv = self.usize_opt("num_key_value_heads").unwrap_or(n_head);
        let head_dim = self.usize_opt("head_dim").unwrap_or(hidden / n_head.max(1));
        Ok((
            self.usize("num_hidden_layers")?,
            hidden,
            n_head,
            n_kv,
            head_dim,
        ))
    }

    /// The RoPE settings: transformers 5 writes `rope_parameters` (per layer type for
    /// Gemma 3), 4.x `rope_theta` + `rope_scaling`. Returns (theta, scaling object) for
    /// `layer_type` (`None`: the model's single setting).
    pub fn rope_params(&self, layer_type: Option<&str>) -> Result<(f64, Option<Value>)> {
        if let Some(p) = self.get("rope_parameters") {
            let p = match layer_type {
                Some(t) if p.get(t).is_some() => &p[t],
                _ => p,
            };
            let theta = p.get("rope_theta").and_then(Value::as_f64).ok_or_else(|| {
                self.err("config.json: `rope_parameters` has no `rope_theta`".into())
            })?;
            return Ok((theta, Some(p.clone())));
        }
        let theta = self.f64_opt("rope_theta").unwrap_or(10_000.0);
        Ok((theta, self.get("rope_scaling").cloned()))
    }

    /// A [`Rope`] for `head_dim` from `rope_params`: unscaled (`default`), `linear` or
    /// `llama3`; other scalings are refused by name.
    pub fn rope(&self, theta: f64, scaling: Option<&Value>, rotary_dim: usize) -> Result<Rope> {
        let ty = scaling
            .and_then(|s| s.get("rope_type").or_else(|| s.get("type")))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let num = |k: &str| -> Result<f64> {
            scaling
                .and_then(|s| s.get(k))
                .and_then(Value::as_f64)
                .ok_or_else(|| self.err(format!("config.json: RoPE scaling `{ty}` needs `{k}`")))
        };
        let plain = Rope::plain(theta as f32);
        match ty {
            "default" => Ok(plain),
            "linear" => {
                let factor = num("factor")? as f32;
                Ok(Rope {
                    inv_freq: Some(
                        inv_freq(plain.base, rotary_dim)
                            .iter()
                            .map(|f| f / factor)
                            .collect(),
                    ),
                    ..plain
                })
            }
            "llama3" => Ok(Rope {
                inv_freq: Some(llama3_inv_freq(
                    &inv_freq(plain.base, rotary_dim),
                    num("factor")? as f32,
                    num("low_freq_factor")? as f32,
                    num("high_freq_factor")? as f32,
                    num("original_max_position_embeddings")? as f32,
                )),
                ..plain
            }),
            other => Err(self.err(format!(
                "RoPE scaling `{other}` is not supported (supported: default, linear, llama3)"
            ))),
        }
    }

    /// `layer_types` (`sliding_attention` / `full_attention`) when the config lists them.
    pub fn layer_types(&self) -> Option<Vec<String>> {
        self.get("layer_types")?
            .as_array()?
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect()
    }
}

/// `base^(-2i/d)` for the rotary pairs, computed as transformers does (f32).
pub(crate) fn inv_freq(base: f32, rotary_dim: usize) -> Vec<f32> {
    (0..rotary_dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / rotary_dim as f32))
        .collect()
}

/// Llama 3.1's frequency rescaling (`rope_type = llama3`), as transformers'
/// `_compute_llama3_parameters`: long wavelengths slowed by `factor`, short ones kept, the
/// band between blended.
pub(crate) fn llama3_inv_freq(
    inv: &[f32],
    factor: f32,
    low_freq_factor: f32,
    high_freq_factor: f32,
    old_context: f32,
) -> Vec<f32> {
    let low_freq_wavelen = old_context / low_freq_factor;
    let high_freq_wavelen = old_context / high_freq_factor;
    inv.iter()
        .map(|&f| {
            let wavelen = 2.0 * std::f32::consts::PI / f;
            let scaled = if wavelen > low_freq_wavelen {
                f / factor
            } else {
                f
            };
            let medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
            if medium {
                let smooth = (old_context / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                (1.0 - smooth) * scaled / factor + smooth * scaled
            } else {
                scaled
            }
        })
        .collect()
}

/// The common GGUF hyper-parameters of `{arch}.*`: (layers, hidden, heads, kv heads, head
/// width), context length, epsilon, RoPE base.
pub(crate) fn gguf_shape(
    g: &Gguf,
    arch: &str,
) -> Result<((usize, usize, usize, usize, usize), usize, f32, f32)> {
    let key = |k: &str| format!("{arch}.{k}");
    let n_head = g.usize(&key("attention.head_count"))?;
    let n_kv_head = g
        .usize_opt(&key("attention.head_count_kv"))
        .unwrap_or(n_head);
    let n_layers = g.usize(&key("block_count"))?;
    let hidden = g.usize(&key("embedding_length"))?;
    let context_length = g.usize(&key("context_length"))?;
    let eps = g.f64(&key("attention.layer_norm_rms_epsilon"))? as f32;
    let freq_base = g.f64_opt(&key("rope.freq_base")).unwrap_or(10_000.0) as f32;
    if n_head == 0 {
        return Err(g.err("attention.head_count is 0"));
    }
    let head_dim = g
        .usize_opt(&key("attention.key_length"))
        .unwrap_or(hidden / n_head);
    Ok((
        (n_layers, hidden, n_head, n_kv_head, head_dim),
        context_length,
        eps,
        freq_base,
    ))
}

/// Refuses GGUF RoPE scaling other than none (families that support one read it first).
pub(crate) fn gguf_no_scaling(g: &Gguf, arch: &str) -> Result<()> {
    if let Some(scaling) = g.str_opt(&format!("{arch}.rope.scaling.type")) {
        if scaling != "none" {
            return Err(g.err(format!(
                "RoPE scaling `{scaling}` is not supported for `{arch}`"
            )));
        }
    }
    Ok(())
}

/// Refuses a GGUF whose rotary width is not the head width.
pub(crate) fn gguf_full_rotary(g: &Gguf, arch: &str, head_dim: usize) -> Result<()> {
    let rope_dim = g
        .usize_opt(&format!("{arch}.rope.dimension_count"))
        .unwrap_or(head_dim);
    if rope_dim != head_dim {
        return Err(g.err(format!(
            "partial rotary embeddings ({rope_dim} of {head_dim} dims) are not supported for `{arch}`"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> HfConfig {
        HfConfig {
            json: serde_json::from_str(json).unwrap(),
            path: "config.json".into(),
        }
    }

    /// transformers 4.x configs (`rope_theta` + `rope_scaling`, no `layer_types`) as the
    /// released checkpoints ship them; the fixtures are written by transformers 5, whose
    /// `rope_parameters` the family tests cover.
    #[test]
    fn llama31_v4_config() {
        let c = config(
            r#"{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 131072, "rope_theta": 500000.0,
                "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}}"#,
        );
        let (a, _) = from_hf(&c).unwrap();
        assert_eq!(
            (a.head_dim, a.n_kv_head, a.rope_style),
            (128, 8, RopeStyle::Half)
        );
        let inv = a.ropes[0].inv_freq.as_ref().unwrap();
        let plain = inv_freq(500000.0, 128);
        // High frequencies kept, the lowest slowed by the factor, the band between blended.
        assert_eq!(inv[0], plain[0]);
        assert!((inv[63] - plain[63] / 8.0).abs() <= plain[63] * 1e-6);
        assert!(inv.iter().zip(&plain).any(|(s, p)| s < p && *s > p / 8.0));
        assert!(
            a.fused_blocker().is_none(),
            "Llama 3.1 keeps the fused path"
        );
    }

    #[test]
    fn gemma3_1b_v4_config() {
        let c = config(
            r#"{"model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 26,
                "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
                "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                "rope_local_base_freq": 10000.0, "rope_scaling": null, "sliding_window": 512,
                "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
                "final_logit_softcapping": null, "attn_logit_softcapping": null,
                "hidden_activation": "gelu_pytorch_tanh"}"#,
        );
        let (a, names) = from_hf(&c).unwrap();
        let global: Vec<usize> = (0..a.n_layers)
            .filter(|&i| a.layers[i].window.is_none())
            .collect();
        assert_eq!(global, vec![5, 11, 17, 23]);
        assert!(a
            .layers
            .iter()
            .all(|l| l.window.is_none() || l.window == Some(512)));
        assert_eq!((a.ropes[0].base, a.ropes[1].base), (1e6, 1e4));
        assert!(a.layers.iter().all(|l| (l.rope == 0) == l.window.is_none()));
        assert_eq!(a.embed_scale, Some((1152f64).sqrt() as f32));
        assert_eq!((a.score_div, a.norm_shift), (16.0, 1.0));
        assert_eq!(
            names("blk.3.ffn_norm.weight").as_deref(),
            Some("model.layers.3.pre_feedforward_layernorm.weight")
        );
        let why = a.fused_blocker().unwrap();
        assert!(
            why.contains("sliding windows on some layers") && why.contains("256-wide heads"),
            "{why}"
        );
    }

    /// The families whose blocks the fused kernels implement: Qwen3 (q/k norm, heads wider
    /// than hidden / heads), Phi-4-mini (partial rotary, heads 128 wide), Mistral (one
    /// window on every layer); Phi-3.5 (heads 96 wide) is not.
    #[test]
    fn fused_path_families() {
        let qwen3_8b = config(
            r#"{"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
                "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                "rms_norm_eps": 1e-6, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
                "use_sliding_window": false, "sliding_window": null}"#,
        );
        let phi4_mini = config(
            r#"{"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
                "num_attention_heads": 24, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                "rope_theta": 10000.0, "partial_rotary_factor": 0.75, "sliding_window": 262144}"#,
        );
        let mistral = config(
            r#"{"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 32768, "rope_theta": 10000.0,
                "sliding_window": 4096}"#,
        );
        for (name, c) in [
            ("qwen3", qwen3_8b),
            ("phi4-mini", phi4_mini),
            ("mistral", mistral),
        ] {
            let (a, _) = from_hf(&c).unwrap();
            assert_eq!(a.fused_blocker(), None, "{name}");
        }
        let (a, _) = from_hf(&config(
            r#"{"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 4096, "rope_theta": 10000.0}"#,
        ))
        .unwrap();
        assert!(a.fused_blocker().unwrap().contains("96-wide heads"));
    }

    #[test]
    fn phi35_mini_v4_config() {
        let short: Vec<f64> = (0..48).map(|i| 1.0 + i as f64 * 0.01).collect();
        let c = config(&format!(
            r#"{{"model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                "rope_theta": 10000.0, "sliding_window": 262144,
                "rope_scaling": {{"type": "longrope", "short_factor": {short:?},
                                  "long_factor": {short:?}}}}}"#
        ));
        let (a, names) = from_hf(&c).unwrap();
        assert_eq!((a.head_dim, a.rotary_dim, a.context_length), (96, 96, 4096));
        let want = (1.0 + (32f64).ln() / (4096f64).ln()).sqrt() as f32;
        assert_eq!(a.ropes[0].mscale, want);
        assert_eq!(
            names("blk.0.attn_qkv.weight").as_deref(),
            Some("model.layers.0.self_attn.qkv_proj.weight")
        );
    }

    #[test]
    fn unsupported_scaling_and_types_are_named() {
        let c = config(
            r#"{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
                "num_attention_heads": 1, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}"#,
        );
        let err = from_hf(&c).err().unwrap().to_string();
        assert!(err.contains("yarn") && err.contains("llama3"), "{err}");
        let c = config(r#"{"model_type": "qwen3_moe"}"#);
        let err = from_hf(&c).err().unwrap().to_string();
        assert!(
            err.contains("qwen3_moe") && err.contains("gemma3_text"),
            "{err}"
        );
    }
}
