//! Our own transformer forward pass over candle ops, for GGUF `llama` and `qwen2` models.
//!
//! Why our own and not candle-transformers' `quantized_llama` / `quantized_qwen2`: those keep
//! the KV cache inside the model (`&mut self`, one conversation at a time) and always compute
//! logits. Here the model is immutable and shareable across threads, the KV cache is an
//! explicit value passed in and returned ([`KvCache`]), so a caller can prefill a shared prefix
//! once and run many suffixes against it, and only the rows the caller asks for leave the
//! stack (the output head is applied separately, by [`Transformer::head`], to those rows
//! only).
//!
//! The arithmetic follows candle-transformers step by step (same ops, same order: RMSNorm,
//! quantized matmuls, RoPE tables computed the same way, scaled dot-product attention with a
//! causal mask, SwiGLU MLP). With [`Numerics::Reference`] our logits equal theirs bit for bit
//! (a test checks it); the default [`Numerics::SplitInvariant`] changes only the rounding, so
//! that cached and uncached reads agree exactly (see [`KV_PAD`]).
//!
//! RoPE layout: llama.cpp's converter permutes the q/k weights of `llama` models so that
//! rotary pairs are adjacent ("interleaved", `rope_i`), while `qwen2` keeps the Hugging Face
//! half-split layout (NEOX style, `rope`). This is the same choice as llama.cpp's
//! `llama_model_rope_type` and candle-transformers.
//!
//! Everything runs on the `Device` the tensors were loaded on; there is no CPU-only path.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::error::{ModelError, Result};
use crate::gguf::Gguf;

/// Attention runs over a key/value length padded with masked zeros to a multiple of this.
///
/// Why: candle's CPU softmax sums a row in SIMD chunks of 32 floats and adds the tail one by
/// one, and the attention-weighted sum likewise depends on the row length; so the same query
/// row gives results that differ in the last bit depending on how many keys follow it (masked
/// or not). The quantized matmuls round activations to 8 bits, which turns such last-bit
/// differences into visible logit differences (0.3 on Qwen2.5-0.5B). With every key length a
/// multiple of 32, masked positions only ever add exact zeros, and a read is bit-for-bit the
/// same whether the prompt ran in one pass or as a cached prefix plus a suffix.
pub const KV_PAD: usize = 32;

/// How rotary position embeddings pair up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): GGUF `llama` (weights permuted by the converter).
    Interleaved,
    /// Pairs (i, i + d/2): GGUF `qwen2` (NEOX style).
    Half,
}

/// Which arithmetic layout a forward pass uses. Both compute the same function; they differ
/// in float rounding only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Numerics {
    /// The default: on CPU a row's result is bit-for-bit independent of how many rows and
    /// keys come with it (see [`KV_PAD`]), so a cached prefix plus a suffix reads exactly
    /// like one pass. Differs from candle-transformers by float rounding only.
    #[default]
    SplitInvariant,
    /// Exactly the op sequence of candle-transformers' quantized models (no key padding, no
    /// row duplication), for bit-level comparison against them in tests.
    Reference,
}

/// How weight matrices are held on the device (chosen at load, [`crate::LoadOptions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WeightFormat {
    /// As stored in the GGUF file (Q4_K, Q8_0, ...), multiplied by candle's quantized
    /// kernels, which round activations to 8 bits. Least memory; the file's own format.
    #[default]
    Quantized,
    /// Dequantized once at load to f32 and multiplied with dense matmuls: ~4x the memory of a
    /// 4-bit file, but on CPU prefill runs ~5x faster (candle has no SIMD kernels for
    /// several quantized formats) and activations are not rounded.
    F32,
    /// Dequantized to f16 (activations cast to f16 for each matmul).
    F16,
    /// Dequantized to bf16 (activations cast to bf16 for each matmul); meant for CUDA.
    BF16,
}

