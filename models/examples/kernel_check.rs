//! Checks decide's fused CUDA kernels against the same math in candle's ops (f32), on
//! random inputs, and times the attention kernel. Needs a GPU and a `cuda` build; no model.
//!
//!     kernel_check [--json FILE] [--checks-only]
//!
//! `--checks-only`: the correctness checks alone, no timings (seconds instead of minutes of a
//! lease).
//! Prints, per case, the largest absolute difference from the reference and the reference's
//! largest magnitude; exits 1 when a difference exceeds bf16 tolerance.

use candle_core::{DType, Device, IndexOp, Tensor};
use decide_models::attention_plan::SHAPE_RULE_MAX_ROWS;
use decide_models::kernels::{
    self, AttentionBlock, AttentionPlan, Heads, KeySources, PrefixAddresses,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Largest |a - b| and largest |b|.
fn diff(a: &Tensor, b: &Tensor) -> Res<(f32, f32)> {
    let a = a.to_dtype(DType::F32)?.flatten_all()?;
    let b = b.to_dtype(DType::F32)?.flatten_all()?;
    let d = (a - &b)?.abs()?.max(0)?.to_scalar::<f32>()?;
    let m = b.abs()?.max(0)?.to_scalar::<f32>()?;
    Ok((d, m))
}

/// One attention case: prefixes of the given lengths, then segments of own rows, each
/// `(prefix index or None, rows)` ([`ALL_PREFIXES`]: every prefix, as the pieces of one cache
/// are read); with `picks`, the queries of those rows alone over every own row's keys (a
/// pass's last layer), else every row's.
struct Case {
    name: &'static str,
    heads: Heads,
    prefixes: Vec<usize>,
    segments: Vec<(Option<usize>, usize)>,
    picks: Vec<u32>,
    /// Whether each prefix is a view of positions cut from a longer cache (its kv heads
    /// further apart than its length), as a kept prompt's rows and the prefix cache's runs
    /// are on CUDA.
    views: bool,
}

/// A segment's prefix index meaning every prefix: a cache held in pieces, each a prefix of
/// the pass (`KvCache` in models/src/forward.rs), as a long prefill's later chunks read it.
const ALL_PREFIXES: usize = usize::MAX;

/// The ways a block shape runs: `(label, tma, longest_first)`. The warp-specialized kernel
/// with and without TMA staging, then with TMA and the longest-first block order; the others
/// in both block orders.
fn variants(block: AttentionBlock) -> Vec<(String, bool, bool)> {
    if block == AttentionBlock::WgmmaSpecialized {
        vec![
            (format!("{block:?}"), false, false),
            (format!("{block:?}+tma"), true, false),
            (format!("{block:?}+tma+longest-first"), true, true),
        ]
    } else {
        vec![
            (format!("{block:?}"), true, false),
            (format!("{block:?}+longest-first"), true, true),
        ]
    }
}

/// How a case's launch is laid out ([`AttentionPlan`]): as the server plans it (from the
/// bounds for passes of more than `SHAPE_RULE_MAX_ROWS` rows, else from the shape), the same
/// with the block order forced, by the rule through run 13 (`DECIDE_ATTENTION_PLAN=0`), or as
/// planned with the split forced.
#[derive(Clone, Copy, Debug)]
enum Layout {
    Planned,
    Order(bool),
    Legacy,
    Splits(usize),
}

/// What one attention case measured: the largest difference from the reference and the
/// reference's largest magnitude; without timing, the largest difference between the two
/// block orders (which must be 0: they compute the same blocks); with it, seconds per launch.
struct CaseResult {
    diff: (f32, f32),
    order_diff: Option<(f32, f32)>,
    secs: Option<f64>,
    /// The layout it ran with.
    plan: AttentionPlan,
}

/// Runs a case on the kernel with blocks of shape `block`, laid out as `layout` says.
fn attention_case(
    dev: &Device,
    c: &Case,
    block: AttentionBlock,
    layout: Layout,
    timing: bool,
) -> Res<CaseResult> {
    let Heads { q: h, kv, dim: d } = c.heads;
    let m: usize = c.segments.iter().map(|s| s.1).sum();
    let rand = |shape: &[usize], scale: f64| -> Res<Tensor> {
        Ok((Tensor::randn(0f32, 1f32, shape, dev)? * scale)?.to_dtype(DType::BF16)?)
    };
    let q = rand(&[m, h, d], 2.0)?;
    let k = rand(&[1, kv, m, d], 1.0)?;
    let v = rand(&[1, kv, m, d], 1.0)?;
    let mut prefix_kv = Vec::new();
    let mut cols = Vec::new();
    let mut col = 0;
    for &len in &c.prefixes {
        // A view: positions 11.. of a cache 37 positions longer.
        let cut =
            |t: Tensor| -> Res<Tensor> { Ok(if c.views { t.narrow(2, 11, len)? } else { t }) };
        let held = if c.views { len + 37 } else { len };
        prefix_kv.push(vec![(
            cut(rand(&[1, kv, held, d], 1.0)?)?,
            cut(rand(&[1, kv, held, d], 1.0)?)?,
        )]);
        cols.push((col, len));
        col += len;
    }
    let own_start = col;
    let total = own_start + m;
    let mut bounds = Vec::with_capacity(4 * m);
    let mut row = 0;
    for &(p, rows) in &c.segments {
        let (pc, pl) = match p {
            None => (0, 0),
            Some(ALL_PREFIXES) => (0, own_start),
            Some(i) => cols[i],
        };
        for j in 0..rows {
            bounds
                .extend([pc, pc + pl, own_start + row, own_start + row + j + 1].map(|x| x as u32));
        }
        row += rows;
    }
    let addresses: Vec<PrefixAddresses> = prefix_kv
        .iter()
        .map(|p| PrefixAddresses::of(p))
        .collect::<candle_core::Result<_>>()?;
    let prefixes: Vec<&PrefixAddresses> = addresses.iter().collect();
    let sources = KeySources::new(dev, &prefixes, &cols, own_start, 1, true)?;
    let (q_run, bounds_run) = if c.picks.is_empty() {
        (q.clone(), bounds.clone())
    } else {
        let rows = Tensor::new(c.picks.as_slice(), dev)?;
        let b: Vec<u32> = c
            .picks
            .iter()
            .flat_map(|&r| bounds[4 * r as usize..4 * r as usize + 4].to_vec())
            .collect();
        (q.index_select(&rows, 0)?, b)
    };
    let bounds_t = Tensor::new(bounds_run.as_slice(), dev)?;
    let m_run = bounds_run.len() / 4;
    kernels::force_longest_first(match layout {
        Layout::Order(first) => Some(first),
        Layout::Planned | Layout::Legacy | Layout::Splits(_) => None,
    });
    kernels::use_legacy_plan(matches!(layout, Layout::Legacy));
    let by_bounds = m > SHAPE_RULE_MAX_ROWS;
    let mut plan = AttentionPlan::new(
        block.plan_shape(),
        h,
        d,
        m_run,
        (own_start, m),
        by_bounds.then_some(bounds_run.as_slice()),
    );
    kernels::force_longest_first(None);
    kernels::use_legacy_plan(false);
    if let Layout::Splits(s) = layout {
        plan.splits = s;
    }
    let run = |plan| {
        kernels::attention(
            &q_run,
            (&k, &v),
            &sources,
            0,
            &bounds_t,
            c.heads,
            block,
            plan,
        )
    };
    let other_order = if timing {
        None
    } else {
        let flipped = AttentionPlan {
            longest_first: !plan.longest_first,
            ..plan
        };
        Some(run(flipped)?)
    };
    let got = run(plan)?;
    let order_diff = match other_order {
        Some(o) => Some(diff(&got, &o)?),
        None => None,
    };

    // Reference: every key column side by side, a dense mask, f32 softmax.
    let mut ks: Vec<Tensor> = prefix_kv.iter().map(|p| p[0].0.clone()).collect();
    let mut vs: Vec<Tensor> = prefix_kv.iter().map(|p| p[0].1.clone()).collect();
    ks.push(k.clone());
    vs.push(v.clone());
    let kall = Tensor::cat(&ks, 2)?.to_dtype(DType::F32)?.squeeze(0)?; // (kv, T, d)
    let vall = Tensor::cat(&vs, 2)?.to_dtype(DType::F32)?.squeeze(0)?;
    let rep = h / kv;
    let kall = kall
        .unsqueeze(1)?
        .repeat((1, rep, 1, 1))?
        .reshape((h, total, d))?;
    let vall = vall
        .unsqueeze(1)?
        .repeat((1, rep, 1, 1))?
        .reshape((h, total, d))?;
    let qf = q.to_dtype(DType::F32)?.transpose(0, 1)?.contiguous()?; // (h, m, d)
    let mut mask = vec![f32::NEG_INFINITY; m * total];
    for r in 0..m {
        let b = &bounds[4 * r..4 * r + 4];
        for col in 0..total as u32 {
            if (col >= b[0] && col < b[1]) || (col >= b[2] && col < b[3]) {
                mask[r * total + col as usize] = 0.0;
            }
        }
    }
    let mask = Tensor::from_vec(mask, (1, m, total), dev)?;
    // In row chunks whose scores hold at most 2^30 values: candle's CUDA kernels index with
    // 32 bits, and 8192 rows over 24,576 keys x 12 heads would pass 2^31.
    let chunk = ((1usize << 30) / (h * total)).max(1);
    let mut parts = Vec::new();
    for r0 in (0..m).step_by(chunk) {
        let rows = chunk.min(m - r0);
        let scores = (qf.narrow(1, r0, rows)?.matmul(&kall.t()?)? / (d as f64).sqrt())?
            .broadcast_add(&mask.narrow(1, r0, rows)?)?;
        let p = candle_nn::ops::softmax_last_dim(&scores)?;
        parts.push(p.matmul(&vall)?.transpose(0, 1)?.reshape((rows, h * d))?);
    }
    let mut want = Tensor::cat(&parts, 0)?;
    if !c.picks.is_empty() {
        want = want.index_select(&Tensor::new(c.picks.as_slice(), dev)?, 0)?;
    }
    let (dmax, mmax) = diff(&got, &want)?;

    let secs = if timing {
        let runs = 20;
        got.to_device(&Device::Cpu)?;
        // Warm up for 200 ms first: the reference above keeps the GPU idle long enough (a
        // dense mask built on the CPU) for its clocks to drop, and 20 runs are too few to
        // ramp them back up.
        let warm = std::time::Instant::now();
        while warm.elapsed().as_secs_f64() < 0.2 {
            drop(run(plan)?);
            dev.synchronize()?;
        }
        let t0 = std::time::Instant::now();
        for _ in 0..runs {
            drop(run(plan)?);
        }
        dev.synchronize()?;
        Some(t0.elapsed().as_secs_f64() / runs as f64)
    } else {
        None
    };
    Ok(CaseResult {
        diff: (dmax, mmax),
        order_diff,
        secs,
        plan,
    })
}

/// One timing of the JSON report.
fn timing_json(case: &str, block: &str, ms: f64, tflops: f64, plan: AttentionPlan) -> String {
    format!(
        r#"{{"case":"{case}","block":"{block}","ms":{ms},"tflops":{tflops},"splits":{},"longest_first":{}}}"#,
        plan.splits, plan.longest_first
    )
}

/// Median milliseconds of one `f()` over 7 rounds of 20, after 200 ms of warm-up (the
/// clocks drop while the GPU idles).
fn gpu_ms(dev: &Device, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
    let warm = std::time::Instant::now();
    while warm.elapsed().as_secs_f64() < 0.2 {
        f()?;
        dev.synchronize()?;
    }
    let mut rounds = Vec::new();
    for _ in 0..7 {
        let t = std::time::Instant::now();
        for _ in 0..20 {
            f()?;
        }
        dev.synchronize()?;
        rounds.push(t.elapsed().as_secs_f64() * 1e3 / 20.0);
    }
    rounds.sort_by(f64::total_cmp);
    Ok(rounds[3])
}

/// Segments over three prefixes of odd lengths, and one without a prefix.
fn packed(name: &'static str, heads: Heads, picks: Vec<u32>) -> Case {
    Case {
        name,
        heads,
        prefixes: vec![70, 129, 5],
        segments: vec![
            (Some(0), 9),
            (Some(1), 40),
            (Some(1), 3),
            (None, 66),
            (Some(2), 1),
            (Some(0), 20),
        ],
        picks,
        views: false,
    }
}

/// 300 rows after a cache held in three pieces (1500 + 1300 + 1100); with `views`, each
/// piece a view of a longer cache.
fn three_pieces(name: &'static str, views: bool) -> Case {
    Case {
        name,
        heads: Heads {
            q: 12,
            kv: 2,
            dim: 128,
        },
        prefixes: vec![1500, 1300, 1100],
        segments: vec![(Some(ALL_PREFIXES), 300)],
        picks: vec![],
        views,
    }
}

fn main() -> Res<()> {
    let json_path = std::env::args().skip_while(|a| a != "--json").nth(1);
    let checks_only = std::env::args().any(|a| a == "--checks-only");
    let dev = Device::new_cuda(0)?;
    let mut failed = false;
    let mut report = Vec::new();
    let mut timings = Vec::new();
    let mut check = |name: String, (d, m): (f32, f32), tol: f32| {
        let ok = d <= tol * m.max(1.0);
        println!(
            "{name:<48} max |diff| {d:.5} (max |ref| {m:.3}) {}",
            if ok { "ok" } else { "FAILED" }
        );
        failed |= !ok;
        report.push(format!(
            r#"{{"case":"{name}","max_diff":{d},"max_ref":{m},"ok":{ok}}}"#
        ));
    };

    // qkv_rope against split + bias + candle's rope, and with q/k norm (Qwen3) against
    // candle's rms_norm before it. d = 6 and partial rotary (r < d, Phi-4-mini's 0.75) run
    // the one-pair-per-thread kernel (the others two pairs per thread).
    for (interleaved, hq, hkv, d, r, qk_norm) in [
        (false, 12, 2, 128, 128, false),
        (true, 9, 3, 64, 64, false),
        (false, 3, 1, 6, 6, false),
        (true, 3, 1, 6, 6, false),
        (false, 24, 8, 128, 96, false),
        (true, 4, 2, 64, 48, false),
        (false, 16, 8, 128, 128, true),
        (false, 4, 2, 64, 64, true),
    ] {
        let m = 37;
        let width = (hq + 2 * hkv) * d;
        let qkv = Tensor::randn(0f32, 1f32, (m, width), &dev)?.to_dtype(DType::BF16)?;
        let bias = Tensor::randn(0f32, 0.5f32, width, &dev)?;
        let ctx = 4096;
        let theta = Tensor::arange(0u32, (r / 2) as u32, &dev)?.to_dtype(DType::F32)?;
        let theta = (theta * (-2.0 * (10_000f64).ln() / r as f64))?.exp()?;
        let angles = Tensor::arange(0u32, ctx as u32, &dev)?
            .to_dtype(DType::F32)?
            .reshape((ctx, 1))?
            .broadcast_mul(&theta.reshape((1, r / 2))?)?;
        let (cos, sin) = (angles.cos()?, angles.sin()?);
        let pos: Vec<u32> = (0..m as u32).map(|i| (i * 97 + 5) % ctx as u32).collect();
        let pos_t = Tensor::new(pos.as_slice(), &dev)?;
        let heads = Heads {
            q: hq,
            kv: hkv,
            dim: d,
        };
        let norms = (
            Tensor::randn(1f32, 0.3f32, d, &dev)?,
            Tensor::randn(1f32, 0.3f32, d, &dev)?,
        );
        let eps = 1e-6;
        let (q, k, v) = if qk_norm {
            // The bias before the norm; qkv_rope then adds the values' alone.
            let normed = qkv.copy()?;
            kernels::qk_norm(&normed, Some(&bias), (&norms.0, &norms.1), heads, eps)?;
            let qk = (hq + hkv) * d;
            let v_bias = Tensor::cat(
                &[
                    Tensor::zeros(qk, DType::F32, &dev)?,
                    bias.narrow(0, qk, hkv * d)?,
                ],
                0,
            )?;
            kernels::qkv_rope(
                &normed,
                Some(&v_bias),
                (&cos, &sin),
                &pos_t,
                heads,
                interleaved,
            )?
        } else {
            kernels::qkv_rope(&qkv, Some(&bias), (&cos, &sin), &pos_t, heads, interleaved)?
        };
        let x = qkv.to_dtype(DType::F32)?.broadcast_add(&bias)?;
        let (c, s) = (cos.index_select(&pos_t, 0)?, sin.index_select(&pos_t, 0)?);
        let part = |from: usize, n: usize, rotate: bool| -> Res<Tensor> {
            let mut t = x
                .narrow(1, from * d, n * d)?
                .reshape((1, m, n, d))?
                .transpose(1, 2)?
                .contiguous()?;
            if qk_norm && rotate {
                let w = if from == 0 { &norms.0 } else { &norms.1 };
                t = candle_nn::ops::rms_norm(&t, w, eps)?;
            }
            if !rotate {
                return Ok(t);
            }
            let lead = t.narrow(3, 0, r)?.contiguous()?;
            let rotated = if interleaved {
                candle_nn::rotary_emb::rope_i(&lead, &c, &s)?
            } else {
                candle_nn::rotary_emb::rope(&lead, &c, &s)?
            };
            Ok(Tensor::cat(&[&rotated, &t.narrow(3, r, d - r)?], 3)?.contiguous()?)
        };
        let style = if interleaved { "interleaved" } else { "half" };
        let tag = match (r < d, qk_norm) {
            (true, _) => format!("{style}, rotary {r}"),
            (_, true) => format!("{style}, q/k norm"),
            _ => style.to_string(),
        };
        let want_q = part(0, hq, true)?.squeeze(0)?.transpose(0, 1)?; // (m, hq, d)
        check(
            format!("qkv_rope q ({tag}, d={d})"),
            diff(&q, &want_q)?,
            0.01,
        );
        check(
            format!("qkv_rope k ({tag}, d={d})"),
            diff(&k, &part(hq, hkv, true)?)?,
            0.01,
        );
        check(
            format!("qkv_rope v ({tag}, d={d})"),
            diff(&v, &part(hq + hkv, hkv, false)?)?,
            0.01,
        );
    }

    // add_rms_norm against an add and candle's rms_norm (f32). 1536 and 4100 run the
    // vectorized kernel; 1538 (not a multiple of 4) and 16400 (too wide for its block) the
    // scalar one.
    for hidden in [1536, 4100, 1538, 16400] {
        let x = Tensor::randn(0f32, 3f32, (23, hidden), &dev)?;
        let delta = Tensor::randn(0f32, 1f32, (23, hidden), &dev)?.to_dtype(DType::BF16)?;
        let w = Tensor::randn(1f32, 0.2f32, hidden, &dev)?;
        let (sum, h) = kernels::add_rms_norm(&x, Some(&delta), Some(&w), 1e-6)?;
        let want_sum = (&x + delta.to_dtype(DType::F32)?)?;
        let want_h = candle_nn::ops::rms_norm(&want_sum, &w, 1e-6)?;
        check(
            format!("add_rms_norm sum ({hidden})"),
            diff(&sum, &want_sum)?,
            1e-6,
        );
        check(
            format!("add_rms_norm norm ({hidden})"),
            diff(&h.expect("norm"), &want_h)?,
            0.01,
        );
        let (plain, none) = kernels::add_rms_norm(&x, None, None, 1e-6)?;
        check(
            format!("add_rms_norm without delta or weight ({hidden})"),
            diff(&plain, &x)?,
            0.0,
        );
        if none.is_some() {
            return Err("add_rms_norm without a weight returned a norm".into());
        }
        // The norm alone (a stream the GEMM already added to): the same bits as with a sum.
        let h_only = kernels::rms_norm(&want_sum, &w, 1e-6)?;
        let (_, h_sum) = kernels::add_rms_norm(&want_sum, None, Some(&w), 1e-6)?;
        check(
            format!("rms_norm against add_rms_norm's norm ({hidden})"),
            diff(&h_only, &h_sum.expect("norm"))?,
            0.0,
        );
    }

    // silu_mul against candle's silu times up (f32): 8960 runs the eight-per-thread
    // kernel, 18 the pair kernel.
    for i in [8960, 18] {
        let gu = Tensor::randn(0f32, 2f32, (29, 2 * i), &dev)?.to_dtype(DType::BF16)?;
        let got = kernels::silu_mul(&gu, i)?;
        let g = gu.narrow(1, 0, i)?.to_dtype(DType::F32)?;
        let u = gu.narrow(1, i, i)?.to_dtype(DType::F32)?;
        let want = (candle_nn::ops::silu(&g)? * u)?;
        check(format!("silu_mul ({i})"), diff(&got, &want)?, 0.01);
    }

    // gather_rows against candle's index_select: a pass's queries (bf16, 3-D) and residual
    // stream (f32) at the rows its last layer reads out, repeats included.
    {
        let rows = Tensor::new(&[40u32, 0, 7, 40, 99], &dev)?;
        let q = Tensor::randn(0f32, 1f32, (100, 12, 128), &dev)?.to_dtype(DType::BF16)?;
        let x = Tensor::randn(0f32, 1f32, (100, 1536), &dev)?;
        for (what, t) in [("bf16 queries", q), ("f32 stream", x)] {
            let got = kernels::gather_rows(&t, &rows)?;
            check(
                format!("gather_rows ({what})"),
                diff(&got, &t.index_select(&rows, 0)?)?,
                0.0,
            );
        }
    }

    // matmul_f32_out against the f32 matmul of the same bf16 values.
    {
        let x = Tensor::randn(0f32, 1f32, (5, 1536), &dev)?.to_dtype(DType::BF16)?;
        let w = Tensor::randn(0f32, 0.5f32, (1536, 4099), &dev)?.to_dtype(DType::BF16)?;
        let got = kernels::matmul_f32_out(&x, &w)?;
        let want = x.to_dtype(DType::F32)?.matmul(&w.to_dtype(DType::F32)?)?;
        check("matmul_f32_out".into(), diff(&got, &want)?, 1e-4);
        // The same product added in place to a residual stream (the output and down
        // projections' epilogue), against the sum of the two.
        let stream = Tensor::randn(0f32, 3f32, (5, 4099), &dev)?;
        let acc = stream.copy()?;
        kernels::matmul_accumulate(&acc, &x, &w)?;
        check(
            "matmul_accumulate".into(),
            diff(&acc, &(&stream + &want)?)?,
            1e-4,
        );
    }

    // silu_mul over gate and up columns interleaved in blocks of 128 (the layout of the
    // gate/up weight where the Hopper kernel runs), against the same columns regrouped.
    {
        let (i, block) = (8960, kernels::GATE_UP_BLOCK);
        let gu = Tensor::randn(0f32, 2f32, (29, 2 * i), &dev)?.to_dtype(DType::BF16)?;
        let got = kernels::silu_mul(&gu, block)?;
        let blocks = gu.reshape((29, i / block, 2, block))?;
        let part = |j: usize| -> Res<Tensor> {
            Ok(blocks
                .i((.., .., j, ..))?
                .reshape((29, i))?
                .to_dtype(DType::F32)?)
        };
        let want = (candle_nn::ops::silu(&part(0)?)? * part(1)?)?;
        check("silu_mul (blocks of 128)".into(), diff(&got, &want)?, 0.01);
    }

    // gate_up_silu (one Hopper kernel) against candle's matmul and silu_mul over the same
    // interleaved weight, at q15's widths: row counts that fill its 128-row tiles and ones
    // that do not; then timed against the two launches it replaces.
    if kernels::gate_up_silu_runs_on(&dev, 1536, 8960) {
        let (k, i) = (1536, 8960);
        let w = (Tensor::randn(0f32, 1f32, (2 * i, k), &dev)? * 0.03)?.to_dtype(DType::BF16)?;
        let unfused = |h: &Tensor| -> Res<Tensor> {
            Ok(kernels::silu_mul(
                &h.matmul(&w.t()?)?,
                kernels::GATE_UP_BLOCK,
            )?)
        };
        // The three epilogues: each thread's stores after the tile's multiplies, the tile
        // staged and stored with TMA (`DECIDE_GATE_UP_TMA_STORE`), and each thread's stores
        // during the next tile's multiplies (`DECIDE_GATE_UP_OVERLAP`); and the tiles in
        // bands of rows (`DECIDE_GATE_UP_BAND_ROWS`, 512 here so that 1,000 rows end in a
        // short band), alone and overlapped. All must give the same values, the overlapped
        // and banded ones bit for bit those of the first.
        let set = |tma_store, overlap, band| {
            kernels::set_gate_up_tma_store(tma_store);
            kernels::set_gate_up_overlap(overlap);
            kernels::set_gate_up_band_rows(band);
        };
        for (epilogue, tma_store, overlap, band) in [
            ("", false, false, 0),
            (", TMA store", true, false, 0),
            (", overlapped", false, true, 0),
            (", bands of 512", false, false, 512),
            (", overlapped, bands of 512", false, true, 512),
        ] {
            for m in [1usize, 100, 128, 1000, 1029, 8192] {
                let h = Tensor::randn(0f32, 1f32, (m, k), &dev)?.to_dtype(DType::BF16)?;
                let name = format!("gate_up_silu ({m} rows{epilogue})");
                set(tma_store, overlap, band);
                let got = kernels::gate_up_silu(&h, &w);
                set(false, false, 0);
                match got {
                    Ok(got) => {
                        if overlap || band > 0 {
                            let plain = kernels::gate_up_silu(&h, &w)?;
                            check(format!("{name} = plain"), diff(&got, &plain)?, 0.0);
                        }
                        check(name, diff(&got, &unfused(&h)?)?, 0.02)
                    }
                    Err(e) => {
                        println!("{name:<48} error: {e} FAILED");
                        check(name, (f32::INFINITY, 0.0), 0.0);
                    }
                }
            }
        }
        for m in [1024usize, 2048, 3683, 4096, 7300, 8192] {
            let h = Tensor::randn(0f32, 1f32, (m, k), &dev)?.to_dtype(DType::BF16)?;
            let flops = (2 * m * 2 * i * k) as f64;
            let fused = |tma_store, overlap, band| {
                set(tma_store, overlap, band);
                let ms = gpu_ms(&dev, || {
                    drop(kernels::gate_up_silu(&h, &w)?);
                    Ok(())
                });
                set(false, false, 0);
                ms
            };
            let fused_ms = fused(false, false, 0)?;
            let stored_ms = fused(true, false, 0)?;
            let overlapped_ms = fused(false, true, 0)?;
            // Bands of 2,048 and 4,096 rows, alone and overlapped.
            let mut banded = Vec::new();
            for band in [2048usize, 4096] {
                for overlap in [false, true] {
                    banded.push((band, overlap, fused(false, overlap, band)?));
                }
            }
            let unfused_ms = gpu_ms(&dev, || {
                drop(unfused(&h)?);
                Ok(())
            })?;
            let tf = |ms: f64| flops / (ms / 1e3) / 1e12;
            println!(
                "  gate/up + silu, {m} rows: one kernel {fused_ms:.4} ms ({:.0} TFLOP/s), \
                 with the TMA store {stored_ms:.4} ms ({:.0}), \
                 overlapped {overlapped_ms:.4} ms ({:.0}), \
                 matmul + silu_mul {unfused_ms:.4} ms ({:.0} TFLOP/s)",
                tf(fused_ms),
                tf(stored_ms),
                tf(overlapped_ms),
                tf(unfused_ms)
            );
            let bands: Vec<String> = banded
                .iter()
                .map(|&(band, overlap, ms)| {
                    let how = if overlap { ", overlapped" } else { "" };
                    println!(
                        "  gate/up + silu, {m} rows, bands of {band}{how}: {ms:.4} ms ({:.0} TFLOP/s)",
                        tf(ms)
                    );
                    format!(r#"{{"band_rows":{band},"overlapped":{overlap},"ms":{ms},"tflops":{}}}"#, tf(ms))
                })
                .collect();
            timings.push(format!(
                r#"{{"case":"gate_up_silu {m} rows","fused_ms":{fused_ms},"tma_store_ms":{stored_ms},"overlapped_ms":{overlapped_ms},"unfused_ms":{unfused_ms},"fused_tflops":{},"tma_store_tflops":{},"overlapped_tflops":{},"unfused_tflops":{},"bands":[{}]}}"#,
                tf(fused_ms),
                tf(stored_ms),
                tf(overlapped_ms),
                tf(unfused_ms),
                bands.join(",")
            ));
        }
    }

    let q15 = Heads {
        q: 12,
        kv: 2,
        dim: 128,
    };
    let q05 = Heads {
        q: 14,
        kv: 2,
        dim: 64,
    };
    let cases = [
        Case {
            name: "prefill, 1 row",
            heads: q15,
            prefixes: vec![],
            segments: vec![(None, 1)],
            picks: vec![],
            views: false,
        },
        Case {
            name: "prefill, 100 rows (d=128)",
            heads: q15,
            prefixes: vec![],
            segments: vec![(None, 100)],
            picks: vec![],
            views: false,
        },
        Case {
            name: "prefill, 100 rows (d=64)",
            heads: q05,
            prefixes: vec![],
            segments: vec![(None, 100)],
            picks: vec![],
            views: false,
        },
        Case {
            name: "suffix of 7 after 300 cached",
            heads: q15,
            prefixes: vec![300],
            segments: vec![(Some(0), 7)],
            picks: vec![],
            views: false,
        },
        packed("packed: 3 prefixes, 6 segments", q15, vec![]),
        packed("packed: 3 prefixes, 6 segments (d=64)", q05, vec![]),
        // The last layer of that pass: each segment's last row.
        packed(
            "packed, last rows picked",
            q15,
            vec![8, 48, 51, 117, 118, 138],
        ),
        Case {
            name: "causal 777 after 1500 cached",
            heads: q15,
            prefixes: vec![1500],
            segments: vec![(Some(0), 777)],
            picks: vec![],
            views: false,
        },
        Case {
            name: "3 rows after 4000 cached (split)",
            heads: q15,
            prefixes: vec![4000],
            segments: vec![(Some(0), 3)],
            picks: vec![],
            views: false,
        },
        Case {
            name: "2 x 40 rows after 3000 + 2000 (split)",
            heads: q05,
            prefixes: vec![3000, 2000],
            segments: vec![(Some(1), 40), (Some(0), 40)],
            picks: vec![],
            views: false,
        },
        Case {
            name: "rows 5, 150, 776 picked of 777 after 1500",
            heads: q15,
            prefixes: vec![1500],
            segments: vec![(Some(0), 777)],
            picks: vec![5, 150, 776],
            views: false,
        },
        Case {
            name: "last row picked of 3683 after 2600 (d=64)",
            heads: q05,
            prefixes: vec![2600],
            segments: vec![(Some(0), 3683)],
            picks: vec![3682],
            views: false,
        },
        three_pieces(
            "300 rows after pieces 1500 + 1300 + 1100 of one cache",
            false,
        ),
        Case {
            views: true,
            ..packed("packed: 3 prefixes as views of longer caches", q15, vec![])
        },
        three_pieces(
            "300 rows after pieces 1500 + 1300 + 1100, views of longer caches",
            true,
        ),
        Case {
            name: "300 rows after pieces 1500 + 1300 + 1100 + 900 + 700 (5: no maps)",
            heads: q15,
            prefixes: vec![1500, 1300, 1100, 900, 700],
            segments: vec![(Some(ALL_PREFIXES), 300)],
            picks: vec![],
            views: false,
        },
    ];
    for c in &cases {
        for block in AttentionBlock::ALL {
            if !block.runs_on(&dev, c.heads.dim) {
                println!("attention ({block:?}): {}: not on this device", c.name);
                continue;
            }
            for (label, tma, longest_first) in variants(block) {
                kernels::set_tensor_maps(tma);
                let layout = Layout::Order(longest_first);
                let r = attention_case(&dev, c, block, layout, false)?;
                check(format!("attention ({label}): {}", c.name), r.diff, 0.02);
                if let Some(d) = r.order_diff {
                    check("  same in the other block order".to_string(), d, 0.0);
                }
            }
        }
    }

    if checks_only {
        if let Some(p) = json_path {
            std::fs::write(&p, format!("[{}]\n", report.join(",\n")))?;
        }
        std::process::exit(i32::from(failed));
    }

    // Timing: causal prefill of n rows, short suffixes over one long cached prefix (many
    // questions over one input; one question over a long input, which the key split
    // serves), on every block shape this device runs.
    // FLOPs of attention for `heads`: 4 x scores x d per head (2 for the scores, 2 for P V).
    let flops = |heads: Heads, scores: f64| 4.0 * scores * (heads.dim * heads.q) as f64;
    let causal = [2048usize, 4096, 8192].map(|n| {
        let scores = (n * n) as f64 / 2.0; // the causal half
        (
            format!("causal {n}"),
            q15,
            vec![],
            vec![(None, n)],
            flops(q15, scores),
        )
    });
    let over_prefix = [
        (4352usize, 64usize, 47usize),
        (4608, 64, 24),
        (28_256, 1, 3),
    ]
    .map(|(prefix, count, rows)| {
        (
            format!("{count}x{rows} over {prefix}"),
            q15,
            vec![prefix],
            (0..count).map(|_| (Some(0), rows)).collect(),
            flops(q15, (count * rows * prefix) as f64),
        )
    });
    // Later chunks of a long prefill: causal rows after the chunks before them (with causal
    // 8192, the four chunks of the 28,259-token prefill of issue 17's benchmark, so their sum
    // x 28 layers is its attention time); the last with heads 64 wide too (q05, SmolLM2).
    let chunks = [
        (8192usize, 8192usize, q15),
        (8192, 16_384, q15),
        (3683, 24_576, q15),
        (8192, 8192, q05),
    ]
    .map(|(n, prefix, heads)| {
        let d = heads.dim;
        (
            format!("causal {n} after {prefix} (d={d})"),
            heads,
            vec![prefix],
            vec![(Some(0), n)],
            flops(heads, (n * prefix) as f64 + (n * n) as f64 / 2.0),
        )
    });
    // That prefill's chunks cut where the plain lengths fall (the server's before
    // `DECIDE_PREFILL_ALIGN`), the cache in pieces as the fused path holds it, against one
    // prefix of the same length.
    let pieces = [
        (8192usize, vec![3683usize, 8192]),
        (8192, vec![3683, 8192, 8192]),
        (8192, vec![11_875]),
        (8192, vec![20_067]),
    ]
    .map(|(n, prefixes)| {
        let held: usize = prefixes.iter().sum();
        let name = prefixes.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        (
            format!("causal {n} after {}", name.join(" + ")),
            q15,
            prefixes,
            vec![(Some(ALL_PREFIXES), n)],
            flops(q15, (n * held) as f64 + (n * n) as f64 / 2.0),
        )
    });
    // A lone short question's pass (71 causal rows after a cached header, as forward_bench
    // `short` reads it) over ever more cached keys: where the plain wgmma kernel's lower
    // latency per block stops beating the warp-specialized kernel's pipeline
    // (`attention_plan::short_pass_runs_plain`).
    let short = [16usize, 240, 496, 1008, 2032, 4080].map(|prefix| {
        (
            format!("71 after {prefix}"),
            q15,
            vec![prefix],
            vec![(Some(0), 71)],
            flops(q15, (71 * prefix) as f64 + 71.0 * 71.0 / 2.0),
        )
    });
    let timed = causal
        .into_iter()
        .chain(chunks)
        .chain(pieces)
        .chain(over_prefix)
        .chain(short);
    for (key, heads, prefixes, segments, flops) in timed {
        let c = Case {
            name: "timing",
            heads,
            prefixes,
            segments,
            picks: vec![],
            views: false,
        };
        let runs = |b: &AttentionBlock| b.runs_on(&dev, heads.dim);
        for block in AttentionBlock::ALL.into_iter().filter(runs) {
            for (label, tma, longest_first) in variants(block) {
                kernels::set_tensor_maps(tma);
                let r = attention_case(&dev, &c, block, Layout::Order(longest_first), true)?;
                let ms = r.secs.unwrap_or(0.0) * 1e3;
                let tflops = flops / (ms / 1e3) / 1e12;
                check(format!("attention {key} ({label})"), r.diff, 0.02);
                println!("  {key}, {label}: {ms:.3} ms, {tflops:.1} TFLOP/s");
                timings.push(format!(
                    r#"{{"case":"{key}","block":"{label}","ms":{ms},"tflops":{tflops}}}"#
                ));
            }
        }
    }
    // The 28,259-token prefill's attention in one layer, chunk by chunk as the server cuts it
    // (`decide_models::chunk_lengths`, the cuts on the key tiles), the cache in pieces, on the
    // served kernel: laid out by the rule through run 13 against as planned from the bounds.
    let served = AttentionBlock::WgmmaSpecialized;
    let lengths = [3712usize, 8192, 8192, 8163];
    let layouts = [
        ("legacy plan", Layout::Legacy),
        ("planned", Layout::Planned),
    ];
    for (what, layout) in layouts
        .into_iter()
        .filter(|_| served.runs_on(&dev, q15.dim))
    {
        let mut layer_ms = 0.0;
        for (i, &n) in lengths.iter().enumerate() {
            let held: usize = lengths[..i].iter().sum();
            let segment = (i > 0).then_some(ALL_PREFIXES);
            let c = Case {
                name: "timing",
                heads: q15,
                prefixes: lengths[..i].to_vec(),
                segments: vec![(segment, n)],
                picks: vec![],
                views: false,
            };
            kernels::set_tensor_maps(true);
            let r = attention_case(&dev, &c, served, layout, true)?;
            let ms = r.secs.unwrap_or(0.0) * 1e3;
            layer_ms += ms;
            let tflops = flops(q15, (n * held) as f64 + (n * n) as f64 / 2.0) / (ms / 1e3) / 1e12;
            let key = format!("28k prefill, {what}: {n} after {held}");
            check(format!("attention {key}"), r.diff, 0.02);
            let p = r.plan;
            println!("  {key}: {ms:.3} ms, {tflops:.1} TFLOP/s ({p:?})");
            timings.push(timing_json(&key, &format!("{served:?}+tma"), ms, tflops, p));
        }
        println!(
            "  28k prefill attention, {what}: {layer_ms:.3} ms a layer, {:.1} ms over 28 layers",
            layer_ms * 28.0
        );
    }
    // The key split against the plan's model of it: passes the server plans from their
    // bounds (and one from its shape, 16 x 24 rows), each split forced from 1 to 6, then as
    // planned.
    let calibrate = [
        (
            "3712 causal",
            vec![],
            vec![(None, 3712usize)],
            3712.0 * 3712.0 / 2.0,
        ),
        (
            "64x47 over 4352",
            vec![4352usize],
            vec![(Some(0), 47); 64],
            64.0 * 47.0 * 4352.0,
        ),
        (
            "64x24 over 4608",
            vec![4608],
            vec![(Some(0), 24); 64],
            64.0 * 24.0 * 4608.0,
        ),
        (
            "16x24 over 4608",
            vec![4608],
            vec![(Some(0), 24); 16],
            16.0 * 24.0 * 4608.0,
        ),
    ];
    for (key, prefixes, segments, scores) in calibrate
        .into_iter()
        .filter(|_| served.runs_on(&dev, q15.dim))
    {
        let c = Case {
            name: "timing",
            heads: q15,
            prefixes,
            segments,
            picks: vec![],
            views: false,
        };
        kernels::set_tensor_maps(true);
        let layouts = (1..=6)
            .map(Layout::Splits)
            .chain([Layout::Planned, Layout::Legacy]);
        for layout in layouts {
            let r = attention_case(&dev, &c, served, layout, true)?;
            let ms = r.secs.unwrap_or(0.0) * 1e3;
            let tflops = flops(q15, scores) / (ms / 1e3) / 1e12;
            check(format!("attention {key} ({layout:?})"), r.diff, 0.02);
            let p = r.plan;
            println!("  {key}, {layout:?}: {ms:.3} ms, {tflops:.1} TFLOP/s ({p:?})");
            let label = format!("{served:?}+tma {layout:?}");
            timings.push(timing_json(key, &label, ms, tflops, p));
        }
    }
    report.extend(timings);
    if let Some(p) = json_path {
        std::fs::write(&p, format!("[{}]\n", report.join(",\n")))?;
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
