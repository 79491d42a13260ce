//! Our own transformer forward pass over candle ops, one for every family: what differs
//! between families (q/k norm, norm placement, activation, RoPE tables, sliding windows,
//! embedding scale) is data in an [`Arch`](crate::arch::Arch) read by [`Transformer::block`],
//! not a forward per family.
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
//! RoPE layout: llama.cpp's converter permutes the q/k weights of GGUF `llama` models so that
//! rotary pairs are adjacent ("interleaved", `rope_i`), while the other families and every
//! Hugging Face checkpoint keep the half-split layout (NEOX style, `rope`). This is the same
//! choice as llama.cpp's `llama_model_rope_type` and candle-transformers.
//!
//! Sliding-window layers keep every position in the cache and mask the keys outside their
//! window, so one [`KvCache`] layout serves every family.
//!
//! Everything runs on the `Device` the tensors were loaded on; there is no CPU-only path.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::arch::{Activation, Arch, Rope};
use crate::error::{ModelError, Result};
use crate::weights::WeightSource;

#[cfg(feature = "cuda")]
mod fused;
#[cfg(feature = "cuda")]
mod graphs;
#[cfg(feature = "cuda")]
mod matmuls;

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

/// Key columns per block of the attention's value product (P V) on the CPU, in the
/// split-invariant layout ([`values_in_blocks`]).
///
/// Why: candle's CPU gemm (gemm-common's `kernel_params`) sums an inner dimension of more than
/// 512 in equal blocks whose size depends on the total (576 keys: two blocks of 288) and adds
/// the blocks' partial sums, so one row's value sum groups differently in passes with different
/// key counts: a prefix of 300 tokens prefilled alone (320 keys, one block) and the same rows
/// in the whole 559-token prompt (576 keys, a cut at 288) gave keys and values that differed
/// in the last bits, and reads over that prefix 0.02-0.2 apart in log-probability on smol.
/// Blocks of a fixed 512 columns from column 0, each one gemm block, are summed in column
/// order whatever the pass; columns past a row's keys add exact zeros.
pub const VALUE_BLOCK: usize = 512;

/// `att @ v` with the keys in [`VALUE_BLOCK`]-column blocks from column 0, partial products
/// added in column order: `att` `(b, heads, n, keys)`; `v_rows(start, len)` gives the values
/// of key columns `start..start + len`, `(b, heads, len, d)`.
fn values_in_blocks(
    att: &Tensor,
    v_rows: impl Fn(usize, usize) -> candle_core::Result<Tensor>,
) -> candle_core::Result<Tensor> {
    let keys = att.dim(3)?;
    let block = |start: usize| -> candle_core::Result<Tensor> {
        let len = VALUE_BLOCK.min(keys - start);
        att.narrow(3, start, len)?
            .contiguous()?
            .matmul(&v_rows(start, len)?)
    };
    let mut sum = block(0)?;
    for start in (VALUE_BLOCK..keys).step_by(VALUE_BLOCK) {
        sum = (sum + block(start)?)?;
    }
    Ok(sum)
}

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
    /// CPU only, on Intel AMX ([`crate::amx`]): dequantized and rounded to bf16 once at load,
    /// packed in AMX tiles, multiplied with activations rounded to bf16 and f32 accumulation
    /// (f32 out). ~Half the memory of `F32`; on a shared 2-core AMX Xeon it prefilled 100-300
    /// tokens ~2-3x faster (q15 ~100 tokens/s against ~45, q05 ~200-290 against ~70-95; the
    /// projections run at ~400-700 GFLOP/s against candle's ~80, the rest of the pass is
    /// candle's f32 ops: `examples/amx_prefill.rs`, `examples/amx_bench.rs`). Projections whose shape does not fill whole tiles (outputs
    /// a multiple of 16, inputs of 32), and the output head, stay f32. Split-invariant like
    /// the f32 path. Loading fails where [`crate::amx::available`] is false.
    AmxBf16,
}

impl WeightFormat {
    /// The format's name in a forward's description ([`crate::ModelInfo::forward`]).
    pub fn label(self) -> &'static str {
        match self {
            WeightFormat::Quantized => "quantized",
            WeightFormat::F32 => "f32",
            WeightFormat::F16 => "f16",
            WeightFormat::BF16 => "bf16",
            WeightFormat::AmxBf16 => "amx bf16",
        }
    }
}

/// Which implementation runs the decoder layers (chosen at load, [`crate::LoadOptions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Kernels {
    /// decide's fused CUDA kernels (`models/kernels/fused.cu`) where the build, device and
    /// weights allow them (a `cuda` build on a CUDA device, bf16 weights, head width 64 or
    /// 128); candle's ops everywhere else.
    #[default]
    Auto,
    /// candle's ops everywhere: the reference the fused path is measured against.
    Candle,
}

/// How the fused layers run their projections (chosen at load, [`crate::LoadOptions`]); only
/// the fused CUDA path has a choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Matmuls {
    /// cuBLAS's default algorithm for each shape, through candle's matmul.
    #[default]
    Cublas,
    /// Per projection and row count, the fastest of cuBLAS's default call and cuBLASLt's
    /// candidates, timed at load (~4 s on an H200; see `forward/matmuls.rs` for what it
    /// measured).
    Tuned,
}

/// A weight matrix `(out, in)` in one of its forms.
enum Linear {
    Quant(QMatMul),
    /// The transposed weight `(in, out)`, contiguous: a contiguous right-hand side keeps
    /// candle's gemm rounding independent of the number of rows (see [`KV_PAD`]).
    Dense(Tensor),
    /// bf16 in AMX tiles ([`WeightFormat::AmxBf16`]); rows are independent by construction.
    Amx(crate::amx::AmxWeight),
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
            WeightFormat::AmxBf16 => return Self::from_dense(&q.dequantize(device)?, format),
        };
        let w = q.dequantize(device)?;
        Ok(Linear::Dense(w.t()?.to_dtype(dtype)?.contiguous()?))
    }

    /// A dense weight `(out, in)` held as `format` asks (f32 for `Quantized`: there is no
    /// quantized form to keep; f32 for `AmxBf16` where the shape does not fill whole tiles).
    fn from_dense(w: &Tensor, format: WeightFormat) -> candle_core::Result<Self> {
        let dtype = match format {
            WeightFormat::Quantized | WeightFormat::F32 => DType::F32,
            WeightFormat::F16 => DType::F16,
            WeightFormat::BF16 => DType::BF16,
            WeightFormat::AmxBf16 => {
                let (n, k) = w.dims2()?;
                if w.device().is_cpu() && crate::amx::fits(n, k) {
                    let values = w.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                    if let Some(packed) = crate::amx::AmxWeight::pack(&values, n, k) {
                        return Ok(Linear::Amx(packed));
                    }
                }
                DType::F32
            }
        };
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
            Linear::Amx(w) => amx_forward(w, x),
        }
    }
}

/// [`Linear::forward`] on AMX tiles: `x` f32 `(..., in)` on the CPU.
fn amx_forward(w: &crate::amx::AmxWeight, x: &Tensor) -> candle_core::Result<Tensor> {
    let dims = x.dims();
    let k = *dims.last().unwrap_or(&0);
    if k != w.k() || x.dtype() != DType::F32 {
        candle_core::bail!(
            "AMX linear of {} inputs given {:?} {:?}",
            w.k(),
            x.dtype(),
            x.shape()
        );
    }
    let m = x.elem_count() / k.max(1);
    let x = x.contiguous()?;
    let y = {
        let (storage, layout) = x.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("AMX linear given a tensor off the CPU");
        };
        let all = cpu.as_slice::<f32>()?;
        let (start, end) = layout
            .contiguous_offsets()
            .ok_or_else(|| candle_core::Error::Msg("not contiguous".into()))?;
        w.matmul(&all[start..end], m)
    };
    let mut out = dims.to_vec();
    *out.last_mut().expect("x has a dim") = w.n();
    Tensor::from_vec(y, out, x.device())
}

/// Where an attention call's keys come from.
#[derive(Clone, Copy)]
enum Keys<'a> {
    /// The cache's positions followed by this pass's tokens (one sequence).
    Sequential { past: Option<&'a (Tensor, Tensor)> },
    /// Several segments packed into one pass, keys laid out as [`PackedLayout`] says:
    /// `prefixes` are this layer's keys and values of its distinct prefixes, in its order.
    Packed {
        prefixes: &'a [&'a (Tensor, Tensor)],
    },
    /// Several segments packed into one pass, each attending over its own prefix and rows laid
    /// out as in its lone pass (the CPU's split-invariant path): `prefixes` are this layer's
    /// keys and values of the distinct prefixes, `shape` each segment's prefix and row count,
    /// `masks` each segment's causal mask over its padded keys.
    Segments {
        prefixes: &'a [&'a (Tensor, Tensor)],
        shape: &'a [(Option<usize>, usize)],
        masks: &'a [Tensor],
    },
}