/// A weight matrix `(out, in)` in either form.
enum Linear {
    Quant(QMatMul),
    /// The transposed weight `(in, out)`, contiguous: a contiguous right-hand side keeps
    /// candle's gemm rounding independent of the number of rows (see [`KV_PAD`]).
    Dense(Tensor),
}

impl Linear {
    fn new(q: QTensor, format: WeightFormat, device: &Device) -> candle_core::Result<Self> {
        Self::from_arc(Arc::new(q), format, device)
    }

    fn from_arc(
        q: Arc<QTensor>,
        format: WeightFormat,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let dtype = match format {
            WeightFormat::Quantized => return Ok(Linear::Quant(QMatMul::from_arc(q)?)),
            WeightFormat::F32 => DType::F32,
            WeightFormat::F16 => DType::F16,
            WeightFormat::BF16 => DType::BF16,
        };
        let w = q.dequantize(device)?;
        Ok(Linear::Dense(w.t()?.to_dtype(dtype)?.contiguous()?))
    }

    /// `x @ W^T` for `x` of shape `(..., in)`, f32 in and out.
    fn forward(&self, x: &Tensor, split_invariant: bool) -> candle_core::Result<Tensor> {
        match self {
            Linear::Quant(w) => mm(w, x, split_invariant),
            Linear::Dense(wt) => {
                let y = x.to_dtype(wt.dtype())?.broadcast_matmul(wt)?;
                y.to_dtype(DType::F32)
            }
        }
    }
}

/// Where an attention call's keys come from.
#[derive(Clone, Copy)]
enum Keys<'a> {
    /// The cache's positions followed by this pass's tokens (one sequence).
    Sequential { past: Option<&'a (Tensor, Tensor)> },
    /// Several suffixes packed into one pass: the shared prefix, then each suffix's block of
    /// rows `(start, len)` placed at a KV_PAD-aligned column.
    Packed {
        prefix: Option<&'a (Tensor, Tensor)>,
        blocks: &'a [(usize, usize)],
    },
}

/// One decoder block's weights.
struct Layer {
    attn_norm: Tensor,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    bq: Option<Tensor>,
    bk: Option<Tensor>,
    bv: Option<Tensor>,
    wo: Linear,
    ffn_norm: Tensor,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The keys and values of every token seen so far, per layer: K and V of shape
/// `(1, n_kv_head, len, head_dim)`, RoPE already applied to K. Immutable; a forward pass
/// returns a new cache (the old one stays valid), so one prefix cache can seed many suffixes.
/// Cloning is cheap (tensors are reference-counted).
#[derive(Clone, Debug)]
pub struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
}

impl KvCache {
    /// Number of token positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no positions are held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of device memory held by the keys and values (f32).
    pub fn size_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * 4)
            .sum()
    }
}

/// Shape facts of a loaded transformer.
#[derive(Clone, Debug)]
pub struct Dims {
    /// Decoder blocks.
    pub n_layers: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_kv_head: usize,
    /// Per-head width.
    pub head_dim: usize,
    /// Rows of the output head (logits per position).
    pub vocab_size: usize,
    /// Longest sequence the model (and our RoPE tables) support.
    pub context_length: usize,
}

/// A decoder-only transformer with quantized weights, immutable after load (`Send + Sync`).
pub struct Transformer {
    embed: Arc<QTensor>,
    layers: Vec<Layer>,
    out_norm: Tensor,
    head: Linear,
    cos: Tensor,
    sin: Tensor,
    rope: RopeStyle,
    eps: f32,
    dims: Dims,
    device: Device,
}

