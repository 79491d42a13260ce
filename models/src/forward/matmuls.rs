//! The fused layers' four projections (QKV, output, gate/up, down), each run the fastest
//! way for its row count, chosen by timing when the model loads.
//!
//! Why: candle's matmul calls `cublasGemmStridedBatchedEx`, which takes cuBLAS's default
//! algorithm for a shape. On the H200 `layer_bench` found cuBLASLt candidates up to 35%
//! faster on some projections (the output projection at 3,683 rows) and a 512-row layer
//! 14-16% faster in all, and slower on others (QKV at 3,768 rows); no rule picks the winner.
//! So at load, for each projection and each row count of [`BUCKETS`], the GPU times
//! candle's call and cuBLASLt's heuristic candidates on the model's own weights, and keeps
//! the fastest. A pass of `m` rows runs the choice of the first bucket of at least `m`
//! rows, with descriptors built for `m` itself (and checked by cuBLASLt: a choice that does
//! not apply to `m` falls back to candle's call). The choice is fixed for the server's life,
//! so a given batch shape always computes the same way; reads still differ by bf16 rounding
//! between row counts, as they did with cuBLAS's own per-shape choices.
//!
//! What it measured (H200, q15, bench/reports/h200-side-by-side-8/): cuBLASLt replaced 33-37
//! of the 104 (projection, bucket) pairs, and the timed matmuls summed 3-4% less; at the
//! server no figure moved beyond the noise (256 clients 4,292 against 4,305 decisions/s with
//! cuBLAS's defaults, the 28k read 268.0 against 268.3 ms), start-up took ~4 s longer, and
//! which pairs were replaced varied between starts. So it is opt-in (`--matmuls tuned`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use candle_core::cuda_backend::cudarc::cublaslt::sys::cublasLtMatmulAlgo_t;
use candle_core::cuda_backend::cudarc::driver::sys::CUevent_flags;
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Tensor};

use crate::error::{ModelError, Result};
use crate::lt_gemm::{LtGemm, Plan};

/// Row counts timed at load: every graph size (passes of up to 512 rows are padded to a
/// multiple of 32, `graphs.rs`), then the eager passes and prefill chunks.
const BUCKETS: &[usize] = &[
    32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480, 512, 768, 1024, 1536,
    2048, 2560, 3072, 3584, 4096, 6144, 8192,
];

/// cuBLASLt candidates timed per bucket, besides candle's call.
const CANDIDATES: usize = 8;

/// Timed rounds per candidate (the median is kept) and launches per round.
const ROUNDS: usize = 3;
const REPS: usize = 10;

/// A candidate must beat candle's call by this share to replace it: timing noise alone
/// should not switch a projection away from what ran before.
const MARGIN: f64 = 0.02;

/// Descriptor sets kept for exact row counts before the cache is cleared.
const MAX_PLANS: usize = 4096;

/// The four projections of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Projection {
    Qkv,
    Output,
    GateUp,
    Down,
}

impl Projection {
    /// Whether the layers hold this projection's weight `(n, k)` rather than `(k, n)`: the
    /// gate/up weight, whose rows the Hopper gate/up kernel reads in blocks
    /// (`gate_up_interleaved` in fused.rs); cuBLAS reads that layout at least as fast
    /// (layer_bench: 0.652 ms `(n, k)` against 0.686 `(k, n)` for 8,192 rows of q15).
    pub(super) fn weight_nk(self) -> bool {
        self == Projection::GateUp
    }
}

/// How one projection runs at one bucket.
#[derive(Clone, Copy)]
enum Way {
    Candle,
    Lt(cublasLtMatmulAlgo_t),
}

/// One projection's choices, per bucket, and what timing found.
struct Choices {
    /// `(k, n)` of the weight.
    shape: (usize, usize),
    ways: Vec<Way>,
}

/// Descriptors per (projection, exact rows); `None`: the choice does not apply there.
type PlanCache = HashMap<(Projection, usize), Option<Arc<Plan>>>;

/// The projections' choices and the cuBLASLt state that runs them.
pub(super) struct TunedMatmuls {
    gemm: LtGemm,
    choices: HashMap<Projection, Choices>,
    plans: Mutex<PlanCache>,
}