/// One segment of a packed pass ([`Transformer::forward_packed`]): tokens that continue a
/// cached prefix (or start at position 0 when `prefix` is `None`). A segment attends to its
/// own prefix and causally to itself, never to other segments.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    pub prefix: Option<&'a KvCache>,
    pub tokens: &'a [u32],
}

/// Where the keys of a packed pass sit (the GPU's candle path): the distinct prefixes one after
/// another, then all the pass's rows in one piece, which keeps the number of copies per layer
/// independent of the number of segments. (The CPU does not pack keys: each segment attends as
/// in its lone pass, `Keys::Segments`.)
#[derive(Debug)]
struct PackedLayout {
    /// Per distinct prefix: (first key column, length).
    prefix_cols: Vec<(usize, usize)>,
    /// The key column of the pass's first row: row r's key sits at `rows_col + r`.
    rows_col: usize,
    /// Total key columns.
    kv: usize,
}

impl PackedLayout {
    fn new(prefix_lens: &[usize], rows: usize) -> Self {
        let mut col = 0usize;
        let mut prefix_cols = Vec::with_capacity(prefix_lens.len());
        for &len in prefix_lens {
            prefix_cols.push((col, len));
            col += len;
        }
        PackedLayout {
            prefix_cols,
            rows_col: col,
            kv: col + rows,
        }
    }
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
    /// Per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3).
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    /// Norms of the attention and MLP outputs before the residual add (Gemma 3).
    post_attn_norm: Option<Tensor>,
    post_ffn_norm: Option<Tensor>,
    activation: Activation,
    /// Index of this block's RoPE table in [`Transformer::ropes`](Transformer).
    rope: usize,
    /// Sliding attention window (see [`crate::arch::LayerShape::window`]).
    window: Option<usize>,
}

impl Layer {
    /// The SwiGLU MLP `down(silu(gate(h)) * up(h))`, f32 in and out. With dense half-precision
    /// weights the whole block stays in that precision (one cast in, one out) instead of
    /// casting each of the three matmuls' activations: on the GPU the casts of the wide
    /// intermediate cost more than the matmuls.
    fn mlp(&self, h: &Tensor, pad: bool) -> candle_core::Result<Tensor> {
        if let (Linear::Dense(gate), Linear::Dense(up), Linear::Dense(down)) =
            (&self.gate, &self.up, &self.down)
        {
            if gate.dtype() != DType::F32 {
                let h = h.to_dtype(gate.dtype())?;
                let a = (self.act(&h.broadcast_matmul(gate)?)? * h.broadcast_matmul(up)?)?;
                return a.broadcast_matmul(down)?.to_dtype(DType::F32);
            }
        }
        self.down.forward(
            &(self.act(&self.gate.forward(h, pad)?)? * self.up.forward(h, pad)?)?,
            pad,
        )
    }

    /// The MLP's gate activation.
    fn act(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self.activation {
            Activation::Silu => candle_nn::ops::silu(x),
            Activation::GeluTanh => x.gelu(),
        }
    }
}

/// The keys and values of every token seen so far, per layer: K and V of shape
/// `(1, n_kv_head, len, head_dim)`, RoPE already applied to K. Immutable; a forward pass
/// returns a new cache (the old one stays valid), so one prefix cache can seed many suffixes.
/// Cloning is cheap (tensors are reference-counted).
///
/// Held as pieces side by side in position order: one, except where decide's fused CUDA path
/// extends a cache by a long chunk. There it appends the chunk's keys and values as a piece of
/// their own (at most [`KvCache::MAX_PIECES`]) instead of copying everything held into longer
/// tensors: a 28k-token prefill in four chunks copied ~1.7 GB that way, ~1.2 ms of an H200's
/// time between its chunks. Attention reads the pieces where they lie; the candle path sees
/// one piece (copied together when there are several). [`KvCache::prefix`] shares the whole
/// pieces before its cut and copies only the piece the cut falls in.
#[derive(Clone, Debug)]
pub struct KvCache {
    pieces: Vec<KvPiece>,
    len: usize,
}

/// `t` in memory of its own: `contiguous` copies a view but returns a contiguous tensor as
/// is, sharing the memory of the longer cache a prefix is cut from.
fn own_copy(t: &Tensor) -> candle_core::Result<Tensor> {
    if t.is_contiguous() {
        t.copy()
    } else {
        t.contiguous()
    }
}

/// Positions held by per-layer keys and values `(1, kv heads, len, head dim)`.
fn layers_len(layers: &[(Tensor, Tensor)]) -> Result<usize> {
    match layers.first() {
        Some((k, _)) => Ok(k.dim(2)?),
        None => Err(ModelError::Cache("a pass kept no keys and values".into())),
    }
}

/// One piece of a [`KvCache`]: per layer, K and V of `len` positions.
#[derive(Clone, Debug)]
struct KvPiece {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
    /// On CUDA, where the fused attention finds these keys and values: worked out the first
    /// time a pass reads the piece, shared by its clones (the prefix cache hands out clones).
    #[cfg(feature = "cuda")]
    addresses: std::sync::Arc<std::sync::OnceLock<crate::kernels::PrefixAddresses>>,
}

impl KvPiece {
    fn new(layers: Vec<(Tensor, Tensor)>, len: usize) -> Self {
        Self {
            layers,
            len,
            #[cfg(feature = "cuda")]
            addresses: Default::default(),
        }
    }

    /// The device addresses of this piece's keys and values (for the fused attention).
    #[cfg(feature = "cuda")]
    fn addresses(&self) -> Result<&crate::kernels::PrefixAddresses> {
        if let Some(found) = self.addresses.get() {
            return Ok(found);
        }
        let made = crate::kernels::PrefixAddresses::of(&self.layers)
            .map_err(|e| ModelError::Cache(e.to_string()))?;
        Ok(self.addresses.get_or_init(|| made))
    }

    /// `len` positions from `start`: on CUDA a view of this piece's memory (the fused
    /// attention reads a view in place, `kernels::kv_address`), elsewhere in memory of their
    /// own.
    ///
    /// Why views on CUDA: a packed pass keeps every prompt's rows for the prefix cache, and
    /// copying each prompt's rows out was ~2 copies per layer per prompt, launches that
    /// outnumbered a saturated pass's own. The cost: a view holds all of the memory it was
    /// cut from (a pass's keys and values, a longer run's) until every view of it is gone.
    fn part(&self, start: usize, len: usize) -> candle_core::Result<KvPiece> {
        let shares = self
            .layers
            .first()
            .is_some_and(|(k, _)| k.device().is_cuda());
        let cut = |t: &Tensor| -> candle_core::Result<Tensor> {
            let view = t.narrow(2, start, len)?;
            if shares {
                Ok(view)
            } else {
                own_copy(&view)
            }
        };
        let layers = self
            .layers
            .iter()
            .map(|(k, v)| Ok((cut(k)?, cut(v)?)))
            .collect::<candle_core::Result<_>>()?;
        Ok(KvPiece::new(layers, len))
    }
}

impl KvCache {
    /// The most pieces a cache is held in; extending a cache of this many copies it into one
    /// (attention reads up to four prefixes through tensor maps, `ATT_MAPPED_PREFIXES` in
    /// models/kernels/attention_common.cuh).
    pub const MAX_PIECES: usize = 4;

    /// A cache of one piece: `layers` of `len` positions each.
    pub(crate) fn new(layers: Vec<(Tensor, Tensor)>, len: usize) -> Self {
        Self {
            pieces: vec![KvPiece::new(layers, len)],
            len,
        }
    }

    /// Number of token positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no positions are held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many pieces the positions are held in.
    pub fn pieces(&self) -> usize {
        self.pieces.len()
    }

    /// Each piece's layers and its positions, in position order.
    #[cfg(test)]
    pub(crate) fn piece_layers(&self) -> impl Iterator<Item = (&[(Tensor, Tensor)], usize)> {
        self.pieces.iter().map(|p| (p.layers.as_slice(), p.len))
    }

    /// Each piece's device addresses and its positions, in position order (the fused
    /// attention's key tables).
    #[cfg(feature = "cuda")]
    pub(crate) fn piece_addresses(
        &self,
    ) -> impl Iterator<Item = Result<(&crate::kernels::PrefixAddresses, usize)>> {
        self.pieces.iter().map(|p| Ok((p.addresses()?, p.len)))
    }

    /// What tells this cache's pieces apart (their first layer's key tensors and lengths):
    /// equal for a cache and its clones, and for two caches chained from the same pieces.
    pub(crate) fn identity(&self) -> Vec<(candle_core::TensorId, usize)> {
        self.pieces
            .iter()
            .filter_map(|p| p.layers.first().map(|(k, _)| (k.id(), p.len)))
            .collect()
    }