impl Transformer {
    /// Loads the weights of a `llama` or `qwen2` GGUF onto `device`.
    pub(crate) fn load(
        g: &mut Gguf,
        arch: &str,
        device: &Device,
        format: WeightFormat,
    ) -> Result<Self> {
        let rope = match arch {
            "llama" => RopeStyle::Interleaved,
            "qwen2" => RopeStyle::Half,
            other => {
                return Err(ModelError::UnsupportedArch {
                    arch: other.to_string(),
                })
            }
        };
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
        if n_head == 0 || n_kv_head == 0 || hidden % n_head != 0 || n_head % n_kv_head != 0 {
            return Err(g.err(format!(
                "inconsistent attention shape: {hidden} wide, {n_head} heads, {n_kv_head} kv heads"
            )));
        }
        let head_dim = hidden / n_head;
        let rope_dim = g
            .usize_opt(&key("rope.dimension_count"))
            .unwrap_or(head_dim);
        if rope_dim != head_dim {
            return Err(g.err(format!(
                "partial rotary embeddings ({rope_dim} of {head_dim} dims) are not supported"
            )));
        }
        if let Some(scaling) = g.str_opt(&key("rope.scaling.type")) {
            if scaling != "none" {
                return Err(g.err(format!("RoPE scaling `{scaling}` is not supported")));
            }
        }

        let dense = |g: &mut Gguf, name: &str| -> Result<Tensor> {
            let q = g.tensor(name, device)?;
            q.dequantize(device)
                .map_err(|e| g.err(format!("cannot dequantize `{name}`: {e}")))
        };
        let qmm = |g: &mut Gguf, name: &str| -> Result<Linear> {
            let q = g.tensor(name, device)?;
            Linear::new(q, format, device)
                .map_err(|e| g.err(format!("cannot prepare `{name}`: {e}")))
        };
        let bias = |g: &mut Gguf, name: &str| -> Result<Option<Tensor>> {
            if g.has_tensor(name) {
                dense(g, name).map(Some)
            } else {
                Ok(None)
            }
        };

        let embd_q: QTensor = g.tensor("token_embd.weight", device)?;
        let (vocab_size, embd_width) = embd_q.shape().dims2().map_err(|e| g.err(e.to_string()))?;
        if embd_width != hidden {
            return Err(g.err(format!(
                "token_embd is {embd_width} wide, expected {hidden}"
            )));
        }
        // Rows are looked up from the stored (quantized) table and dequantized per token,
        // giving the same values as dequantizing the whole table (545 MB of f32 for Qwen's
        // 151,936 x 896) without holding it.
        let embed = Arc::new(embd_q);
        // Tied embeddings (SmolLM2): the output head is the embedding matrix.
        let head = if g.has_tensor("output.weight") {
            let out = g.tensor("output.weight", device)?;
            let rows = out.shape().dims2().map_err(|e| g.err(e.to_string()))?.0;
            if rows != vocab_size {
                return Err(g.err(format!(
                    "output head has {rows} rows, embedding {vocab_size}"
                )));
            }
            Linear::new(out, format, device)
        } else {
            Linear::from_arc(embed.clone(), format, device)
        }
        .map_err(|e| g.err(format!("cannot prepare the output head: {e}")))?;
        let out_norm = dense(g, "output_norm.weight")?;

        let mut layers = Vec::with_capacity(n_layers);
        for i in 0..n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            layers.push(Layer {
                attn_norm: dense(g, &n("attn_norm.weight"))?,
                wq: qmm(g, &n("attn_q.weight"))?,
                wk: qmm(g, &n("attn_k.weight"))?,
                wv: qmm(g, &n("attn_v.weight"))?,
                bq: bias(g, &n("attn_q.bias"))?,
                bk: bias(g, &n("attn_k.bias"))?,
                bv: bias(g, &n("attn_v.bias"))?,
                wo: qmm(g, &n("attn_output.weight"))?,
                ffn_norm: dense(g, &n("ffn_norm.weight"))?,
                gate: qmm(g, &n("ffn_gate.weight"))?,
                up: qmm(g, &n("ffn_up.weight"))?,
                down: qmm(g, &n("ffn_down.weight"))?,
            });
        }

