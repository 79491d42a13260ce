//! The forward pass on CUDA with dense bf16 weights, through the fused kernels of
//! [`crate::kernels`].
//!
//! Why a second path: built from candle's ops, a layer was ~40 kernel launches (casts to and
//! from f32 around each matmul, copies that assemble keys, a mask and a score matrix per
//! head), so a short read was bound by launch overhead and a long one by the f32 scores.
//! Here a layer is 9 launches: residual add + RMSNorm, one QKV matmul, `qkv_rope` (after
//! Qwen3's `qk_norm`), `attention`, the output matmul, residual add + RMSNorm, one gate/up
//! matmul, `silu_mul`, the down matmul (8 on Hopper for passes of [`FUSED_GATE_UP_MIN_ROWS`]
//! rows or more, where one kernel computes the gate/up projection and its SwiGLU gate
//! together). With `DECIDE_RESIDUAL_IN_GEMM=1` (not yet measured: [`FusedLayer`]), the
//! output and down matmuls add their products to the stream in cuBLAS's epilogue (f32,
//! unrounded), so the norms after them only read the stream. The residual stream stays f32
//! as on the candle-op path, so rounding does not pile up over the layers (a bf16 stream, as in Hugging
//! Face's bf16 models, made packed and lone reads of one prompt differ ~300x more on q15), and
//! keys are read where they lie (cached prefixes are never copied into a pass).
//!
//! Results differ from the candle-op path by bf16 rounding only (queries, keys, values and
//! attention weights are bf16 here, f32 there); `forward_bench ... compare` on the GPU
//! reports the largest log-probability and probability differences between the two.

use candle_core::{DType, Tensor};

use super::graphs;
use super::matmuls::Projection;
use super::{KvCache, Layer, Linear, RopeStyle, Transformer};
use crate::attention_plan::SHAPE_RULE_MAX_ROWS;
use crate::error::{ModelError, Result};
use crate::kernels::{self, AttentionBlock, AttentionPlan, Heads, KeySources, PrefixAddresses};
use crate::switch::{Number, Switch};

/// One decoder block's weights, projections concatenated so each runs as one matmul.
pub(super) struct FusedLayer {
    /// f32, like `ffn_norm`.
    attn_norm: Tensor,
    /// `(hidden, (n_head + 2 n_kv_head) head_dim)`: `[Wq | Wk | Wv]` transposed.
    wqkv: Tensor,
    /// The concatenated q/k/v biases (f32), when the model has any; with `qk_norm`, the
    /// values' alone (the queries' and keys' come before their norm, in `norm_bias`).
    bqkv: Option<Tensor>,
    /// Qwen3's per-head q and k RMSNorm weights (f32, `(head_dim)` each), applied between
    /// the QKV projection and RoPE ([`kernels::qk_norm`]).
    qk_norm: Option<(Tensor, Tensor)>,
    /// With `qk_norm`, the concatenated biases the norm adds first (`None`: no bias).
    norm_bias: Option<Tensor>,
    wo: Tensor,
    ffn_norm: Tensor,
    /// `(2 ffn, hidden)`: the gate and up weights' rows (one per output column), alternating
    /// in blocks of `gate_up_block` ([`gate_up_interleaved`]).
    wgu: Tensor,
    gate_up_block: usize,
    /// Whether passes of [`FUSED_GATE_UP_MIN_ROWS`] or more run [`kernels::gate_up_silu`].
    fused_gate_up: bool,
    down: Tensor,
    /// Whether the output and down projections add to the residual stream in their GEMM
    /// ([`kernels::matmul_accumulate`]). Opt-in (`DECIDE_RESIDUAL_IN_GEMM=1`) until an H200
    /// run measures it: written in a session without a GPU, it has not run yet (`probes` in
    /// bench/h200_side_by_side.sh times the 28k prefill with it, kernel_check checks
    /// `matmul_accumulate` and `rms_norm`). It changes results: the products are added
    /// unrounded instead of as bf16.
    residual_in_gemm: bool,
}

impl FusedLayer {
    /// The four projections' weights, `(k, n)` each except the gate/up one, `(n, k)`
    /// ([`Projection::weight_nk`]).
    pub(super) fn projections(&self) -> [(Projection, &Tensor); 4] {
        [
            (Projection::Qkv, &self.wqkv),
            (Projection::Output, &self.wo),
            (Projection::GateUp, &self.wgu),
            (Projection::Down, &self.down),
        ]
    }