    /// The layers of a cache of one piece (what the candle path reads); a cache in several
    /// pieces is copied into one first.
    pub(crate) fn whole(&self) -> Result<std::borrow::Cow<'_, [(Tensor, Tensor)]>> {
        Ok(match self.pieces.as_slice() {
            [one] => std::borrow::Cow::Borrowed(one.layers.as_slice()),
            _ => std::borrow::Cow::Owned(self.joined()?),
        })
    }

    /// This cache and `layers` of `len` more positions after it, as one more piece (the
    /// fused path's long chunks; the caller checks [`KvCache::MAX_PIECES`]).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the fused path's (and the tests')
    pub(crate) fn with_piece(&self, layers: Vec<(Tensor, Tensor)>, len: usize) -> Self {
        let mut pieces = self.pieces.clone();
        pieces.push(KvPiece::new(layers, len));
        Self {
            pieces,
            len: self.len + len,
        }
    }

    /// Per layer, K and V of every position in one tensor each, copied from the pieces.
    fn joined(&self) -> candle_core::Result<Vec<(Tensor, Tensor)>> {
        let layers = self.pieces[0].layers.len();
        (0..layers)
            .map(|i| {
                let (ks, vs): (Vec<&Tensor>, Vec<&Tensor>) = self
                    .pieces
                    .iter()
                    .map(|p| (&p.layers[i].0, &p.layers[i].1))
                    .unzip();
                Ok((Tensor::cat(&ks, 2)?, Tensor::cat(&vs, 2)?))
            })
            .collect()
    }

    /// Whether `other` is this cache or a clone of it (the same tensors, so the same keys
    /// and values): a packed pass holds such prefixes once, as the prefix cache hands every
    /// job that hits one entry its own clone.
    pub fn same_as(&self, other: &KvCache) -> bool {
        self.len == other.len
            && self.pieces.len() == other.pieces.len()
            && self.pieces.iter().zip(&other.pieces).all(|(a, b)| {
                a.len == b.len
                    && a.layers.len() == b.layers.len()
                    && a.layers
                        .iter()
                        .zip(&b.layers)
                        .all(|((k, v), (ok, ov))| k.id() == ok.id() && v.id() == ov.id())
            })
    }

    /// The cache of the first `len` positions: what a prefix cache keeps at a block boundary.
    /// The pieces wholly before `len` are shared (clones of their tensors); the piece `len`
    /// falls inside is cut as [`KvCache::range`] cuts (copied up to `len` on the CPU, so the
    /// longer cache's memory past the cut can be freed; a view on CUDA). Its whole length is
    /// a clone.
    ///
    /// Why not one copied piece always: after a 28k-token first read (four pieces, the last
    /// cut to a block boundary) joining them all copied ~800 MB and launched ~280 copies and
    /// allocations on the host before the read was answered; the cut piece alone is a quarter
    /// of the bytes and 112 launches. Attention reads a cache's pieces where they lie.
    pub fn prefix(&self, len: usize) -> Result<KvCache> {
        self.range(0, len)
    }

    /// Positions `from..to` of this cache as a cache of their own (they keep their positions:
    /// it continues a cache of `from` positions). A piece wholly inside the range is shared;
    /// the parts of pieces the range cuts are copied on the CPU and views on CUDA
    /// (`KvPiece::part` says why). How the prefix cache keeps each run of blocks once,
    /// whatever prompts share it.
    pub fn range(&self, from: usize, to: usize) -> Result<KvCache> {
        if from >= to || to > self.len {
            return Err(ModelError::Cache(format!(
                "positions {from}..{to} asked from a cache of {}",
                self.len
            )));
        }
        let mut pieces = Vec::new();
        let mut at = 0;
        for piece in &self.pieces {
            let (start, end) = (at, at + piece.len);
            at = end;
            let (lo, hi) = (from.max(start), to.min(end));
            if lo >= hi {
                continue;
            }
            pieces.push(if lo == start && hi == end {
                piece.clone()
            } else {
                piece.part(lo - start, hi - lo)?
            });
        }
        Ok(KvCache {
            pieces,
            len: to - from,
        })
    }

    /// The cache of `parts` one after another (each continuing the ones before it): their
    /// pieces side by side, copied into one piece when they would be more than
    /// [`KvCache::MAX_PIECES`]. `None` for no parts.
    pub fn chain(parts: &[KvCache]) -> Result<Option<KvCache>> {
        let pieces: Vec<KvPiece> = parts.iter().flat_map(|c| c.pieces.clone()).collect();
        if pieces.is_empty() {
            return Ok(None);
        }
        let len = parts.iter().map(KvCache::len).sum();
        let cache = KvCache { pieces, len };
        Ok(Some(if cache.pieces.len() > Self::MAX_PIECES {
            KvCache::new(cache.joined()?, len)
        } else {
            cache
        }))
    }

    /// This cache with `next`'s pieces after its own, never copied together, however many
    /// there are: what a packed pass keeps per segment, for the prefix cache to cut its new
    /// blocks from ([`KvCache::range`] cuts only those). Joining there copied every
    /// segment's whole prefix once it had more than [`KvCache::MAX_PIECES`] pieces, hundreds
    /// of times a pass for a long option list. Candle's ops read any number of pieces (they
    /// join them per pass, [`KvCache::whole`]); the fused attention reads every piece through
    /// its address tables (tensor maps serve the first four).
    pub fn followed_by(&self, next: KvCache) -> KvCache {
        let mut pieces = self.pieces.clone();
        pieces.extend(next.pieces);
        KvCache {
            pieces,
            len: self.len + next.len,
        }
    }

    /// This cache in one piece: a clone when it is, else its pieces copied together.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // the fused path's (and the tests')
    pub(crate) fn in_one_piece(&self) -> Result<KvCache> {
        Ok(match self.pieces.as_slice() {
            [_] => self.clone(),
            _ => KvCache::new(self.joined()?, self.len),
        })
    }

    /// Bytes of device memory held by the keys and values (f32, or bf16 on the fused path).
    pub fn size_bytes(&self) -> usize {
        self.pieces
            .iter()
            .flat_map(|p| &p.layers)
            .map(|(k, v)| {
                k.elem_count() * k.dtype().size_in_bytes()
                    + v.elem_count() * v.dtype().size_in_bytes()
            })
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
    /// The blocks run with candle's ops (empty when `fused` holds them).
    layers: Vec<Layer>,
    /// The blocks run with the fused CUDA kernels ([`Kernels::Auto`] on a CUDA device).
    #[cfg(feature = "cuda")]
    fused: Vec<fused::FusedLayer>,
    /// CUDA graphs of short fused passes.
    #[cfg(feature = "cuda")]
    graphs: graphs::PassGraphs,
    /// The sliding window every fused layer attends within (Mistral's; the fused path runs
    /// a family only when all its layers share one, [`Arch::fused_blocker`]): each pass's
    /// row bounds are narrowed to it on the host, so the kernels need nothing of their own.
    #[cfg(feature = "cuda")]
    fused_window: Option<usize>,
    /// The projections' tuned matmuls (`None`: candle's matmul, [`Matmuls::Cublas`]).
    #[cfg(feature = "cuda")]
    matmuls: Option<matmuls::TunedMatmuls>,
    out_norm: Tensor,
    head: Linear,
    /// RoPE table 0 (the only one of the families the fused path runs).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    cos: Tensor,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    sin: Tensor,
    /// Every RoPE table (cos, sin) of [`Arch::ropes`]; a layer picks one.
    ropes: Vec<(Tensor, Tensor)>,
    rope: RopeStyle,
    /// Leading dims of a head that rotate.
    rotary_dim: usize,
    /// Embeddings are multiplied by this (Gemma).
    embed_scale: Option<f32>,
    /// Attention scores are divided by this.
    score_div: f64,
    eps: f32,
    dims: Dims,
    device: Device,
}