        let (cos, sin) = rope_tables(head_dim, freq_base, context_length, device)
            .map_err(|e| g.err(format!("cannot build RoPE tables: {e}")))?;
        Ok(Self {
            embed,
            layers,
            out_norm,
            head,
            cos,
            sin,
            rope,
            eps,
            dims: Dims {
                n_layers,
                hidden,
                n_head,
                n_kv_head,
                head_dim,
                vocab_size,
                context_length,
            },
            device: device.clone(),
        })
    }

    /// Shape facts.
    pub fn dims(&self) -> &Dims {
        &self.dims
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Runs `tokens` at positions `start_pos..start_pos + tokens.len()`, attending to `cache`
    /// (which must hold exactly the `start_pos` earlier positions; `None` means `start_pos`
    /// must be 0). Returns the final hidden states (before the output norm) at `rows`
    /// (indices into `tokens`), shape `(rows.len(), hidden)`, and the cache extended by
    /// `tokens`.
    pub fn forward(
        &self,
        tokens: &[u32],
        start_pos: usize,
        cache: Option<&KvCache>,
        rows: &[usize],
    ) -> Result<(Tensor, KvCache)> {
        self.forward_with(tokens, start_pos, cache, rows, Numerics::SplitInvariant)
    }

    /// [`Transformer::forward`] with a chosen arithmetic layout ([`Numerics`]).
    pub fn forward_with(
        &self,
        tokens: &[u32],
        start_pos: usize,
        cache: Option<&KvCache>,
        rows: &[usize],
        numerics: Numerics,
    ) -> Result<(Tensor, KvCache)> {
        let pad = numerics == Numerics::SplitInvariant;
        let n = tokens.len();
        if n == 0 {
            return Err(ModelError::EmptyPrompt);
        }
        let held = cache.map_or(0, |c| c.len);
        if held != start_pos {
            return Err(ModelError::Cache(format!(
                "the cache holds {held} positions but the tokens start at position {start_pos}"
            )));
        }
        if let Some(c) = cache {
            if c.layers.len() != self.layers.len() {
                return Err(ModelError::Cache(format!(
                    "the cache has {} layers, this model {}",
                    c.layers.len(),
                    self.layers.len()
                )));
            }
        }
        let total = start_pos + n;
        if total > self.dims.context_length {
            return Err(ModelError::PromptTooLong {
                tokens: total,
                limit: self.dims.context_length,
            });
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= self.dims.vocab_size) {
            return Err(ModelError::TokenOutOfRange {
                id,
                vocab_size: self.dims.vocab_size,
            });
        }
        if let Some(&r) = rows.iter().find(|&&r| r >= n) {
            return Err(ModelError::Compute(format!(
                "row {r} requested from {n} tokens"
            )));
        }

        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed.embedding(&ids)?.unsqueeze(0)?; // (1, n, hidden), f32
        let kv_len = if pad {
            total.next_multiple_of(KV_PAD)
        } else {
            total
        };
        let mask = if n > 1 || kv_len > total {
            Some(causal_mask(n, start_pos, kv_len, &self.device)?)
        } else {
            None
        };
        let cos = self.cos.narrow(0, start_pos, n)?;
        let sin = self.sin.narrow(0, start_pos, n)?;

        let mut new_cache = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let past = cache.map(|c| &c.layers[i]);
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, self.eps)?;
            let (attn, kv) = self.attention(
                layer,
                &h,
                (&cos, &sin),
                Keys::Sequential { past },
                mask.as_ref(),
                pad,
            )?;
            new_cache.push(kv);
            x = (attn + &x)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, self.eps)?;
            let mlp = layer.down.forward(
                &(candle_nn::ops::silu(&layer.gate.forward(&h, pad)?)?
                    * layer.up.forward(&h, pad)?)?,
                pad,
            )?;
            x = (mlp + &x)?;
        }

        let x = x.squeeze(0)?; // (n, hidden)
        let picked = if rows.len() == 1 {
            x.narrow(0, rows[0], 1)?
        } else {
            let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
            x.index_select(&Tensor::new(idx.as_slice(), &self.device)?, 0)?
        };
        Ok((
            picked,
            KvCache {
                layers: new_cache,
                len: total,
            },
        ))
    }

    /// Runs several token suffixes against one shared prefix in a single pass, each suffix
    /// attending to the prefix and to itself only (not to the other suffixes), and returns the
    /// final hidden state after each suffix's last token, shape `(suffixes.len(), hidden)`.
    ///
    /// The suffixes are packed row after row (no padding rows, so the matmuls see all of
    /// them at once); their keys are laid out at aligned columns so that, on CPU, each
    /// suffix's result is bit-for-bit what [`Transformer::forward`] gives for it alone.
    /// `prefix` is the cache of the shared prefix (`None`: suffixes start at position 0).
    pub fn forward_suffixes(
        &self,
        prefix: Option<&KvCache>,
        suffixes: &[&[u32]],
    ) -> Result<Tensor> {
        if suffixes.is_empty() {
            return Ok(Tensor::zeros(
                (0, self.dims.hidden),
                DType::F32,
                &self.device,
            )?);
        }
        if suffixes.iter().any(|s| s.is_empty()) {
            return Err(ModelError::EmptyPrompt);
        }
        if let Some(c) = prefix {
            if c.layers.len() != self.layers.len() {
                return Err(ModelError::Cache(format!(
                    "the cache has {} layers, this model {}",
                    c.layers.len(),
                    self.layers.len()
                )));
            }
        }
        let p = prefix.map_or(0, |c| c.len);
        let longest = suffixes.iter().map(|s| s.len()).max().unwrap_or(0);
        if p + longest > self.dims.context_length {
            return Err(ModelError::PromptTooLong {
                tokens: p + longest,
                limit: self.dims.context_length,
            });
        }
        let tokens: Vec<u32> = suffixes.iter().flat_map(|s| s.iter().copied()).collect();
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= self.dims.vocab_size) {
            return Err(ModelError::TokenOutOfRange {
                id,
                vocab_size: self.dims.vocab_size,
            });
        }
        let m = tokens.len();

        // Row blocks, positions, the last row of each suffix, and the additive mask over
        // [prefix | aligned blocks | tail padding].
        let mut blocks = Vec::with_capacity(suffixes.len());
        let mut positions = Vec::with_capacity(m);
        let mut last_rows = Vec::with_capacity(suffixes.len());
        let mut col = p; // column where the next block's keys start
        let mut block_cols = Vec::with_capacity(suffixes.len());
        let mut start = 0;
        for s in suffixes {
            blocks.push((start, s.len()));
            block_cols.push(col);
            positions.extend((p..p + s.len()).map(|x| x as u32));
            start += s.len();
            last_rows.push((start - 1) as u32);
            col += s.len().next_multiple_of(KV_PAD);
        }
        let kv = col.next_multiple_of(KV_PAD);
        let mut mask = vec![f32::NEG_INFINITY; m * kv];
        for (b, &(start, len)) in blocks.iter().enumerate() {
            for j in 0..len {
                let row = &mut mask[(start + j) * kv..(start + j + 1) * kv];
                row[..p].fill(0.0);
                row[block_cols[b]..=block_cols[b] + j].fill(0.0);
            }
        }
        let mask = Tensor::from_vec(mask, (m, kv), &self.device)?;
        let pos = Tensor::new(positions.as_slice(), &self.device)?;
        let cos = self.cos.index_select(&pos, 0)?;
        let sin = self.sin.index_select(&pos, 0)?;

        let ids = Tensor::new(tokens.as_slice(), &self.device)?;
        let mut x = self.embed.embedding(&ids)?.unsqueeze(0)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let keys = Keys::Packed {
                prefix: prefix.map(|c| &c.layers[i]),
                blocks: &blocks,
            };
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, self.eps)?;
            let (attn, _) = self.attention(layer, &h, (&cos, &sin), keys, Some(&mask), true)?;
            x = (attn + &x)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, self.eps)?;
            let mlp = layer.down.forward(
                &(candle_nn::ops::silu(&layer.gate.forward(&h, true)?)?
                    * layer.up.forward(&h, true)?)?,
                true,
            )?;
            x = (mlp + &x)?;
        }
        let idx = Tensor::new(last_rows.as_slice(), &self.device)?;
        Ok(x.squeeze(0)?.index_select(&idx, 0)?)
    }

    /// Output norm + head over hidden rows `(r, hidden)`: logits `(r, vocab_size)`, f32.
    pub fn head(&self, hidden: &Tensor) -> Result<Tensor> {
        self.head_with(hidden, Numerics::SplitInvariant)
    }

    /// [`Transformer::head`] with a chosen arithmetic layout.
    pub fn head_with(&self, hidden: &Tensor, numerics: Numerics) -> Result<Tensor> {
        let h = candle_nn::ops::rms_norm(hidden, &self.out_norm, self.eps)?;
        Ok(self
            .head
            .forward(&h, numerics == Numerics::SplitInvariant)?)
    }

    fn attention(
        &self,
        layer: &Layer,
        h: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        keys: Keys<'_>,
        mask: Option<&Tensor>,
        pad: bool,
    ) -> Result<(Tensor, (Tensor, Tensor))> {
        let Dims {
            n_head,
            n_kv_head,
            head_dim,
            hidden,
            ..
        } = self.dims;
        let (b, n, _) = h.dims3()?;
        let proj = |w: &Linear, bias: &Option<Tensor>, heads: usize| -> Result<Tensor> {
            let mut y = w.forward(h, pad)?;
            if let Some(bias) = bias {
                y = y.broadcast_add(bias)?;
            }
            Ok(y.reshape((b, n, heads, head_dim))?
                .transpose(1, 2)?
                .contiguous()?)
        };
        let q = self.apply_rope(&proj(&layer.wq, &layer.bq, n_head)?, cos, sin)?;
        let k = self.apply_rope(&proj(&layer.wk, &layer.bk, n_kv_head)?, cos, sin)?;
        let v = proj(&layer.wv, &layer.bv, n_kv_head)?;
        let (kdt, dev) = (k.dtype(), k.device().clone());
        let zeros = |len: usize| Tensor::zeros((b, n_kv_head, len, head_dim), kdt, &dev);

        // The key/value columns attended over, and what goes into the returned cache.
        let (kp, vp, k, v) = match keys {
            Keys::Sequential { past } => {
                let (k, v) = match past {
                    Some((pk, pv)) => (Tensor::cat(&[pk, &k], 2)?, Tensor::cat(&[pv, &v], 2)?),
                    None => (k, v),
                };
                // Pad keys and values with zeros up to a multiple of KV_PAD (see there); the
                // mask hides the padding.
                let t = k.dim(2)?;
                let t_pad = if pad { t.next_multiple_of(KV_PAD) } else { t };
                if t_pad > t {
                    let z = zeros(t_pad - t)?;
                    (Tensor::cat(&[&k, &z], 2)?, Tensor::cat(&[&v, &z], 2)?, k, v)
                } else {
                    (k.clone(), v.clone(), k, v)
                }
            }
            Keys::Packed { prefix, blocks } => {
                // [prefix | block 0, zeros to KV_PAD | block 1, zeros | ...]: every block
                // starts at prefix + a multiple of KV_PAD, so each suffix's keys sit in the
                // same SIMD lanes as when it runs alone.
                let mut ks: Vec<Tensor> = Vec::with_capacity(2 * blocks.len() + 1);
                let mut vs: Vec<Tensor> = Vec::with_capacity(2 * blocks.len() + 1);
                if let Some((pk, pv)) = prefix {
                    ks.push(pk.clone());
                    vs.push(pv.clone());
                }
                for &(start, len) in blocks {
                    ks.push(k.narrow(2, start, len)?);
                    vs.push(v.narrow(2, start, len)?);
                    let gap = len.next_multiple_of(KV_PAD) - len;
                    if gap > 0 {
                        ks.push(zeros(gap)?);
                        vs.push(zeros(gap)?);
                    }
                }
                let t: usize = ks
                    .iter()
                    .map(|x| x.dim(2))
                    .sum::<candle_core::Result<usize>>()?;
                let tail = t.next_multiple_of(KV_PAD) - t;
                if tail > 0 {
                    ks.push(zeros(tail)?);
                    vs.push(zeros(tail)?);
                }
                (Tensor::cat(&ks, 2)?, Tensor::cat(&vs, 2)?, k, v)
            }
        };
        let rep = n_head / n_kv_head;
        let kr = repeat_kv(&kp, rep)?;
        let vr = repeat_kv(&vp, rep)?;
        // A contiguous K^T: with a strided (transposed) rhs, candle's CPU gemm rounds
        // differently for 1-2 query rows than for more, which would break the
        // split-invariance described at KV_PAD.
        let kt = if pad { kr.t()?.contiguous()? } else { kr.t()? };
        let att = (q.matmul(&kt)? / (head_dim as f64).sqrt())?;
        let att = match mask {
            Some(m) => att.broadcast_add(m)?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&vr.contiguous()?)?;
        let y = y.transpose(1, 2)?.reshape((b, n, hidden))?;
        Ok((layer.wo.forward(&y, pad)?, (k, v)))
    }

    fn apply_rope(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        Ok(match self.rope {
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(x, cos, sin)?,
            RopeStyle::Half => candle_nn::rotary_emb::rope(x, cos, sin)?,
        })
    }
}