    /// Concatenates a block's dense bf16 weights (the separate ones are dropped with `layer`).
    pub(super) fn new(layer: Layer, widths: (usize, usize)) -> Result<Self> {
        let dense = |l: &Linear| -> Result<Tensor> {
            match l {
                Linear::Dense(w) if w.dtype() == DType::BF16 => Ok(w.clone()),
                _ => Err(ModelError::Compute(
                    "the fused forward needs dense bf16 weights".into(),
                )),
            }
        };
        let (q_width, kv_width) = widths;
        let (gate, up) = (dense(&layer.gate)?, dense(&layer.up)?);
        let (hidden, ffn) = gate.dims2()?;
        let gate_up_block = if ffn % kernels::GATE_UP_BLOCK == 0 {
            kernels::GATE_UP_BLOCK
        } else {
            ffn
        };
        let bqkv = if layer.bq.is_some() || layer.bk.is_some() || layer.bv.is_some() {
            let dev = layer.attn_norm.device();
            let part = |b: &Option<Tensor>, n: usize| -> Result<Tensor> {
                Ok(match b {
                    Some(b) => b.to_dtype(DType::F32)?,
                    None => Tensor::zeros(n, DType::F32, dev)?,
                })
            };
            Some(Tensor::cat(
                &[
                    part(&layer.bq, q_width)?,
                    part(&layer.bk, kv_width)?,
                    part(&layer.bv, kv_width)?,
                ],
                0,
            )?)
        } else {
            None
        };
        let qk_norm = match (&layer.q_norm, &layer.k_norm) {
            (Some(q), Some(k)) => Some((q.to_dtype(DType::F32)?, k.to_dtype(DType::F32)?)),
            (None, None) => None,
            _ => {
                return Err(ModelError::Compute(
                    "a layer with a q norm and no k norm, or the reverse".into(),
                ))
            }
        };
        // With q/k norms the queries' and keys' biases go in before the norm, the values'
        // in qkv_rope.
        let (bqkv, norm_bias) = match (&qk_norm, bqkv) {
            (Some(_), Some(b)) => {
                let qk = q_width + kv_width;
                let v_only = Tensor::cat(
                    &[
                        Tensor::zeros(qk, DType::F32, b.device())?,
                        b.narrow(0, qk, kv_width)?,
                    ],
                    0,
                )?;
                (Some(v_only), Some(b))
            }
            (_, b) => (b, None),
        };
        Ok(Self {
            attn_norm: layer.attn_norm.to_dtype(DType::F32)?,
            wqkv: Tensor::cat(
                &[dense(&layer.wq)?, dense(&layer.wk)?, dense(&layer.wv)?],
                1,
            )?,
            bqkv,
            qk_norm,
            norm_bias,
            wo: dense(&layer.wo)?,
            ffn_norm: layer.ffn_norm.to_dtype(DType::F32)?,
            wgu: gate_up_interleaved(&gate, &up, gate_up_block)?,
            gate_up_block,
            fused_gate_up: gate_up_block == kernels::GATE_UP_BLOCK
                && kernels::gate_up_silu_runs_on(layer.attn_norm.device(), hidden, ffn)
                && std::env::var("DECIDE_FUSED_GATE_UP").map_or(true, |v| v != "0"),
            down: dense(&layer.down)?,
            residual_in_gemm: std::env::var("DECIDE_RESIDUAL_IN_GEMM").is_ok_and(|v| v == "1"),
        })
    }
}

/// Rows from which a pass's gate/up projection and SwiGLU gate run as one kernel
/// ([`kernels::gate_up_silu`], Hopper), where the layer allows it (`DECIDE_FUSED_GATE_UP=0`
/// turns it off, for A/B runs). Below, cuBLAS's matmul and `silu_mul`: there the product is
/// small and cuBLAS picks tiles for the row count, where the kernel always has 128 rows
/// (H200, q15: a tie at 512 rows, 0.099 against 0.103 ms at 1,024, 0.637 against 0.786 at
/// 8,192; bench/reports/h200-side-by-side-11/probes). `DECIDE_FUSED_GATE_UP_MIN_ROWS` moves
/// it, for A/B runs of short reads (bench/kernel_lease.sh's `short` step, session 36: a lone
/// short read's pass is bound by its weights' bytes and its ~250 launches, one of which per
/// layer the fused kernel saves; below 512 rows it also runs inside the CUDA graphs of short
/// passes, which forward_bench `short` checks by comparing replays with the eager read). At 32
/// it gained nothing on a lone short read (71 rows: 2.566 against 2.536 and 2.517 ms synced
/// as served, H100, bench/reports/h100-side-by-side-20/short-read), so 1,024 stays.
pub(super) static FUSED_GATE_UP_MIN_ROWS: Number =
    Number::new("DECIDE_FUSED_GATE_UP_MIN_ROWS", 1024);