impl TunedMatmuls {
    /// Times candle's call and cuBLASLt's candidates for each projection and bucket on the
    /// given weights (bf16, as the fused layers hold them: [`Projection::weight_nk`]).
    pub(super) fn tune(dev: &CudaDevice, weights: &[(Projection, &Tensor)]) -> Result<Self> {
        let gemm = LtGemm::new(dev)?;
        let mut choices = HashMap::new();
        // For the log: pairs timed and replaced, and the timed ms before and after.
        let (mut pairs, mut replaced, mut candle_total, mut chosen_total) = (0, 0, 0.0, 0.0);
        let device = candle_core::Device::Cuda(dev.clone());
        // Work queued ahead of each timed round, so that the timed launches queue behind
        // it and the events measure the GPU's time, not the host's launches.
        let filler_w = weights
            .iter()
            .find(|(p, _)| *p == Projection::GateUp)
            .map(|(_, w)| (*w).clone())
            .ok_or_else(|| ModelError::Compute("tuning needs the gate/up weight".into()))?;
        let filler_x = Tensor::zeros((2048, filler_w.dim(1)?), DType::BF16, &device)?;
        let filler = || -> Result<()> {
            drop(candle_matmul(Projection::GateUp, &filler_x, &filler_w)?);
            Ok(())
        };
        for &(projection, w) in weights {
            let nk = projection.weight_nk();
            let (k, n) = if nk { w.t()?.dims2()? } else { w.dims2()? };
            let mut ways = Vec::with_capacity(BUCKETS.len());
            for &m in BUCKETS {
                let x =
                    (Tensor::randn(0f32, 1f32, (m, k), &device)? * 0.5)?.to_dtype(DType::BF16)?;
                let candle_ms = time(dev, &filler, || {
                    drop(candle_matmul(projection, &x, w)?);
                    Ok(())
                })?;
                let mut best = (Way::Candle, candle_ms * (1.0 - MARGIN));
                let plan = Plan::new(&gemm, (m, n, k), nk, CANDIDATES)?;
                for (i, &algo) in plan.algos.iter().enumerate() {
                    // A candidate may refuse at run time (a split-K needing more workspace).
                    if gemm.matmul(&plan, i, &x, w).is_err() {
                        continue;
                    }
                    let ms = time(dev, &filler, || {
                        drop(gemm.matmul(&plan, i, &x, w)?);
                        Ok(())
                    })?;
                    if ms < best.1 {
                        best = (Way::Lt(algo), ms);
                    }
                }
                let chosen_ms = match best.0 {
                    Way::Lt(_) => best.1,
                    Way::Candle => candle_ms,
                };
                tracing::debug!(
                    ?projection,
                    rows = m,
                    candle_ms,
                    chosen_ms,
                    "projection matmul choice"
                );
                pairs += 1;
                replaced += usize::from(matches!(best.0, Way::Lt(_)));
                candle_total += candle_ms;
                chosen_total += chosen_ms;
                ways.push(best.0);
            }
            choices.insert(
                projection,
                Choices {
                    shape: (k, n),
                    ways,
                },
            );
        }
        tracing::info!(
            replaced,
            of = pairs,
            candle_ms = candle_total,
            chosen_ms = chosen_total,
            "projection matmuls tuned: cuBLASLt replaced candle's call where it was faster"
        );
        Ok(Self {
            gemm,
            choices,
            plans: Mutex::new(HashMap::new()),
        })
    }

    /// `x @ w` for `projection`'s weight `w` (`(k, n)`, or `(n, k)` where
    /// [`Projection::weight_nk`]), the way chosen for `x`'s rows.
    pub(super) fn matmul(&self, projection: Projection, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        match self.plan(projection, x)? {
            Some(plan) => Ok(self.gemm.matmul(&plan, 0, x, w)?),
            None => candle_matmul(projection, x, w),
        }
    }

    /// The descriptors that run `projection` over `x`, or `None` for candle's call.
    fn plan(&self, projection: Projection, x: &Tensor) -> Result<Option<Arc<Plan>>> {
        let Some(choices) = self.choices.get(&projection) else {
            return Ok(None);
        };
        let (m, k) = x.dims2()?;
        if m == 0 || k != choices.shape.0 || !x.is_contiguous() || x.dtype() != DType::BF16 {
            return Ok(None);
        }
        let bucket = BUCKETS
            .iter()
            .position(|&b| b >= m)
            .unwrap_or(BUCKETS.len() - 1);
        let Way::Lt(algo) = choices.ways[bucket] else {
            return Ok(None);
        };
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(plan) = plans.get(&(projection, m)) {
            return Ok(plan.clone());
        }
        if plans.len() >= MAX_PLANS {
            plans.clear();
        }
        let (k, n) = choices.shape;
        let plan =
            Plan::with_algo(&self.gemm, (m, n, k), projection.weight_nk(), algo)?.map(Arc::new);
        plans.insert((projection, m), plan.clone());
        Ok(plan)
    }
}

/// candle's matmul of `x` by `projection`'s weight as the layers hold it.
fn candle_matmul(projection: Projection, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(if projection.weight_nk() {
        x.matmul(&w.t()?)?
    } else {
        x.matmul(w)?
    })
}

/// The GPU's milliseconds per `run()`: the median of [`ROUNDS`] rounds of [`REPS`]
/// launches, each round queued behind `filler`.
fn time(
    dev: &CudaDevice,
    filler: &dyn Fn() -> Result<()>,
    mut run: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let stream = dev.cuda_stream();
    let event = || {
        stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| ModelError::Compute(format!("CUDA event: {e}")))
    };
    run()?;
    let mut rounds = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        filler()?;
        filler()?;
        let start = event()?;
        for _ in 0..REPS {
            run()?;
        }
        let end = event()?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| ModelError::Compute(format!("CUDA event: {e}")))?;
        rounds.push(f64::from(ms) / REPS as f64);
    }
    rounds.sort_by(f64::total_cmp);
    Ok(rounds[ROUNDS / 2])
}