impl Transformer {
    /// Loads the weights of a model of architecture `arch` from `g` (a GGUF file or a
    /// Hugging Face directory's safetensors) onto `device`.
    pub(crate) fn load(
        g: &mut dyn WeightSource,
        arch: &Arch,
        device: &Device,
        format: WeightFormat,
        kernels: Kernels,
        matmul_choice: Matmuls,
    ) -> Result<Self> {
        let Arch {
            n_layers,
            hidden,
            n_head,
            n_kv_head,
            head_dim,
            context_length,
            eps,
            ..
        } = *arch;
        if format == WeightFormat::AmxBf16 && !(device.is_cpu() && crate::amx::available()) {
            return Err(g.err(
                "AMX bf16 weights need the CPU device on a CPU with AMX bf16 \
                 (the kernel granting the tile state); use f32 weights"
                    .into(),
            ));
        }
        let shift = arch.norm_shift;
        let dense = |g: &mut dyn WeightSource, name: &str| -> Result<Tensor> {
            let q = g.tensor(name, device)?;
            q.dequantize(device)
                .map_err(|e| g.err(format!("cannot dequantize `{name}`: {e}")))
        };
        // RMSNorm weights, with Gemma's `1 + w` folded in where the checkpoint stores `w`.
        let norm = |g: &mut dyn WeightSource, name: &str| -> Result<Tensor> {
            let w = dense(g, name)?;
            Ok(if shift != 0.0 { (w + shift as f64)? } else { w })
        };
        let norm_opt = |g: &mut dyn WeightSource, name: &str, on: bool| -> Result<Option<Tensor>> {
            if on {
                norm(g, name).map(Some)
            } else {
                Ok(None)
            }
        };
        let qmm = |g: &mut dyn WeightSource, name: &str| -> Result<Linear> {
            let q = g.tensor(name, device)?;
            Linear::new(q, format, device)
                .map_err(|e| g.err(format!("cannot prepare `{name}`: {e}")))
        };
        // A fused matrix's row blocks as separate matrices (dense: a quantized matrix is
        // dequantized to be cut; `WeightFormat::Quantized` keeps them in f32).
        let split_rows =
            |g: &mut dyn WeightSource, name: &str, rows: &[usize]| -> Result<Vec<Linear>> {
                let w = dense(g, name)?;
                let total = w.dims2()?.0;
                if rows.iter().sum::<usize>() != total || rows.contains(&0) {
                    return Err(g.err(format!(
                        "`{name}` has {total} rows, expected parts {rows:?}"
                    )));
                }
                let mut at = 0;
                rows.iter()
                    .map(|&r| {
                        let part = w.narrow(0, at, r)?;
                        at += r;
                        Ok(Linear::from_dense(&part, format)?)
                    })
                    .collect()
            };
        let bias = |g: &mut dyn WeightSource, name: &str| -> Result<Option<Tensor>> {
            if g.has(name) {
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
        #[cfg(feature = "cuda")]
        let use_fused = kernels == Kernels::Auto
            && device.is_cuda()
            && arch.fused_blocker().is_none()
            && format == WeightFormat::BF16
            && crate::kernels::attention_supports(head_dim);
        #[cfg(not(feature = "cuda"))]
        let _ = (kernels, matmul_choice);
        #[cfg(not(feature = "cuda"))]
        let use_fused = false;
        // Logits must not be rounded to half precision: at logit magnitudes of 16-32 bf16
        // steps by 0.125, which moved answer probabilities by up to 0.025 (q15 on the H200).
        // The fused path keeps the head in bf16 and multiplies with f32 results
        // (`kernels::matmul_f32_out`); candle's matmul returns its inputs' dtype, so there
        // a half-precision head is held in f32 (it runs on the few answer rows only).
        let head_format = match format {
            WeightFormat::BF16 | WeightFormat::F16 if !use_fused => WeightFormat::F32,
            WeightFormat::AmxBf16 => WeightFormat::F32,
            other => other,
        };
        // Tied embeddings (SmolLM2): the output head is the embedding matrix.
        let head = if g.has("output.weight") {
            let out = g.tensor("output.weight", device)?;
            let rows = out.shape().dims2().map_err(|e| g.err(e.to_string()))?.0;
            if rows != vocab_size {
                return Err(g.err(format!(
                    "output head has {rows} rows, embedding {vocab_size}"
                )));
            }
            Linear::new(out, head_format, device)
        } else {
            Linear::from_arc(embed.clone(), head_format, device)
        }
        .map_err(|e| g.err(format!("cannot prepare the output head: {e}")))?;
        let out_norm = norm(g, "output_norm.weight")?;

        #[cfg(feature = "cuda")]
        let mut fused_layers = Vec::new();
        let mut layers = Vec::with_capacity(n_layers);
        for i in 0..n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let shape = arch.layers[i];
            // Phi-3 stores q/k/v in one matrix and gate/up in another: split by rows.
            let (wq, wk, wv) = if g.has(&n("attn_qkv.weight")) {
                let (q, kv) = (n_head * head_dim, n_kv_head * head_dim);
                let mut parts = split_rows(g, &n("attn_qkv.weight"), &[q, kv, kv])?.into_iter();
                let mut next = || parts.next().expect("three parts");
                (next(), next(), next())
            } else {
                (
                    qmm(g, &n("attn_q.weight"))?,
                    qmm(g, &n("attn_k.weight"))?,
                    qmm(g, &n("attn_v.weight"))?,
                )
            };
            let (gate, up) = if g.has(&n("ffn_gate.weight")) {
                (qmm(g, &n("ffn_gate.weight"))?, qmm(g, &n("ffn_up.weight"))?)
            } else {
                let rows = g.tensor(&n("ffn_up.weight"), device)?.shape().dims2()?.0;
                let mut parts = split_rows(g, &n("ffn_up.weight"), &[rows / 2, rows / 2])?;
                let up = parts.pop().expect("two parts");
                (parts.pop().expect("two parts"), up)
            };
            let layer = Layer {
                attn_norm: norm(g, &n("attn_norm.weight"))?,
                wq,
                wk,
                wv,
                bq: bias(g, &n("attn_q.bias"))?,
                bk: bias(g, &n("attn_k.bias"))?,
                bv: bias(g, &n("attn_v.bias"))?,
                wo: qmm(g, &n("attn_output.weight"))?,
                ffn_norm: norm(g, &n("ffn_norm.weight"))?,
                q_norm: norm_opt(g, &n("attn_q_norm.weight"), arch.qk_norm)?,
                k_norm: norm_opt(g, &n("attn_k_norm.weight"), arch.qk_norm)?,
                post_attn_norm: norm_opt(g, &n("post_attention_norm.weight"), arch.sandwich_norms)?,
                post_ffn_norm: norm_opt(g, &n("post_ffw_norm.weight"), arch.sandwich_norms)?,
                activation: arch.activation,
                rope: shape.rope,
                window: shape.window,
                gate,
                up,
                down: qmm(g, &n("ffn_down.weight"))?,
            };
            #[cfg(feature = "cuda")]
            if use_fused {
                let widths = (n_head * head_dim, n_kv_head * head_dim);
                fused_layers.push(fused::FusedLayer::new(layer, widths)?);
                continue;
            }
            layers.push(layer);
        }

        // The driver compiles a kernel module's PTX when it is first loaded: do it now, not
        // in the first request that needs the kernel (the Hopper attention module took
        // ~0.4 s on an H200, paid by the first long request of run 10).
        #[cfg(feature = "cuda")]
        if let Device::Cuda(dev) = device {
            // A setting for speed only: the model serves without it.
            if let Err(e) = crate::memory_pool::keep_freed_memory(dev) {
                tracing::warn!("the CUDA memory pool keeps its default release threshold: {e}");
            }
        }
        #[cfg(feature = "cuda")]
        if use_fused {
            crate::kernels::load_attention(device, head_dim)
                .map_err(|e| g.err(format!("cannot load the attention kernels: {e}")))?;
            crate::kernels::load_gate_up(device)
                .map_err(|e| g.err(format!("cannot load the gate/up kernel: {e}")))?;
        }
        #[cfg(feature = "cuda")]
        let tuned = match (device, fused_layers.first()) {
            (Device::Cuda(dev), Some(first)) if matmul_choice == Matmuls::Tuned => Some(
                matmuls::TunedMatmuls::tune(dev, &first.projections())
                    .map_err(|e| g.err(format!("cannot tune the projection matmuls: {e}")))?,
            ),
            _ => None,
        };
        let ropes = arch
            .ropes
            .iter()
            .map(|r| rope_tables(arch.rotary_dim, r, context_length, device))
            .collect::<candle_core::Result<Vec<_>>>()
            .map_err(|e| g.err(format!("cannot build RoPE tables: {e}")))?;
        let (cos, sin) = ropes[0].clone();
        Ok(Self {
            embed,
            layers,
            #[cfg(feature = "cuda")]
            fused: fused_layers,
            #[cfg(feature = "cuda")]
            graphs: graphs::PassGraphs::default(),
            #[cfg(feature = "cuda")]
            fused_window: arch
                .layers
                .first()
                .and_then(|l| l.window)
                .filter(|_| use_fused),
            #[cfg(feature = "cuda")]
            matmuls: tuned,
            out_norm,
            head,
            cos,
            sin,
            ropes,
            rope: arch.rope_style,
            rotary_dim: arch.rotary_dim,
            embed_scale: arch.embed_scale,
            score_div: arch.score_div,
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

    /// Whether the layers run with decide's fused CUDA kernels ([`Kernels`]). Those never
    /// materialise attention scores, so a prefill needs no score budget.
    pub fn is_fused(&self) -> bool {
        #[cfg(feature = "cuda")]
        return !self.fused.is_empty();
        #[cfg(not(feature = "cuda"))]
        false
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
            self.check_cache(c)?;
        }
        let total = start_pos + n;
        if total > self.dims.context_length {
            return Err(ModelError::PromptTooLong {
                tokens: total,
                limit: self.dims.context_length,
            });
        }
        self.check_tokens(tokens)?;
        if let Some(&r) = rows.iter().find(|&&r| r >= n) {
            return Err(ModelError::Compute(format!(
                "row {r} requested from {n} tokens"
            )));
        }
        #[cfg(feature = "cuda")]
        if !self.fused.is_empty() {
            return self.fused_forward(tokens, start_pos, cache, rows);
        }

        let ids = Tensor::new(tokens, &self.device)?;
        let mut x = self.embed_rows(&ids)?.unsqueeze(0)?; // (1, n, hidden), f32
        let kv_len = if pad {
            total.next_multiple_of(KV_PAD)
        } else {
            total
        };
        // One mask per attention window in use (global layers: `None`).
        let masks = self.windows().map(|window| {
            let needed = n > 1 || kv_len > total || window.is_some_and(|w| total > w);
            let mask = if needed {
                Some(self.per_head(causal_mask(n, start_pos, kv_len, window, &self.device)?)?)
            } else {
                None
            };
            Ok((window, mask))
        });
        let masks = masks.collect::<candle_core::Result<Vec<_>>>()?;
        let ropes = self
            .ropes
            .iter()
            .map(|(cos, sin)| Ok((cos.narrow(0, start_pos, n)?, sin.narrow(0, start_pos, n)?)))
            .collect::<candle_core::Result<Vec<_>>>()?;

        let past_layers = cache.map(KvCache::whole).transpose()?;
        let mut new_cache = Vec::with_capacity(self.layers.len());
        for (i, layer) in self.layers.iter().enumerate() {
            let past = past_layers.as_ref().map(|l| &l[i]);
            let mask = pick(&masks, layer.window);
            let (next, kv) = self.block(layer, &x, &ropes, Keys::Sequential { past }, mask, pad)?;
            new_cache.push(kv);
            x = next;
        }

        let x = x.squeeze(0)?; // (n, hidden)
                               // No rows (a prefill): an empty view, not an empty gather (a kernel launch over zero
                               // elements is an invalid argument on CUDA).
        let picked = if rows.is_empty() {
            x.narrow(0, 0, 0)?
        } else if rows.len() == 1 {
            x.narrow(0, rows[0], 1)?
        } else {
            let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
            x.index_select(&Tensor::new(idx.as_slice(), &self.device)?, 0)?
        };
        Ok((picked, KvCache::new(new_cache, total)))
    }

    /// Runs several token suffixes against one shared prefix in a single pass, each suffix
    /// attending to the prefix and to itself only (not to the other suffixes), and returns the
    /// final hidden state after each suffix's last token, shape `(suffixes.len(), hidden)`.
    /// `prefix` is the cache of the shared prefix (`None`: suffixes start at position 0).
    pub fn forward_suffixes(
        &self,
        prefix: Option<&KvCache>,
        suffixes: &[&[u32]],
    ) -> Result<Tensor> {
        let segments: Vec<Segment<'_>> = suffixes
            .iter()
            .map(|&tokens| Segment { prefix, tokens })
            .collect();
        self.forward_packed(&segments)
    }

    /// Runs several segments, each continuing its own cached prefix (segments may share one),
    /// in a single pass: every segment attends to its prefix and causally to itself only.
    /// Returns the final hidden state after each segment's last token, shape
    /// `(segments.len(), hidden)`.
    ///
    /// The segments' rows are packed one after another (no padding rows, so the matmuls see
    /// all of them at once). On CPU the keys are laid out so that each segment's result is
    /// bit-for-bit what [`Transformer::forward`] gives for it alone (see [`PackedLayout`]).
    pub fn forward_packed(&self, segments: &[Segment<'_>]) -> Result<Tensor> {
        Ok(self.packed(segments, false)?.0)
    }

    /// [`Transformer::forward_packed`], and also each segment's cache: its prefix followed by
    /// the keys and values of its own rows (one more piece; [`KvCache::chain`]). What a prefix
    /// cache keeps of a prompt read in a packed pass, so that a later prompt that starts
    /// alike, the same question over the same input included, reads only what is new.
    pub fn forward_packed_keeping(
        &self,
        segments: &[Segment<'_>],
    ) -> Result<(Tensor, Vec<KvCache>)> {
        let (x, layers) = self.packed(segments, true)?;
        let mut row = 0;
        let caches = segments
            .iter()
            .map(|s| {
                let n = s.tokens.len();
                let own = KvCache::new(layers.clone(), layers_len(&layers)?).range(row, row + n)?;
                row += n;
                Ok(match s.prefix {
                    Some(prefix) => prefix.followed_by(own),
                    None => own,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((x, caches))
    }

    /// The packed pass; with `keep`, also every layer's keys and values of all its rows.
    fn packed(
        &self,
        segments: &[Segment<'_>],
        keep: bool,
    ) -> Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        if segments.is_empty() {
            return Ok((
                Tensor::zeros((0, self.dims.hidden), DType::F32, &self.device)?,
                Vec::new(),
            ));
        }
        if segments.iter().any(|s| s.tokens.is_empty()) {
            return Err(ModelError::EmptyPrompt);
        }
        // The distinct prefixes (by identity: a clone of a cache is the same prefix), and which
        // one each segment continues.
        let mut prefixes: Vec<&KvCache> = Vec::new();
        // By identity, then checked whole (a pass over a few hundred prompts, each with its
        // own stored prefix, compared every pair before: O(n^2)).
        let mut seen: std::collections::HashMap<Vec<(candle_core::TensorId, usize)>, usize> =
            std::collections::HashMap::new();
        let mut shape = Vec::with_capacity(segments.len());
        for s in segments {
            let index = s.prefix.map(|c| {
                let slot = seen.entry(c.identity()).or_insert(usize::MAX);
                if *slot == usize::MAX || !prefixes[*slot].same_as(c) {
                    prefixes.push(c);
                    *slot = prefixes.len() - 1;
                }
                *slot
            });
            let p = s.prefix.map_or(0, |c| c.len);
            if p + s.tokens.len() > self.dims.context_length {
                return Err(ModelError::PromptTooLong {
                    tokens: p + s.tokens.len(),
                    limit: self.dims.context_length,
                });
            }
            shape.push((index, s.tokens.len()));
        }
        for c in &prefixes {
            self.check_cache(c)?;
        }
        let tokens: Vec<u32> = segments
            .iter()
            .flat_map(|s| s.tokens.iter().copied())
            .collect();
        self.check_tokens(&tokens)?;

        let prefix_lens: Vec<usize> = prefixes.iter().map(|c| c.len).collect();
        let layout = PackedLayout::new(&prefix_lens, tokens.len());

        // Per row: its position, the key columns of its prefix, and its own first key column.
        let m = tokens.len();
        let mut positions = Vec::with_capacity(m);
        let mut bounds = [(); 4].map(|_| Vec::with_capacity(m));
        let mut last_rows = Vec::with_capacity(segments.len());
        let mut row = 0;
        for &(prefix, len) in &shape {
            let (pcol, p) = prefix.map_or((0, 0), |i| layout.prefix_cols[i]);
            let own = layout.rows_col + row;
            for j in 0..len {
                positions.push((p + j) as u32);
                bounds[0].push(pcol as u32);
                bounds[1].push((pcol + p) as u32);
                bounds[2].push(own as u32);
                bounds[3].push((own + j + 1) as u32);
            }
            row += len;
            last_rows.push((row - 1) as u32);
        }
        #[cfg(feature = "cuda")]
        if !self.fused.is_empty() {
            let starts = layout.prefix_cols.iter().map(|&(col, _)| col);
            let keys = fused::PassKeys::new(
                prefixes.iter().copied().zip(starts),
                layout.rows_col,
                self.attention_block(m, layout.rows_col + m),
            )?;
            let mut flat: Vec<u32> = (0..m)
                .flat_map(|r| bounds.iter().map(move |b| b[r]))
                .collect();
            window_flat(&mut flat, &positions, self.fused_window);
            return self.fused_pass(
                &self.fused,
                &tokens,
                &positions,
                &flat,
                &last_rows,
                &keys,
                keep,
            );
        }
        // On the CPU each segment attends on its own, as in its lone pass (`Keys::Segments`);
        // elsewhere all rows at once over the packed layout, under a band mask.
        let per_segment = self.device.is_cpu();
        // Per attention window in use: the band mask (GPU), or each segment's mask (CPU).
        let masks = self
            .windows()
            .map(|window| {
                if per_segment {
                    let masks = shape
                        .iter()
                        .map(|&(prefix, len)| {
                            let held = prefix.map_or(0, |i| prefix_lens[i]);
                            let keys = (held + len).next_multiple_of(KV_PAD);
                            causal_mask(len, held, keys, window, &self.device)
                        })
                        .collect::<candle_core::Result<Vec<_>>>()?;
                    Ok((window, (None, masks)))
                } else {
                    let bounds = match window {
                        Some(w) => windowed(&bounds, &positions, w),
                        None => bounds.clone(),
                    };
                    let band = band_mask(&bounds, layout.kv, &self.device)?;
                    Ok((window, (Some(self.per_head(band)?), Vec::new())))
                }
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let pos = Tensor::new(positions.as_slice(), &self.device)?;
        let ropes = self
            .ropes
            .iter()
            .map(|(cos, sin)| Ok((cos.index_select(&pos, 0)?, sin.index_select(&pos, 0)?)))
            .collect::<candle_core::Result<Vec<_>>>()?;

        let ids = Tensor::new(tokens.as_slice(), &self.device)?;
        let mut x = self.embed_rows(&ids)?.unsqueeze(0)?;
        let prefix_layers = prefixes
            .iter()
            .map(|c| c.whole())
            .collect::<Result<Vec<_>>>()?;
        let mut kept = Vec::with_capacity(if keep { self.layers.len() } else { 0 });
        for (i, layer) in self.layers.iter().enumerate() {
            let layer_prefixes: Vec<&(Tensor, Tensor)> =
                prefix_layers.iter().map(|l| &l[i]).collect();
            let (mask, segment_masks) = masks
                .iter()
                .find(|(w, _)| *w == layer.window)
                .map(|(_, m)| m)
                .expect("a mask per window in use");
            let keys = if per_segment {
                Keys::Segments {
                    prefixes: &layer_prefixes,
                    shape: &shape,
                    masks: segment_masks,
                }
            } else {
                Keys::Packed {
                    prefixes: &layer_prefixes,
                }
            };
            let (next, kv) = self.block(layer, &x, &ropes, keys, mask.as_ref(), true)?;
            if keep {
                kept.push(kv);
            }
            x = next;
        }
        let idx = Tensor::new(last_rows.as_slice(), &self.device)?;
        Ok((x.squeeze(0)?.index_select(&idx, 0)?, kept))
    }

    /// One decoder block over the residual stream `x` `(1, n, hidden)`: the family's norms,
    /// attention (with this block's RoPE table and window) and MLP, each added to the stream.
    /// Returns the stream after the block and this pass's keys and values.
    fn block(
        &self,
        layer: &Layer,
        x: &Tensor,
        ropes: &[(Tensor, Tensor)],
        keys: Keys<'_>,
        mask: Option<&Tensor>,
        pad: bool,
    ) -> Result<(Tensor, (Tensor, Tensor))> {
        let norm = |x: &Tensor, w: &Tensor| candle_nn::ops::rms_norm(x, w, self.eps);
        let h = norm(x, &layer.attn_norm)?;
        let (cos, sin) = &ropes[layer.rope];
        let (mut attn, kv) = self.attention(layer, &h, (cos, sin), keys, mask, pad)?;
        if let Some(w) = &layer.post_attn_norm {
            attn = norm(&attn, w)?;
        }
        let x = (attn + x)?;
        let h = norm(&x, &layer.ffn_norm)?;
        let mut mlp = layer.mlp(&h, pad)?;
        if let Some(w) = &layer.post_ffn_norm {
            mlp = norm(&mlp, w)?;
        }
        Ok(((mlp + &x)?, kv))
    }

    /// The embedding rows of `ids`, scaled where the family scales them.
    fn embed_rows(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.embed.embedding(ids)?;
        match self.embed_scale {
            Some(s) => x * s as f64,
            None => Ok(x),
        }
    }

    /// The distinct attention windows of the layers (`None`: global), in first-use order.
    fn windows(&self) -> impl Iterator<Item = Option<usize>> {
        let mut seen: Vec<Option<usize>> = Vec::new();
        for l in &self.layers {
            if !seen.contains(&l.window) {
                seen.push(l.window);
            }
        }
        seen.into_iter()
    }

    /// A cache made by this model.
    fn check_cache(&self, c: &KvCache) -> Result<()> {
        if let Some(p) = c
            .pieces
            .iter()
            .find(|p| p.layers.len() != self.dims.n_layers)
        {
            return Err(ModelError::Cache(format!(
                "the cache has {} layers, this model {}",
                p.layers.len(),
                self.dims.n_layers
            )));
        }
        Ok(())
    }

    /// Every id inside the vocabulary.
    fn check_tokens(&self, tokens: &[u32]) -> Result<()> {
        match tokens.iter().find(|&&t| t as usize >= self.dims.vocab_size) {
            Some(&id) => Err(ModelError::TokenOutOfRange {
                id,
                vocab_size: self.dims.vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// Output norm + head over hidden rows `(r, hidden)`: logits `(r, vocab_size)`, f32.
    pub fn head(&self, hidden: &Tensor) -> Result<Tensor> {
        self.head_with(hidden, Numerics::SplitInvariant)
    }

    /// [`Transformer::head`] with a chosen arithmetic layout.
    pub fn head_with(&self, hidden: &Tensor, numerics: Numerics) -> Result<Tensor> {
        let h = candle_nn::ops::rms_norm(hidden, &self.out_norm, self.eps)?;
        #[cfg(feature = "cuda")]
        if let (false, Linear::Dense(w)) = (self.fused.is_empty(), &self.head) {
            return Ok(crate::kernels::matmul_f32_out(
                &h.to_dtype(DType::BF16)?,
                w,
            )?);
        }
        Ok(self
            .head
            .forward(&h, numerics == Numerics::SplitInvariant)?)
    }

    /// On the GPU, an additive mask `(n, kv)` expanded once per pass to every head,
    /// `(1, n_head, n, kv)` and contiguous: adding a broadcast mask to the scores runs a
    /// strided kernel that took longer than all of a layer's matmuls (0.7 ms per layer at
    /// 1.5k tokens on an H200), a same-shape add a fraction of that. On CPU the broadcast
    /// add is cheap and the mask stays small.
    fn per_head(&self, mask: Tensor) -> candle_core::Result<Tensor> {
        if self.device.is_cpu() {
            return Ok(mask);
        }
        let (n, kv) = mask.dims2()?;
        mask.reshape((1, 1, n, kv))?
            .broadcast_as((1, self.dims.n_head, n, kv))?
            .contiguous()
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
            ..
        } = self.dims;
        let (b, n, _) = h.dims3()?;
        let proj = |w: &Linear,
                    bias: &Option<Tensor>,
                    norm: &Option<Tensor>,
                    heads: usize|
         -> Result<Tensor> {
            let mut y = w.forward(h, pad)?;
            if let Some(bias) = bias {
                y = y.broadcast_add(bias)?;
            }
            let mut y = y.reshape((b, n, heads, head_dim))?;
            if let Some(norm) = norm {
                y = candle_nn::ops::rms_norm(&y, norm, self.eps)?;
            }
            Ok(y.transpose(1, 2)?.contiguous()?)
        };
        let q = self.apply_rope(
            &proj(&layer.wq, &layer.bq, &layer.q_norm, n_head)?,
            cos,
            sin,
        )?;
        let k = self.apply_rope(
            &proj(&layer.wk, &layer.bk, &layer.k_norm, n_kv_head)?,
            cos,
            sin,
        )?;
        let v = proj(&layer.wv, &layer.bv, &None, n_kv_head)?;
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
            Keys::Packed { prefixes } => {
                // The prefixes, then this pass's rows (see PackedLayout).
                let mut ks: Vec<&Tensor> = prefixes.iter().map(|p| &p.0).collect();
                let mut vs: Vec<&Tensor> = prefixes.iter().map(|p| &p.1).collect();
                ks.push(&k);
                vs.push(&v);
                (
                    Tensor::cat(&ks, 2)?,
                    Tensor::cat(&vs, 2)?,
                    k.clone(),
                    v.clone(),
                )
            }
            Keys::Segments {
                prefixes,
                shape,
                masks,
            } => {
                let y = self.attend_segments(&q, (&k, &v), prefixes, shape, masks)?;
                let y = y.transpose(1, 2)?.reshape((b, n, n_head * head_dim))?;
                return Ok((layer.wo.forward(&y, pad)?, (k, v)));
            }
        };
        let y = self.attend(&q, &kp, &vp, mask, pad)?;
        let y = y.transpose(1, 2)?.reshape((b, n, n_head * head_dim))?;
        Ok((layer.wo.forward(&y, pad)?, (k, v)))
    }

    /// softmax(q k^T / sqrt(d) + mask) v over one layout of keys and values `kp`, `vp`
    /// (`(b, kv heads, keys, d)`, padded as the caller laid them out): `(b, heads, n, d)`.
    fn attend(
        &self,
        q: &Tensor,
        kp: &Tensor,
        vp: &Tensor,
        mask: Option<&Tensor>,
        pad: bool,
    ) -> candle_core::Result<Tensor> {
        let rep = self.dims.n_head / self.dims.n_kv_head;
        let kr = repeat_kv(kp, rep)?;
        let vr = repeat_kv(vp, rep)?;
        // A contiguous K^T: with a strided (transposed) rhs, candle's CPU gemm rounds
        // differently for 1-2 query rows than for more, which would break the
        // split-invariance described at KV_PAD.
        let kt = if pad && self.device.is_cpu() {
            kr.t()?.contiguous()?
        } else {
            kr.t()?
        };
        let scale = self.score_div;
        let att = if self.device.is_cpu() {
            // The order of candle-transformers (scores, then scale), which the CPU tests
            // compare against bit for bit.
            (q.matmul(&kt)? / scale)?
        } else {
            // Scaling the queries touches n x d values instead of n x kv scores.
            (q * (1.0 / scale))?.matmul(&kt)?
        };
        let att = match mask {
            Some(m) => att.broadcast_add(m)?,
            None => att,
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        if pad && self.device.is_cpu() {
            values_in_blocks(&att, |start, len| vr.narrow(2, start, len))
        } else {
            att.matmul(&vr.contiguous()?)
        }
    }

    /// [`Keys::Segments`]: each segment's rows of `q` against its prefix's keys and its own rows
    /// of `k`, scored, masked and summed as in its lone pass (the same scores, softmax row and
    /// VALUE_BLOCK blocks), so its rows come out bit for bit as they would alone. The prefixes'
    /// keys (repeated per query head and transposed) and values are laid out once a layer, not
    /// per segment. `(b, heads, rows, d)`.
    fn attend_segments(
        &self,
        q: &Tensor,
        (k, v): (&Tensor, &Tensor),
        prefixes: &[&(Tensor, Tensor)],
        shape: &[(Option<usize>, usize)],
        masks: &[Tensor],
    ) -> candle_core::Result<Tensor> {
        let rep = self.dims.n_head / self.dims.n_kv_head;
        let mut prefix_kt = Vec::with_capacity(prefixes.len());
        let mut prefix_v = Vec::with_capacity(prefixes.len());
        for (pk, pv) in prefixes.iter().copied() {
            prefix_kt.push(repeat_kv(pk, rep)?.t()?.contiguous()?);
            prefix_v.push(repeat_kv(pv, rep)?);
        }
        let scale = self.score_div;
        let mut ys = Vec::with_capacity(shape.len());
        let mut row = 0;
        for (&(prefix, len), mask) in shape.iter().zip(masks) {
            let held = prefix.map_or(0, |i| prefixes[i].0.dims()[2]);
            let own = mask.dim(1)? - held;
            // This segment's keys and values, zeros up to a multiple of KV_PAD.
            let padded = |x: &Tensor| -> candle_core::Result<Tensor> {
                let x = x.narrow(2, row, len)?;
                if own == len {
                    return x.contiguous();
                }
                let (b, heads, _, d) = x.dims4()?;
                let zeros = Tensor::zeros((b, heads, own - len, d), x.dtype(), x.device())?;
                Tensor::cat(&[&x, &zeros], 2)
            };
            let own_kt = repeat_kv(&padded(k)?, rep)?.t()?.contiguous()?;
            let own_v = repeat_kv(&padded(v)?, rep)?;
            let q_s = q.narrow(2, row, len)?.contiguous()?;
            let own_scores = q_s.matmul(&own_kt)?;
            let scores = match prefix {
                Some(i) => Tensor::cat(&[&q_s.matmul(&prefix_kt[i])?, &own_scores], 3)?,
                None => own_scores,
            };
            let att = (scores / scale)?.broadcast_add(mask)?;
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            let y = values_in_blocks(&att, |start, n| {
                let end = start + n;
                // Columns before `held` exist only over a prefix.
                let of_prefix = |from: usize, to: usize| match prefix {
                    Some(i) => prefix_v[i].narrow(2, from, to - from),
                    None => Err(candle_core::Error::Msg(
                        "prefix columns without a prefix".into(),
                    )),
                };
                if end <= held {
                    of_prefix(start, end)
                } else if start >= held {
                    own_v.narrow(2, start - held, n)
                } else {
                    Tensor::cat(
                        &[&of_prefix(start, held)?, &own_v.narrow(2, 0, end - held)?],
                        2,
                    )
                }
            })?;
            ys.push(y);
            row += len;
        }
        Tensor::cat(&ys, 2)
    }

    /// RoPE over the first `rotary_dim` dims of each head (all of them but for partial
    /// rotary); the rest pass through.
    fn apply_rope(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let d = self.dims.head_dim;
        let rot = |x: &Tensor| -> candle_core::Result<Tensor> {
            match self.rope {
                RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(x, cos, sin),
                RopeStyle::Half => candle_nn::rotary_emb::rope(x, cos, sin),
            }
        };
        if self.rotary_dim == d {
            return Ok(rot(x)?);
        }
        let r = self.rotary_dim;
        let rotated = rot(&x.narrow(3, 0, r)?.contiguous()?)?;
        Ok(Tensor::cat(&[&rotated, &x.narrow(3, r, d - r)?], 3)?.contiguous()?)
    }
}

/// Additive causal mask `(n, kv)`, `kv >= start + n`: query i (at position start + i) sees
/// keys 0..=start+i, and with a sliding `window` only those after start+i-window; other and
/// padding positions get -inf. Built on the device: for a long cached prefix the mask is
/// large, and building it on the host would cost a copy per pass.
fn causal_mask(
    n: usize,
    start: usize,
    kv: usize,
    window: Option<usize>,
    device: &Device,
) -> candle_core::Result<Tensor> {
    let rows = Tensor::arange(start as u32 + 1, (start + n) as u32 + 1, device)?.reshape((n, 1))?;
    let cols = Tensor::arange(0u32, kv as u32, device)?.reshape((1, kv))?;
    let seen = cols.broadcast_lt(&rows)?;
    let seen = match window {
        Some(w) => {
            // Query at position p sees keys at positions >= p + 1 - w.
            let lo: Vec<u32> = (start..start + n)
                .map(|p| (p + 1).saturating_sub(w) as u32)
                .collect();
            let lo = Tensor::new(lo.as_slice(), device)?.reshape((n, 1))?;
            seen.mul(&cols.broadcast_ge(&lo)?)?
        }
        None => seen,
    };
    additive(&seen)
}

/// [`band_mask`] bounds narrowed to a sliding `window`: row r, at position `positions[r]`,
/// keeps the keys at positions >= positions[r] + 1 - window. Its prefix's columns
/// `[b0, b1)` hold positions 0.., its own `[b2, b3)` positions from the prefix's length on.
fn windowed(bounds: &[Vec<u32>; 4], positions: &[u32], window: usize) -> [Vec<u32>; 4] {
    let mut out = bounds.clone();
    for (r, &pos) in positions.iter().enumerate() {
        let row = window_row([0, 1, 2, 3].map(|i| bounds[i][r]), pos, window);
        for (o, b) in out.iter_mut().zip(row) {
            o[r] = b;
        }
    }
    out
}

/// One row's bounds `[b0, b1, b2, b3]` (as [`windowed`] reads them) narrowed to `window`.
fn window_row(b: [u32; 4], pos: u32, window: usize) -> [u32; 4] {
    let lo = (pos as usize + 1).saturating_sub(window) as u32;
    let prefix_len = b[1] - b[0];
    [
        (b[0] + lo).min(b[1]),
        b[1],
        (b[2] + lo.saturating_sub(prefix_len)).min(b[3]),
        b[3],
    ]
}

/// Flat bounds (4 per row, the fused attention's layout) narrowed to `window` where the
/// model's layers all slide one ([`Transformer::fused_window`]).
#[cfg(feature = "cuda")]
fn window_flat(bounds: &mut [u32], positions: &[u32], window: Option<usize>) {
    let Some(window) = window else { return };
    for (row, &pos) in bounds.chunks_exact_mut(4).zip(positions) {
        let b = [row[0], row[1], row[2], row[3]];
        row.copy_from_slice(&window_row(b, pos, window));
    }
}

/// Additive mask `(rows, kv)` from per-row key-column bands: row r sees the columns in
/// `[b[0][r], b[1][r])` (its prefix) and `[b[2][r], b[3][r])` (itself, causally).
fn band_mask(bounds: &[Vec<u32>; 4], kv: usize, device: &Device) -> candle_core::Result<Tensor> {
    let rows = bounds[0].len();
    let cols = Tensor::arange(0u32, kv as u32, device)?.reshape((1, kv))?;
    let b: Vec<Tensor> = bounds
        .iter()
        .map(|v| Tensor::new(v.as_slice(), device)?.reshape((rows, 1)))
        .collect::<candle_core::Result<_>>()?;
    let inside = |lo: &Tensor, hi: &Tensor| -> candle_core::Result<Tensor> {
        cols.broadcast_ge(lo)?.mul(&cols.broadcast_lt(hi)?)
    };
    let seen = inside(&b[0], &b[1])?.maximum(&inside(&b[2], &b[3])?)?;
    additive(&seen)
}

/// The mask of the layers with attention `window` among `(window, mask)` pairs.
fn pick(masks: &[(Option<usize>, Option<Tensor>)], window: Option<usize>) -> Option<&Tensor> {
    masks
        .iter()
        .find(|(w, _)| *w == window)
        .and_then(|(_, m)| m.as_ref())
}

/// 0 where `seen` (u8) is 1, -inf elsewhere.
fn additive(seen: &Tensor) -> candle_core::Result<Tensor> {
    let zero = Tensor::zeros(seen.shape(), DType::F32, seen.device())?;
    let blocked = Tensor::full(f32::NEG_INFINITY, seen.shape(), seen.device())?;
    seen.where_cond(&zero, &blocked)
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

/// cos/sin tables `(context_length, rotary_dim / 2)`, computed as candle-transformers does
/// (and transformers: f32 inverse frequencies times f32 positions), from the scaled inverse
/// frequencies where the family rescales them.
fn rope_tables(
    rotary_dim: usize,
    rope: &Rope,
    context_length: usize,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let theta: Vec<f32> = match &rope.inv_freq {
        Some(inv) => inv.clone(),
        None => crate::arch::inv_freq(rope.base, rotary_dim),
    };
    let theta = Tensor::new(theta.as_slice(), device)?;
    let idx_theta = Tensor::arange(0, context_length as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((context_length, 1))?
        .matmul(&theta.reshape((1, theta.elem_count()))?)?;
    if rope.mscale != 1.0 {
        let m = rope.mscale as f64;
        return Ok(((idx_theta.cos()? * m)?, (idx_theta.sin()? * m)?));
    }
    Ok((idx_theta.cos()?, idx_theta.sin()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(len: usize) -> KvCache {
        let layer = || Tensor::zeros((1, 2, len, 4), DType::F32, &Device::Cpu).unwrap();
        KvCache::new(vec![(layer(), layer()), (layer(), layer())], len)
    }

    /// A cache of `len` positions from `first` on whose values are their positions (layer
    /// i's V: position + 1000 i), in one piece.
    fn numbered(first: usize, len: usize) -> KvCache {
        let layer = |i: usize| {
            let k = Tensor::arange(first as f32, (first + len) as f32, &Device::Cpu)
                .unwrap()
                .reshape((1, 1, len, 1))
                .unwrap()
                .repeat((1, 2, 1, 4))
                .unwrap();
            let v = (&k + 1000.0 * i as f64).unwrap();
            (k, v)
        };
        KvCache::new(vec![layer(0), layer(1)], len)
    }

    fn positions(c: &KvCache, layer: usize) -> (Vec<f32>, Vec<f32>) {
        let whole = c.whole().unwrap();
        let (k, v) = &whole[layer];
        let column = |t: &Tensor| {
            use candle_core::IndexOp;
            t.i((0, 1, .., 3)).unwrap().to_vec1::<f32>().unwrap()
        };
        (column(k), column(v))
    }

    /// The K tensor of layer 0 of each piece (which memory each piece is).
    fn piece_ids(c: &KvCache) -> Vec<candle_core::TensorId> {
        c.piece_layers()
            .map(|(layers, _)| layers[0].0.id())
            .collect()
    }

    #[test]
    fn pieces_read_as_one_cache_and_copy_together_into_one() {
        let first = numbered(0, 5);
        let second = numbered(5, 3);
        let c = first.with_piece(second.whole().unwrap().into_owned(), 3);
        assert_eq!((c.len(), c.pieces()), (8, 2));
        let all: Vec<f32> = (0..8).map(|p| p as f32).collect();
        assert_eq!(
            positions(&c, 1),
            (all.clone(), all.iter().map(|p| p + 1000.0).collect())
        );
        assert_eq!(c.size_bytes(), first.size_bytes() + second.size_bytes());
        assert!(c.same_as(&c.clone()));

        let one = c.in_one_piece().unwrap();
        assert_eq!((one.len(), one.pieces()), (8, 1));
        assert_eq!(positions(&one, 1), positions(&c, 1));
        assert!(!c.same_as(&one));
        assert!(
            one.same_as(&one.in_one_piece().unwrap()),
            "one piece: a clone"
        );
    }

    #[test]
    fn a_prefix_shares_the_whole_pieces_before_its_cut_and_copies_the_cut_one() {
        let first = numbered(0, 5);
        let c = first.with_piece(numbered(5, 3).whole().unwrap().into_owned(), 3);
        let all: Vec<f32> = (0..8).map(|p| p as f32).collect();
        let [whole_first, whole_second] = piece_ids(&c)[..] else {
            panic!("two pieces")
        };
        for (len, pieces, shared) in [
            (8, 2, vec![true, true]),
            (6, 2, vec![true, false]),
            (5, 1, vec![true]),
            (2, 1, vec![false]),
        ] {
            let p = c.prefix(len).unwrap();
            assert_eq!((p.len(), p.pieces()), (len, pieces), "prefix {len}");
            assert_eq!(positions(&p, 1).0, all[..len], "prefix {len}");
            assert_eq!(
                positions(&p, 1).1,
                all[..len].iter().map(|x| x + 1000.0).collect::<Vec<_>>()
            );
            let kept: Vec<bool> = piece_ids(&p)
                .iter()
                .zip([whole_first, whole_second])
                .map(|(id, whole)| *id == whole)
                .collect();
            assert_eq!(kept, shared, "prefix {len}: which pieces are shared");
            assert_eq!(p.same_as(&c), len == 8, "prefix {len}");
        }
        // The cut piece holds only its own positions: the longer one's memory can go.
        let cut = c.prefix(6).unwrap();
        assert_eq!(cut.size_bytes(), first.size_bytes() * 6 / 5);
        assert!(c.prefix(9).is_err());
        assert!(c.prefix(0).is_err());
    }

    /// The GPU's band mask narrowed to a window equals the sequential path's windowed causal
    /// mask for a segment over a prefix (the CPU tests reach only the per-segment masks).
    #[test]
    fn windowed_band_mask_is_the_windowed_causal_mask() {
        let dev = Device::Cpu;
        for (p, n, w) in [(0, 9, 4), (5, 7, 3), (12, 4, 8), (3, 5, 100), (20, 1, 6)] {
            // One segment: its prefix at columns 0..p, its rows at p..p+n.
            let positions: Vec<u32> = (p..p + n).map(|x| x as u32).collect();
            let bounds = [
                vec![0u32; n],
                vec![p as u32; n],
                vec![p as u32; n],
                (0..n).map(|j| (p + j + 1) as u32).collect(),
            ];
            let band = band_mask(&windowed(&bounds, &positions, w), p + n, &dev).unwrap();
            let causal = causal_mask(n, p, p + n, Some(w), &dev).unwrap();
            assert_eq!(
                band.to_vec2::<f32>().unwrap(),
                causal.to_vec2::<f32>().unwrap(),
                "prefix {p}, rows {n}, window {w}"
            );
            // And the window holds: row j sees exactly min(w, p + j + 1) keys.
            for (j, row) in causal.to_vec2::<f32>().unwrap().iter().enumerate() {
                let seen = row.iter().filter(|x| x.is_finite()).count();
                assert_eq!(seen, w.min(p + j + 1), "prefix {p}, row {j}, window {w}");
            }
        }
    }

    #[test]
    fn a_clone_is_the_same_prefix_and_a_copy_or_a_shorter_view_is_not() {
        let a = cache(8);
        assert!(a.same_as(&a.clone()));
        assert!(!a.same_as(&cache(8)), "equal contents, other tensors");
        assert!(!a.same_as(&a.prefix(4).unwrap()), "a shorter copy");
        assert!(
            a.same_as(&a.prefix(8).unwrap()),
            "the whole length is a clone"
        );
    }
}
