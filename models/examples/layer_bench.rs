//! Times each launch of one fused decoder layer on random weights at q15's shapes (hidden
//! 1536, 12 query and 2 KV heads of 128, FFN 8960), to say where a pass's time goes:
//! a prefill chunk (8192 rows after 16384 cached keys, as in the 28k read), the short
//! passes of a saturated server (3768 and 2624 rows) and a lone short read's (96 rows, its 71
//! padded to the CUDA graphs' multiple of 32, after a 16-token header). For each projection it times candle's
//! matmul (what the model runs) against cuBLASLt's heuristic candidates ([`lt_gemm`]), with
//! the weight stored `(k, n)` as now and `(n, k)`. Needs a GPU and a `cuda` build; no model.
//!
//!     layer_bench [--json FILE] [--candidates N]
//!
//! Prints one line per launch (ms, TFLOP/s or GB/s) and, per row count, the layer's total
//! with candle's matmuls and with the fastest cuBLASLt candidates.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use decide_models::attention_plan::SHAPE_RULE_MAX_ROWS;
use decide_models::kernels::{
    self, AttentionBlock, AttentionPlan, Heads, KeySources, PrefixAddresses,
};
use decide_models::lt_gemm::{LtGemm, Plan};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const HIDDEN: usize = 1536;
const FFN: usize = 8960;
const HEADS: Heads = Heads {
    q: 12,
    kv: 2,
    dim: 128,
};

/// Median milliseconds of one `f()` over 7 rounds of `reps`, after 200 ms of warm-up (the
/// clocks drop while the GPU idles).
fn time(dev: &Device, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < 0.2 {
        f()?;
        dev.synchronize()?;
    }
    let reps = 10;
    let mut rounds = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..reps {
            f()?;
        }
        dev.synchronize()?;
        rounds.push(t.elapsed().as_secs_f64() * 1e3 / reps as f64);
    }
    rounds.sort_by(f64::total_cmp);
    Ok(rounds[3])
}

fn rand(dev: &Device, shape: &[usize], scale: f64) -> Res<Tensor> {
    Ok((Tensor::randn(0f32, 1f32, shape, dev)? * scale)?.to_dtype(DType::BF16)?)
}