/// The gate/up weight as [`kernels::gate_up_silu`] reads it, from `gate` and `up` `(k, i)`:
/// `(2 i, k)`, rows `[2 b t, 2 b t + b)` gate rows `b t..` and the next `b` the matching up
/// rows, for blocks of `b` = `block` (`i`: all gate rows, then all up rows).
fn gate_up_interleaved(gate: &Tensor, up: &Tensor, block: usize) -> Result<Tensor> {
    let (k, i) = gate.dims2()?;
    let rows = |w: &Tensor| -> Result<Tensor> { Ok(w.t()?.reshape((i / block, block, k))?) };
    Ok(Tensor::cat(&[rows(gate)?, rows(up)?], 1)?.reshape((2 * i, k))?)
}

/// What one fused pass attends over besides its own rows.
pub(super) struct PassKeys<'a> {
    /// Per piece of every distinct cached prefix, every layer's K and V addresses.
    pub prefixes: Vec<&'a PrefixAddresses>,
    /// Per prefix: (first key column, length).
    pub cols: Vec<(usize, usize)>,
    /// First key column of the pass's own rows.
    pub own_start: usize,
    /// The attention's block shape (see [`AttentionBlock`]).
    pub block: AttentionBlock,
}

/// A pass's inputs on the device: token ids, positions and row bounds (u32), the rows read
/// out, and the address tables of the cached keys it reads.
pub(super) struct PassInputs {
    pub ids: Tensor,
    pub positions: Tensor,
    pub bounds: Tensor,
    /// The rows whose final hidden states the pass returns, and their bounds; `None`: no
    /// row (a prefill chunk, run for its keys and values alone).
    pub picks: Option<Picks>,
    pub sources: KeySources,
    /// The attention's block shape.
    pub block: AttentionBlock,
    /// The attention's key split and block order over every row (each layer but the last).
    pub plan: AttentionPlan,
}

/// The rows a pass reads out (u32 row indices, `(P)`) and their attention bounds (u32,
/// `(P, 4)`): only these go through the last layer past its keys and values.
pub(super) struct Picks {
    pub rows: Tensor,
    pub bounds: Tensor,
    /// The last layer's attention plan, over these rows alone.
    pub plan: AttentionPlan,
}

/// The bounds of rows `picks`, from every row's `bounds` (4 per row).
fn pick_bounds(bounds: &[u32], picks: &[u32]) -> Vec<u32> {
    picks
        .iter()
        .flat_map(|&r| bounds[4 * r as usize..4 * r as usize + 4].iter().copied())
        .collect()
}

/// Rows from which a pass's own keys and values extend a cache as a piece of their own
/// rather than copied together with it ([`KvCache`]): long prefill chunks. Shorter
/// extensions (a question after its input, a short stretch stored for the next prompt) copy
/// little, and keep the pieces of the caches that short passes read few.
const PIECE_MIN_ROWS: usize = 1024;

/// Whether long chunks extend a cache by pieces (`DECIDE_KV_PIECES=0` copies them together,
/// as before, for A/B runs: written without a GPU, the pieces have not been timed yet).
static KV_PIECES: Switch = Switch::new("DECIDE_KV_PIECES", true);