/// Additive causal mask `(n, kv)`, `kv >= start + n`: query i (at position start + i) sees
/// keys 0..=start+i; later and padding positions get -inf.
fn causal_mask(n: usize, start: usize, kv: usize, device: &Device) -> candle_core::Result<Tensor> {
    let m: Vec<f32> = (0..n)
        .flat_map(|i| {
            (0..kv).map(move |j| {
                if j > start + i {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(m, (n, kv), device)
}

/// A quantized matmul over `(1, rows, k)` activations whose result for a row does not depend
/// on how many rows come with it.
///
/// On CPU, candle runs some formats (Q6K on x86) through a different kernel for a single
/// row than for several, with different rounding; a one-token suffix would then read
/// differently from the same token inside a longer pass. So one row runs as two (a copy),
/// which costs little since a single-row matmul is bound by reading the weights.
fn mm(w: &QMatMul, x: &Tensor, split_invariant: bool) -> candle_core::Result<Tensor> {
    let k = x.dim(candle_core::D::Minus1)?;
    let rows = x.elem_count() / k.max(1);
    if split_invariant && rows == 1 && x.device().is_cpu() && matches!(w, QMatMul::QTensor(_)) {
        let x2 = x.reshape((1, k))?;
        let y = w.forward(&Tensor::cat(&[&x2, &x2], 0)?)?.narrow(0, 0, 1)?;
        let mut dims = x.dims().to_vec();
        *dims.last_mut().unwrap() = y.dim(1)?;
        y.reshape(dims)
    } else {
        w.forward(x)
    }
}

/// Grouped-query attention: each kv head serves `rep` query heads.
fn repeat_kv(x: &Tensor, rep: usize) -> candle_core::Result<Tensor> {
    if rep == 1 {
        return Ok(x.clone());
    }
    let (b, h, t, d) = x.dims4()?;
    // Same construction as candle-transformers (cat along time, then reshape): the query
    // heads of one group are consecutive, as in llama.cpp and Hugging Face.
    Tensor::cat(&vec![x; rep], 2)?.reshape((b, h * rep, t, d))
}

/// cos/sin tables `(context_length, head_dim / 2)`, computed as candle-transformers does.
fn rope_tables(
    head_dim: usize,
    freq_base: f32,
    context_length: usize,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let theta: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / freq_base.powf(i as f32 / head_dim as f32))
        .collect();
    let theta = Tensor::new(theta.as_slice(), device)?;
    let idx_theta = Tensor::arange(0, context_length as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((context_length, 1))?
        .matmul(&theta.reshape((1, theta.elem_count()))?)?;
    Ok((idx_theta.cos()?, idx_theta.sin()?))
}