fn max_diff(a: &Tensor, b: &Tensor) -> Res<f32> {
    let d = (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?;
    Ok(d.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

/// One projection's timings: candle's matmul and cuBLASLt's candidates in both layouts.
struct Projection {
    candle_ms: f64,
    /// candle's matmul over the transposed view of `w` stored `(n, k)`.
    candle_nk_ms: f64,
    /// Per layout (`(k, n)`, `(n, k)`): the fastest cuBLASLt candidate's ms.
    best_per_layout: [f64; 2],
    /// (layout `(n, k)`, candidate index, ms) of the fastest cuBLASLt run.
    best: (bool, usize, f64),
    heuristic_first_ms: [f64; 2],
    candidates: [usize; 2],
    best_max_diff: f32,
}

fn projection(
    dev: &Device,
    gemm: &LtGemm,
    x: &Tensor,
    (k, n): (usize, usize),
    count: usize,
) -> Res<Projection> {
    let m = x.dim(0)?;
    let w = rand(dev, &[k, n], 1.0 / (k as f64).sqrt())?;
    let w_nk = w.t()?.contiguous()?;
    let want = x.matmul(&w)?;
    let candle_ms = time(dev, || {
        drop(x.matmul(&w)?);
        Ok(())
    })?;
    let w_nk_view = w_nk.t()?;
    let candle_nk_ms = time(dev, || {
        drop(x.matmul(&w_nk_view)?);
        Ok(())
    })?;
    let mut best_per_layout = [f64::INFINITY; 2];
    let mut best = (false, 0, f64::INFINITY);
    let mut first = [0.0; 2];
    let mut candidates = [0; 2];
    let mut best_max_diff = 0.0;
    for (li, nk) in [false, true].into_iter().enumerate() {
        let plan = Plan::new(gemm, (m, n, k), nk, count)?;
        let weight = if nk { &w_nk } else { &w };
        candidates[li] = plan.algos.len();
        for a in 0..plan.algos.len() {
            // A candidate may refuse at run time (a split-K needing more workspace).
            let Ok(got) = gemm.matmul(&plan, a, x, weight) else {
                continue;
            };
            let ms = time(dev, || {
                drop(gemm.matmul(&plan, a, x, weight)?);
                Ok(())
            })?;
            if a == 0 {
                first[li] = ms;
            }
            best_per_layout[li] = best_per_layout[li].min(ms);
            if ms < best.2 {
                best = (nk, a, ms);
                best_max_diff = max_diff(&got, &want)?;
            }
        }
    }
    Ok(Projection {
        candle_ms,
        candle_nk_ms,
        best_per_layout,
        best,
        heuristic_first_ms: first,
        candidates,
        best_max_diff,
    })
}

/// Causal attention of `m` rows after `prefix` cached keys.
fn attention_ms(dev: &Device, m: usize, prefix: usize) -> Res<(f64, AttentionBlock)> {
    let Heads { q: h, kv, dim: d } = HEADS;
    let q = rand(dev, &[m, h, d], 1.0)?;
    let k = rand(dev, &[1, kv, m, d], 1.0)?;
    let v = rand(dev, &[1, kv, m, d], 1.0)?;
    let pk = vec![(
        rand(dev, &[1, kv, prefix, d], 1.0)?,
        rand(dev, &[1, kv, prefix, d], 1.0)?,
    )];
    let addresses = PrefixAddresses::of(&pk)?;
    let sources = KeySources::new(dev, &[&addresses], &[(0, prefix)], prefix, 1, true)?;
    let bounds: Vec<u32> = (0..m)
        .flat_map(|j| [0, prefix, prefix, prefix + j + 1].map(|x| x as u32))
        .collect();
    // The block shape the server runs for such a pass.
    let block = AttentionBlock::served(dev, d, m, prefix + m);
    // As the server plans a pass of `m` rows (from its bounds when long).
    let by_bounds = m > SHAPE_RULE_MAX_ROWS;
    let plan = AttentionPlan::new(
        block.plan_shape(),
        h,
        d,
        m,
        (prefix, m),
        by_bounds.then_some(bounds.as_slice()),
    );
    let bounds = Tensor::new(bounds.as_slice(), dev)?;
    let ms = time(dev, || {
        drop(kernels::attention(
            &q,
            (&k, &v),
            &sources,
            0,
            &bounds,
            HEADS,
            block,
            plan,
        )?);
        Ok(())
    })?;
    Ok((ms, block))
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().skip_while(|a| *a != name).nth(1).cloned();
    let json_path = flag("--json");
    let count: usize = flag("--candidates").map_or(Ok(16), |c| c.parse())?;
    let dev = Device::new_cuda(0)?;
    let Device::Cuda(cuda) = &dev else {
        unreachable!()
    };
    let gemm = LtGemm::new(cuda)?;
    let Heads { q: h, kv, dim: d } = HEADS;
    let qkv_width = (h + 2 * kv) * d;
    let mut report = Vec::new();
    for (m, prefix) in [
        (8192usize, 16384usize),
        (3683, 24576),
        (3768, 0),
        (2624, 0),
        (512, 0),
        (96, 16),
    ] {
        println!("rows {m}:");
        let x = Tensor::randn(0f32, 1f32, &[m, HIDDEN], &dev)?;
        let norm_w = Tensor::ones(HIDDEN, DType::F32, &dev)?;
        let delta = rand(&dev, &[m, HIDDEN], 1.0)?;
        let norm_ms = time(&dev, || {
            drop(kernels::add_rms_norm(
                &x,
                Some(&delta),
                Some(&norm_w),
                1e-6,
            )?);
            Ok(())
        })?;
        // f32 x read and written, bf16 delta read and h written.
        let norm_gbs = (m * HIDDEN * 12) as f64 / (norm_ms / 1e3) / 1e9;
        println!("  add_rms_norm: {norm_ms:.3} ms ({norm_gbs:.0} GB/s), twice a layer");
        let hb = rand(&dev, &[m, HIDDEN], 1.0)?;
        let qkv = rand(&dev, &[m, qkv_width], 1.0)?;
        let cos = Tensor::ones((32768, d / 2), DType::F32, &dev)?;
        let sin = Tensor::zeros((32768, d / 2), DType::F32, &dev)?;
        let pos: Vec<u32> = (0..m as u32).collect();
        let pos = Tensor::new(pos.as_slice(), &dev)?;
        let rope_ms = time(&dev, || {
            drop(kernels::qkv_rope(
                &qkv,
                None,
                (&cos, &sin),
                &pos,
                HEADS,
                false,
            )?);
            Ok(())
        })?;
        println!("  qkv_rope: {rope_ms:.3} ms");
        let gu = rand(&dev, &[m, 2 * FFN], 1.0)?;
        let silu_ms = time(&dev, || {
            drop(kernels::silu_mul(&gu, FFN)?);
            Ok(())
        })?;
        let silu_gbs = (m * FFN * 6) as f64 / (silu_ms / 1e3) / 1e9;
        println!("  silu_mul: {silu_ms:.3} ms ({silu_gbs:.0} GB/s)");
        // The gate/up matmul and silu_mul as one kernel (Hopper), on a weight `(2 FFN, HIDDEN)`.
        let gate_up_silu_ms = if kernels::gate_up_silu_runs_on(&dev, HIDDEN, FFN) {
            let h = rand(&dev, &[m, HIDDEN], 1.0)?;
            let w = rand(&dev, &[2 * FFN, HIDDEN], 0.02)?;
            let ms = time(&dev, || {
                drop(kernels::gate_up_silu(&h, &w)?);
                Ok(())
            })?;
            let tflops = (2 * m * 2 * FFN * HIDDEN) as f64 / (ms / 1e3) / 1e12;
            println!("  gate_up_silu: {ms:.3} ms ({tflops:.0} TFLOP/s)");
            ms
        } else {
            0.0
        };
        let att_ms = if prefix > 0 {
            let (ms, block) = attention_ms(&dev, m, prefix)?;
            println!("  attention after {prefix} ({block:?}): {ms:.3} ms");
            ms
        } else {
            0.0
        };
        let a_in = rand(&dev, &[m, FFN], 1.0)?;
        let mut candle_sum = 2.0 * norm_ms + rope_ms + silu_ms + att_ms;
        let mut best_sum = candle_sum;
        let mut projections = Vec::new();
        for (name, input, k, n) in [
            ("qkv", &hb, HIDDEN, qkv_width),
            ("wo", &hb, HIDDEN, HIDDEN),
            ("gate_up", &hb, HIDDEN, 2 * FFN),
            ("down", &a_in, FFN, HIDDEN),
        ] {
            let p = projection(&dev, &gemm, input, (k, n), count)?;
            let flops = 2.0 * (m * k * n) as f64;
            let tf = |ms: f64| flops / (ms / 1e3) / 1e12;
            let (nk, idx, ms) = p.best;
            println!(
                "  {name} ({k} -> {n}): candle (k,n) {:.3} ms ({:.0} TFLOP/s) / (n,k) {:.3}; cuBLASLt first (k,n) {:.3} / (n,k) {:.3} ms, fastest (k,n) {:.3} / (n,k) {:.3}; best {:.3} ms ({:.0} TFLOP/s, {}, candidate {idx} of {:?}, max diff {:.2e})",
                p.candle_ms,
                tf(p.candle_ms),
                p.candle_nk_ms,
                p.heuristic_first_ms[0],
                p.heuristic_first_ms[1],
                p.best_per_layout[0],
                p.best_per_layout[1],
                ms,
                tf(ms),
                if nk { "(n,k)" } else { "(k,n)" },
                p.candidates,
                p.best_max_diff,
            );
            candle_sum += p.candle_ms;
            best_sum += ms.min(p.candle_ms);
            projections.push(serde_json::json!({
                "name": name, "k": k, "n": n,
                "candle_ms": p.candle_ms, "candle_tflops": tf(p.candle_ms), "candle_nk_ms": p.candle_nk_ms,
                "lt_fastest_kn_ms": p.best_per_layout[0], "lt_fastest_nk_ms": p.best_per_layout[1],
                "lt_first_kn_ms": p.heuristic_first_ms[0], "lt_first_nk_ms": p.heuristic_first_ms[1],
                "lt_best_ms": ms, "lt_best_tflops": tf(ms), "lt_best_nk": nk, "lt_best_index": idx,
                "lt_best_max_diff": p.best_max_diff,
            }));
        }
        println!(
            "  layer: {candle_sum:.3} ms with candle's matmuls, {best_sum:.3} ms with the fastest"
        );
        report.push(serde_json::json!({
            "rows": m, "prefix": prefix,
            "add_rms_norm_ms": norm_ms, "qkv_rope_ms": rope_ms, "silu_mul_ms": silu_ms,
            "gate_up_silu_ms": gate_up_silu_ms,
            "attention_ms": att_ms, "projections": projections,
            "layer_candle_ms": candle_sum, "layer_best_ms": best_sum,
        }));
    }
    if let Some(p) = json_path {
        std::fs::write(p, serde_json::to_string_pretty(&report)? + "\n")?;
    }
    Ok(())
}