impl<'a> PassKeys<'a> {
    /// The keys of a pass over cached prefixes, each `(cache, its first key column)`: every
    /// piece of each ([`KvCache`] says why a cache may be held in several) as a prefix of its
    /// own, side by side from the cache's first column; the pass's own rows from `own_start`.
    pub(super) fn new(
        caches: impl IntoIterator<Item = (&'a KvCache, usize)>,
        own_start: usize,
        block: AttentionBlock,
    ) -> Result<Self> {
        let mut prefixes = Vec::new();
        let mut cols = Vec::new();
        for (cache, mut col) in caches {
            for piece in cache.piece_addresses() {
                let (addresses, len) = piece?;
                prefixes.push(addresses);
                cols.push((col, len));
                col += len;
            }
        }
        Ok(Self {
            prefixes,
            cols,
            own_start,
            block,
        })
    }
}

impl PassInputs {
    /// `graph`: for a CUDA graph's capture (see [`KeySources::new`]).
    pub(super) fn upload(
        t: &Transformer,
        tokens: &[u32],
        positions: &[u32],
        bounds: &[u32],
        picks: &[u32],
        keys: &PassKeys<'_>,
        graph: bool,
    ) -> Result<Self> {
        let dev = &t.device;
        // A pass that a CUDA graph may replay is planned from its shape alone
        // ([`crate::attention_plan`] says why), and from the shape the graph has: rows padded
        // as graphs.rs pads them, rows read out too. Else its eager first sighting and its
        // replays could split their keys differently, so round differently: planned from 71
        // rows and 1 read out, a lone short question's last layer took 1 split on the
        // mma.sync kernel's shape, its graph of 96 and 8 took 2, and its replays differed from
        // the eager read by 0.0026 in log-probability (forward_bench `short`, H100, session
        // 37). A longer pass is planned from its rows' bounds.
        let by_bounds = tokens.len() > SHAPE_RULE_MAX_ROWS;
        let (rows, picked) = if by_bounds {
            (tokens.len(), picks.len())
        } else {
            graphs::padded_shape(tokens.len(), picks.len())
        };
        let own = (keys.own_start, rows);
        let plan = |m: usize, b: &[u32]| {
            let d = &t.dims;
            let shape = keys.block.plan_shape();
            AttentionPlan::new(shape, d.n_head, d.head_dim, m, own, by_bounds.then_some(b))
        };
        let picks = if picks.is_empty() {
            None
        } else {
            let b = pick_bounds(bounds, picks);
            Some(Picks {
                rows: Tensor::new(picks, dev)?,
                plan: plan(picked, &b),
                bounds: Tensor::new(b.as_slice(), dev)?,
            })
        };
        Ok(Self {
            block: keys.block,
            plan: plan(rows, bounds),
            ids: Tensor::new(tokens, dev)?,
            positions: Tensor::new(positions, dev)?,
            bounds: Tensor::new(bounds, dev)?,
            picks,
            sources: KeySources::new(
                dev,
                &keys.prefixes,
                &keys.cols,
                keys.own_start,
                t.dims.n_layers,
                !graph,
            )?,
        })
    }

    /// Writes new values of the same sizes into these buffers (for a graph's replay).
    pub(super) fn write(
        &mut self,
        tokens: &[u32],
        positions: &[u32],
        bounds: &[u32],
        picks: &[u32],
        keys: &PassKeys<'_>,
    ) -> Result<()> {
        kernels::write_u32(&self.ids, tokens)?;
        kernels::write_u32(&self.positions, positions)?;
        kernels::write_u32(&self.bounds, bounds)?;
        match &self.picks {
            Some(p) => {
                kernels::write_u32(&p.rows, picks)?;
                kernels::write_u32(&p.bounds, &pick_bounds(bounds, picks))?;
            }
            None if picks.is_empty() => {}
            None => {
                return Err(ModelError::Compute(
                    "a graph captured without picked rows replayed with some".into(),
                ))
            }
        }
        self.sources.write(&keys.prefixes, &keys.cols)?;
        Ok(())
    }
}

impl Transformer {
    /// Runs `tokens` (at `positions`) through the fused layers. Row r sees the key columns in
    /// `[bounds[4r], bounds[4r+1])` and `[bounds[4r+2], bounds[4r+3])` of `keys`. Returns the
    /// final hidden states of rows `picks` `(picks.len(), hidden)` f32, in that order, and,
    /// with `keep_kv`, each layer's own keys and values `(1, n_kv_head, rows, head_dim)`.
    ///
    /// A short pass without `keep_kv` may replay a CUDA graph ([`super::graphs`]); its
    /// hidden states then live in the graph's output buffer, which the next replay
    /// overwrites: use them (on the stream) before the next pass.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fused_pass(
        &self,
        layers: &[FusedLayer],
        tokens: &[u32],
        positions: &[u32],
        bounds: &[u32],
        picks: &[u32],
        keys: &PassKeys<'_>,
        keep_kv: bool,
    ) -> Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        if !keep_kv {
            if let Some(x) = self
                .graphs
                .run(self, layers, tokens, positions, bounds, picks, keys)?
            {
                return Ok((x, Vec::new()));
            }
        }
        let inputs = PassInputs::upload(self, tokens, positions, bounds, picks, keys, false)?;
        self.fused_layers(layers, &inputs, keep_kv)
    }

    /// The launches of [`Transformer::fused_pass`] over uploaded inputs.
    ///
    /// The last layer runs past its keys and values for the picked rows alone: no later
    /// layer reads the other rows' outputs, and the head reads only the picked ones. On a
    /// long prefill (no picked row in most chunks, one in the last) that skips 1/28 of q15's
    /// attention and of its output and MLP matmuls; on a batch of short prompts (one picked
    /// row in ~40) most of the last layer's matmuls.
    pub(super) fn fused_layers(
        &self,
        layers: &[FusedLayer],
        inputs: &PassInputs,
        keep_kv: bool,
    ) -> Result<(Tensor, Vec<(Tensor, Tensor)>)> {
        let picked = inputs.picks.as_ref().map_or(0, |p| p.rows.elem_count());
        let heads = Heads {
            q: self.dims.n_head,
            kv: self.dims.n_kv_head,
            dim: self.dims.head_dim,
        };
        let interleaved = self.rope == RopeStyle::Interleaved;
        let mut stream = ResidualStream {
            x: self.embed.embedding(&inputs.ids)?,
            delta: None,
            eps: self.eps,
        };
        let mut kv = Vec::with_capacity(if keep_kv { layers.len() } else { 0 });
        for (i, l) in layers.iter().enumerate() {
            let h = stream.norm(&l.attn_norm)?;
            let qkv = self.project(Projection::Qkv, &h, &l.wqkv)?;
            if let Some((q_weight, k_weight)) = &l.qk_norm {
                let weights = (q_weight, k_weight);
                kernels::qk_norm(&qkv, l.norm_bias.as_ref(), weights, heads, self.eps)?;
            }
            let (q, k, v) = kernels::qkv_rope(
                &qkv,
                l.bqkv.as_ref(),
                (&self.cos, &self.sin),
                &inputs.positions,
                heads,
                interleaved,
            )?;
            if keep_kv {
                kv.push((k.clone(), v.clone()));
            }
            let (q, bounds, plan) = if i + 1 < layers.len() {
                (q, &inputs.bounds, inputs.plan)
            } else {
                match &inputs.picks {
                    Some(p) => {
                        stream.x = kernels::gather_rows(&stream.x, &p.rows)?;
                        (kernels::gather_rows(&q, &p.rows)?, &p.bounds, p.plan)
                    }
                    // No row is read out: the keys and values were all this pass was for.
                    // (An empty view: a kernel launched over zero rows is an invalid
                    // argument.)
                    None => return Ok((stream.x.narrow(0, 0, 0)?, kv)),
                }
            };
            let a = kernels::attention(
                &q,
                (&k, &v),
                &inputs.sources,
                i,
                bounds,
                heads,
                inputs.block,
                plan,
            )?;
            self.add_projection(&mut stream, l, Projection::Output, &a, &l.wo)?;
            let h = stream.norm(&l.ffn_norm)?;
            let up = self.gate_up(l, &h)?;
            self.add_projection(&mut stream, l, Projection::Down, &up, &l.down)?;
        }
        let x = stream.finish()?;
        debug_assert_eq!(x.dims2()?, (picked, self.dims.hidden));
        Ok((x, kv))
    }
}

/// The residual stream (f32) between blocks, and a block's output not yet added to it.
struct ResidualStream {
    x: Tensor,
    /// A block's bf16 output (projected through cuBLAS's bf16 matmul), added by the next
    /// norm; `None` once the GEMM itself added it ([`kernels::matmul_accumulate`]).
    delta: Option<Tensor>,
    eps: f32,
}

impl ResidualStream {
    /// The next block's input: the RMS norm of the stream times `weight`, after adding the
    /// pending output.
    fn norm(&mut self, weight: &Tensor) -> Result<Tensor> {
        Ok(match self.delta.take() {
            None => kernels::rms_norm(&self.x, weight, self.eps)?,
            Some(delta) => {
                let (x, h) = kernels::add_rms_norm(&self.x, Some(&delta), Some(weight), self.eps)?;
                self.x = x;
                h.expect("a weight gives a norm")
            }
        })
    }

    /// The stream after the last block.
    fn finish(self) -> Result<Tensor> {
        Ok(match self.delta {
            None => self.x,
            Some(delta) => kernels::add_rms_norm(&self.x, Some(&delta), None, self.eps)?.0,
        })
    }
}

impl Transformer {
    /// Adds `a @ w` (the output or the down projection) to the stream: in the GEMM's epilogue
    /// where the layer allows it ([`FusedLayer::residual_in_gemm`]), else as a bf16 product
    /// the next norm adds.
    fn add_projection(
        &self,
        stream: &mut ResidualStream,
        l: &FusedLayer,
        projection: Projection,
        a: &Tensor,
        w: &Tensor,
    ) -> Result<()> {
        debug_assert!(
            stream.delta.is_none(),
            "a norm runs between two projections"
        );
        if l.residual_in_gemm {
            // The stream's buffer is this pass's own: the embedding's output, a norm's sum
            // or the last layer's gathered rows, never shared with another tensor.
            kernels::matmul_accumulate(&stream.x, a, w)?;
        } else {
            stream.delta = Some(self.project(projection, a, w)?);
        }
        Ok(())
    }
}

impl Transformer {
    /// `x @ w` for one of a layer's projections (`w` stored as [`Projection::weight_nk`]
    /// says): the way tuned at load for `x`'s rows ([`super::matmuls`]), or candle's matmul
    /// when tuning is off.
    fn project(&self, projection: Projection, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        match &self.matmuls {
            Some(m) => m.matmul(projection, x, w),
            None if projection.weight_nk() => Ok(x.matmul(&w.t()?)?),
            None => Ok(x.matmul(w)?),
        }
    }

    /// `silu(h Wgate) * (h Wup)`: in one kernel on long passes where the layer allows it,
    /// else the gate/up matmul and `silu_mul`.
    fn gate_up(&self, l: &FusedLayer, h: &Tensor) -> Result<Tensor> {
        if l.fused_gate_up && h.dim(0)? >= FUSED_GATE_UP_MIN_ROWS.get() {
            return Ok(kernels::gate_up_silu(h, &l.wgu)?);
        }
        let gate_up = self.project(Projection::GateUp, h, &l.wgu)?;
        Ok(kernels::silu_mul(&gate_up, l.gate_up_block)?)
    }

    /// The attention block shape for a pass of `rows` rows over `keys` key columns (cached
    /// and its own) on this model's device: [`AttentionBlock::served`].
    pub(super) fn attention_block(&self, rows: usize, keys: usize) -> AttentionBlock {
        AttentionBlock::served(&self.device, self.dims.head_dim, rows, keys)
    }

    /// [`Transformer::forward`] on the fused layers: `tokens` continue `cache` (one prefix),
    /// each row sees the prefix and, causally, the earlier rows. Returns the hidden states at
    /// `rows` (f32) and the cache extended by `tokens` (bf16): by a piece of their own when
    /// they are [`PIECE_MIN_ROWS`] or more and the cache has room for one
    /// ([`KvCache::MAX_PIECES`]), else copied together with the cache's pieces.
    pub(super) fn fused_forward(
        &self,
        tokens: &[u32],
        start_pos: usize,
        cache: Option<&KvCache>,
        rows: &[usize],
    ) -> Result<(Tensor, KvCache)> {
        let n = tokens.len();
        let held = cache.map_or(0, |c| c.len);
        let positions: Vec<u32> = (start_pos..start_pos + n).map(|p| p as u32).collect();
        let mut bounds: Vec<u32> = (0..n)
            .flat_map(|j| [0, held as u32, held as u32, (held + j + 1) as u32])
            .collect();
        super::window_flat(&mut bounds, &positions, self.fused_window);
        let keys = PassKeys::new(
            cache.map(|c| (c, 0)),
            held,
            self.attention_block(n, held + n),
        )?;
        let picks: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        let (picked, own) = self.fused_pass(
            &self.fused,
            tokens,
            &positions,
            &bounds,
            &picks,
            &keys,
            true,
        )?;
        let extended = match cache {
            None => KvCache::new(own, start_pos + n),
            Some(c)
                if n >= PIECE_MIN_ROWS && c.pieces() < KvCache::MAX_PIECES && KV_PIECES.on() =>
            {
                c.with_piece(own, n)
            }
            // Copied together with the cache's pieces, as one.
            Some(c) => c.with_piece(own, n).in_one_piece()?,
        };
        // No rows (a prefill): `picked` is an empty f32 view.
        Ok((picked, extended))
    }
}
