//! Measures the model path on one device and weight format, to choose the format per device
//! by measurement (issue #3) and to check that batched reads agree with lone reads there.
//!
//! Run: `forward_bench MODEL.gguf DEVICE WEIGHTS [tf32] [compare] [long|short] [tuned]`, DEVICE
//! `cpu` or `cuda`, WEIGHTS `quantized|f32|amx|f16|bf16|bf16-candle` (`bf16-candle`: bf16 weights
//! with candle's ops instead of the fused CUDA kernels), `tf32` to let f32 matmuls (attention)
//! use TF32 on CUDA, `tuned` for the fused projections with algorithms timed at load instead
//! of cuBLAS's defaults (`Matmuls`), `compare` to also load the model with candle's ops and
//! report the largest log-probability and probability differences from them
//! (`candle_max_abs_diff`, `candle_max_prob_diff`, over the single prompt and 4 of the packed
//! questions; the log-probabilities themselves go to stderr).
//! Prints one JSON object:
//! - `single_ms`: median read of a ~1.5k-token prompt (one question, no cache);
//! - `short`: one short question read like the server's single-question requests (its
//!   chat-template header from a cache, the rest in a packed pass): `total_ms` (median
//!   read), `pass_enqueue_ms` (until the packed forward returns, nothing waited on),
//!   `head_enqueue_ms` (+ the head), `synced_ms` (+ waiting for the GPU). Enqueue close to
//!   synced means the host, not the GPU, bounds a short read. `replay_max_abs_diff`: the
//!   largest log-probability difference of later reads (CUDA graph replays on the fused
//!   path) from the first (eager); `lone_max_abs_diff`: of the first from a lone read. With
//!   `short`, only this (`DECIDE_BENCH_RUNS` timed reads, default 50), and `replays`: the
//!   same replay check on two longer questions, 481 rows after a 144-token header and 353
//!   after 16 (`replay_diff`);
//! - `graph_memory_mib`: device memory taken by the CUDA graphs of `graph_shapes` short
//!   passes (32 to 512 rows; CUDA only);
//! - `prefill_4k_ms`, `packed_64_ms`: a ~4k-token state prefilled once, then 64 questions'
//!   suffixes in one packed pass; `packed_max_abs_diff` / `packed_max_prob_diff`: largest
//!   log-probability / probability difference between a packed read and the lone read of
//!   the same full prompt (4 checked);
//! - `prefill_long_ms`, `prefill_long_tokens`: a long state (`DECIDE_BENCH_LONG`, default
//!   30000 tokens, capped by the context) prefilled in chunks: tokens/s against the roofline.
//!   With `long`, only this: one warm-up and five timed runs (`DECIDE_BENCH_RUNS` sets how
//!   many; `prefill_long_ms`, sorted);
//!   `DECIDE_BENCH_CHUNK` sets the most rows per chunk (default: the model's own, 8,192 on
//!   the fused path), to see what longer passes would gain. Chunks are cut with the
//!   remainder first and the cuts on the attention's key tiles, as the server cuts them
//!   (`decide_models::chunk_lengths`); `DECIDE_PREFILL_REMAINDER_FIRST=0` cuts them with
//!   the remainder last and `DECIDE_PREFILL_ALIGN=0` where the plain lengths fall, as before
//!   (the library's settings: the server takes them too).
use std::path::Path;
use std::time::Instant;

use decide_models::{
    ChatMessage, Device, Kernels, LoadOptions, Matmuls, Model, Segment, WeightFormat,
};

fn user(content: String) -> Vec<ChatMessage> {
    vec![ChatMessage {
        role: "user".into(),
        content,
    }]
}

/// A deterministic log text of at least `tokens` tokens for this model.
fn state(model: &Model, tokens: usize) -> Result<String, Box<dyn std::error::Error>> {
    let mut text = String::new();
    let mut i = 0usize;
    loop {
        for _ in 0..50 {
            text.push_str(&format!(
                "Entry {i}: customer {} wrote about order {}; the agent promised a reply within {} days.\n",
                i * 7 % 1000,
                i * 31 % 9973,
                i % 5 + 1
            ));
            i += 1;
        }
        if model.tokenize(&text)?.len() >= tokens {
            return Ok(text);
        }
    }
}

/// A count from the environment variable `name` (`DECIDE_BENCH_*`), or None if unset or not
/// a number.
fn env_count(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn sync(device: &Device) -> Result<(), Box<dyn std::error::Error>> {
    device.synchronize()?;
    Ok(())
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// A rendered question: its tokens and its label ids.
type Asked = (Vec<u32>, Vec<u32>);
/// Renders question `i` about a state.
type Ask<'a> = dyn Fn(&str, usize) -> Result<Asked, Box<dyn std::error::Error>> + 'a;

/// The `short` figures (see the module doc): medians over `timed` reads after 5 warm-ups.
fn short_read(
    model: &Model,
    device: &Device,
    ask: &Ask<'_>,
    timed: usize,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let state =
        "I was charged twice for my subscription this month. Please refund the extra charge.";
    let (tokens, ids) = ask(state, 0)?;
    let header = 16.min(tokens.len() - 1);
    let prefix = model.prefill(&tokens[..header], None)?;
    let segments = [Segment {
        prefix: Some(&prefix),
        tokens: &tokens[header..],
    }];
    let labels = [ids.as_slice()];
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mut total, mut pass, mut head, mut synced) = (vec![], vec![], vec![], vec![]);
    // The first read runs eagerly; later ones may replay a CUDA graph: they must agree.
    let first = model.read_packed(&segments, &labels)?.remove(0);
    let lone = model.read(&tokens, &ids)?;
    let mut replay_diff = 0f32;
    for i in 0..5 + timed.max(1) {
        sync(device)?;
        let t = Instant::now();
        let read = model.read_packed(&segments, &labels)?.remove(0);
        let read_ms = ms(t);
        for (a, b) in first.logprobs.iter().zip(&read.logprobs) {
            replay_diff = replay_diff.max((a - b).abs());
        }
        sync(device)?;
        let t = Instant::now();
        let hidden = model.transformer().forward_packed(&segments)?;
        let pass_ms = ms(t);
        let logits = model.transformer().head(&hidden)?;
        let head_ms = ms(t);
        sync(device)?;
        let synced_ms = ms(t);
        drop(logits);
        if i >= 5 {
            total.push(read_ms);
            pass.push(pass_ms);
            head.push(head_ms);
            synced.push(synced_ms);
        }
    }
    Ok(serde_json::json!({
        "tokens": tokens.len(),
        "cached_tokens": header,
        "total_ms": median(total),
        "pass_enqueue_ms": median(pass),
        "head_enqueue_ms": median(head),
        "synced_ms": median(synced),
        "replay_max_abs_diff": replay_diff,
        "lone_max_abs_diff": first
            .logprobs
            .iter()
            .zip(&lone.logprobs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max),
    }))
}

/// The largest log-probability difference of CUDA graph replays from the eager first read,
/// for a pass of `rows` tokens after a cached header of `header` (the tokens of a question
/// over `state`, cut to `header + rows`): the first read of a shape runs eagerly, the second
/// captures its graph, later ones replay it. The shapes `short` checks are two where a pass
/// planned from its own row counts split its keys otherwise than its graph, padded, did
/// (before session 37: `PassInputs::upload` in models/src/forward/fused.rs).
fn replay_diff(
    model: &Model,
    ask: &Ask<'_>,
    state: &str,
    header: usize,
    rows: usize,
) -> Result<f32, Box<dyn std::error::Error>> {
    let (mut tokens, ids) = ask(state, 0)?;
    if tokens.len() < header + rows {
        return Err(format!("{} tokens, fewer than {header} + {rows}", tokens.len()).into());
    }
    tokens.truncate(header + rows);
    let prefix = model.prefill(&tokens[..header], None)?;
    let segments = [Segment {
        prefix: Some(&prefix),
        tokens: &tokens[header..],
    }];
    let labels = [ids.as_slice()];
    let first = model.read_packed(&segments, &labels)?.remove(0);
    let mut diff = 0f32;
    for _ in 0..3 {
        let read = model.read_packed(&segments, &labels)?.remove(0);
        for (a, b) in first.logprobs.iter().zip(&read.logprobs) {
            diff = diff.max((a - b).abs());
        }
    }
    Ok(diff)
}

/// Device memory taken by the CUDA graphs of short passes: reads of 32, 64, .., 512 rows
/// over a cached 16-token header, three of each (a shape is captured on its second read).
/// `None` off CUDA. Returns (graphs' shapes read, MiB of device memory they took).
fn graph_memory(
    model: &Model,
    tokens: &[u32],
    ids: &[u32],
) -> Result<Option<(usize, f64)>, Box<dyn std::error::Error>> {
    #[cfg(feature = "cuda")]
    if model.device().is_cuda() {
        use candle_core::cuda_backend::cudarc::driver::result::mem_get_info;
        let header = 16;
        let prefix = model.prefill(&tokens[..header], None)?;
        model.device().synchronize()?;
        let (free_before, _) = mem_get_info()?;
        let mut shapes = 0;
        for rows in (32..=512)
            .step_by(32)
            .filter(|&r| header + r <= tokens.len())
        {
            let segments = [Segment {
                prefix: Some(&prefix),
                tokens: &tokens[header..header + rows],
            }];
            for _ in 0..3 {
                model.read_packed(&segments, &[ids])?;
            }
            shapes += 1;
        }
        model.device().synchronize()?;
        let (free_after, _) = mem_get_info()?;
        let mib = (free_before as f64 - free_after as f64) / (1 << 20) as f64;
        return Ok(Some((shapes, mib)));
    }
    let _ = (model, tokens, ids);
    Ok(None)
}

/// The long state's tokens: `DECIDE_BENCH_LONG` (default 30,000), capped by the context.
fn long_prefill_tokens(model: &Model) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let want = env_count("DECIDE_BENCH_LONG")
        .unwrap_or(30_000)
        .min(model.info().context_length - 200);
    let mut tokens = model.tokenize(&state(model, want)?)?;
    tokens.truncate(want);
    Ok(tokens)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, device, weights, rest @ ..] = args.as_slice() else {
        return Err(
            "usage: forward_bench MODEL.gguf cpu|cuda quantized|f32|f16|bf16 [tf32]".into(),
        );
    };
    let device = match device.as_str() {
        "cpu" => Device::Cpu,
        "cuda" => Device::new_cuda(0)?,
        other => return Err(format!("unknown device {other}").into()),
    };
    let (weights, kernels) = match weights.as_str() {
        "quantized" => (WeightFormat::Quantized, Kernels::Auto),
        "f32" => (WeightFormat::F32, Kernels::Auto),
        "amx" => (WeightFormat::AmxBf16, Kernels::Auto),
        "f16" => (WeightFormat::F16, Kernels::Auto),
        "bf16" => (WeightFormat::BF16, Kernels::Auto),
        "bf16-candle" => (WeightFormat::BF16, Kernels::Candle),
        other => return Err(format!("unknown weight format {other}").into()),
    };
    let tf32 = rest.iter().any(|a| a == "tf32");
    candle_core::cuda::set_gemm_reduced_precision_f32(tf32);

    let t = Instant::now();
    // `tuned` (or `DECIDE_BENCH_MATMULS=tuned`, for bench/kernel_lease.sh's settings): the
    // fused projections with algorithms timed at load, not cuBLAS's defaults.
    let tuned_env = std::env::var("DECIDE_BENCH_MATMULS").is_ok_and(|v| v == "tuned");
    let matmuls = if tuned_env || rest.iter().any(|a| a == "tuned") {
        Matmuls::Tuned
    } else {
        Matmuls::Cublas
    };
    let model = Model::load_with(
        Path::new(path),
        &device,
        &LoadOptions {
            weights,
            kernels,
            matmuls,
        },
    )?;
    let load_s = t.elapsed().as_secs_f64();
    let labels: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
    let ask = |state: &str, i: usize| -> Result<_, Box<dyn std::error::Error>> {
        let prompt = model.render(&user(format!(
            "{state}\n\nQuestion {i}: how urgent is entry {i}?\nA. not urgent\nB. this week\nC. today\nD. now\n\nReply with one label: A, B, C, D."
        )))?;
        let ids = model.label_ids(&prompt, &labels)?;
        Ok((prompt.tokens, ids))
    };

    let step = |what: &str| eprintln!("forward_bench: {what}");
    // With `long` among the options: only the long prefill, one warm-up and `DECIDE_BENCH_RUNS` (5) timed runs
    // (what a GPU lease with little time left can still measure).
    if rest.iter().any(|a| a == "long") {
        let tokens = long_prefill_tokens(&model)?;
        let chunk = env_count("DECIDE_BENCH_CHUNK");
        let remainder_first = decide_models::prefill_remainder_first();
        let aligned = decide_models::prefill_aligned();
        let timed = env_count("DECIDE_BENCH_RUNS").unwrap_or(5);
        let mut runs = Vec::new();
        for i in 0..=timed.max(1) {
            sync(&device)?;
            let t = Instant::now();
            drop(match chunk {
                Some(rows) => model.prefill_in_chunks(&tokens, None, rows)?,
                None => model.prefill(&tokens, None)?,
            });
            sync(&device)?;
            if i > 0 {
                runs.push(ms(t));
            }
        }
        runs.sort_by(f64::total_cmp);
        println!(
            "{}",
            serde_json::json!({"prefill_long_tokens": tokens.len(), "prefill_long_ms": runs,
                               "chunk_rows": chunk, "remainder_first": remainder_first, "aligned": aligned,
                               "prefill_long_ms_p50": runs[runs.len() / 2],
                               "matmuls": format!("{matmuls:?}"), "load_s": load_s})
        );
        return Ok(());
    }
    // With `short`: only the short read, `DECIDE_BENCH_RUNS` (50) timed reads after 5 warm-ups
    // (few, e.g. 2, under Nsight Compute: bench/kernel_lease.sh's ncu-short).
    if rest.iter().any(|a| a == "short") {
        let timed = env_count("DECIDE_BENCH_RUNS").unwrap_or(50);
        let short_read = short_read(&model, &device, &ask, timed)?;
        // 481 rows after 144 (625 keys: the warp-specialized kernel) and 353 after 16 (369:
        // the plain wgmma kernel), each with one row read out.
        let long_question = state(&model, 700)?;
        let replays: Vec<serde_json::Value> = [(144, 481), (16, 353)]
            .into_iter()
            .map(|(header, rows)| {
                match replay_diff(&model, &ask, &long_question, header, rows) {
                    Ok(d) => serde_json::json!({"header": header, "rows": rows, "replay_max_abs_diff": d}),
                    Err(e) => serde_json::json!({"header": header, "rows": rows, "error": e.to_string()}),
                }
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"short": short_read, "replays": replays, "matmuls": format!("{matmuls:?}"), "load_s": load_s})
        );
        return Ok(());
    }
    // Single: one ~150-token prompt, read alone.
    step("single read");
    let short = state(&model, 90)?;
    let (tokens, ids) = ask(&short, 0)?;
    model.read(&tokens, &ids)?; // warm-up: kernels, workspaces
    let mut single = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        model.read(&tokens, &ids)?;
        single.push(ms(t));
    }
    single.sort_by(f64::total_cmp);

    step("short read");
    let short_read = short_read(&model, &device, &ask, 50)?;
    step("graph memory");
    let graph_memory = graph_memory(&model, &tokens, &ids)?;

    // 64 questions over a ~4k state (`DECIDE_BENCH_STATE`): prefill once, one packed pass.
    let state_tokens = env_count("DECIDE_BENCH_STATE").unwrap_or(4000);
    let long = state(&model, state_tokens)?;
    let count = env_count("DECIDE_BENCH_QUESTIONS").unwrap_or(64);
    let prompts: Vec<_> = (0..count)
        .map(|i| ask(&long, i))
        .collect::<Result<_, _>>()?;
    let shared = prompts
        .iter()
        .map(|(p, _)| {
            p.iter()
                .zip(&prompts[0].0)
                .take_while(|(a, b)| a == b)
                .count()
        })
        .min()
        .unwrap_or(0)
        .min(prompts[0].0.len() - 1);
    step("prefill of the shared state");
    let warm = model.prefill(&prompts[0].0[..shared], None)?;
    drop(warm);
    sync(&device)?;
    let t = Instant::now();
    let prefix = model.prefill(&prompts[0].0[..shared], None)?;
    sync(&device)?;
    let prefill_4k_ms = ms(t);
    let segments: Vec<Segment<'_>> = prompts
        .iter()
        .map(|(p, _)| Segment {
            prefix: Some(&prefix),
            tokens: &p[shared..],
        })
        .collect();
    let label_sets: Vec<&[u32]> = prompts.iter().map(|(_, ids)| ids.as_slice()).collect();
    step("packed pass");
    model.read_packed(&segments, &label_sets)?; // warm-up
    let t = Instant::now();
    let packed = model.read_packed(&segments, &label_sets)?;
    let packed_64_ms = ms(t);
    let mut worst = 0f32;
    let mut worst_p = 0f32;
    for i in [0, 1, count / 2, count - 1] {
        let alone = model.read(&prompts[i].0, &prompts[i].1)?;
        for (a, b) in alone.logprobs.iter().zip(&packed[i].logprobs) {
            worst = worst.max((a - b).abs());
            worst_p = worst_p.max((a.exp() - b.exp()).abs());
        }
        eprintln!(
            "forward_bench: question {i}: lone {:?} packed {:?}",
            alone.logprobs, packed[i].logprobs
        );
    }

    // Long prefill, chunked.
    step("long prefill");
    let long_tokens = long_prefill_tokens(&model)?;
    sync(&device)?;
    let t = Instant::now();
    let cache = model.prefill(&long_tokens, None)?;
    sync(&device)?;
    let prefill_long_ms = ms(t);
    let kv_mib = cache.size_bytes() as f64 / (1 << 20) as f64;
    drop(cache);

    // The same reads with candle's ops: how far the fused kernels' rounding moves them.
    let candle_max_abs_diff = if rest.iter().any(|a| a == "compare") {
        step("comparison with candle's ops");
        let options = LoadOptions {
            weights,
            kernels: Kernels::Candle,
            ..Default::default()
        };
        let reference = Model::load_with(Path::new(path), &device, &options)?;
        let mut worst = (0f32, 0f32);
        let mut check = |a: &[f32], b: &[f32]| {
            eprintln!("forward_bench: fused {a:?} candle {b:?}");
            for (x, y) in a.iter().zip(b) {
                worst.0 = worst.0.max((x - y).abs());
                worst.1 = worst.1.max((x.exp() - y.exp()).abs());
            }
        };
        check(
            &model.read(&tokens, &ids)?.logprobs,
            &reference.read(&tokens, &ids)?.logprobs,
        );
        for i in [0, 1, count / 2, count - 1] {
            let want = reference.read(&prompts[i].0, &prompts[i].1)?;
            check(&packed[i].logprobs, &want.logprobs);
        }
        Some(worst)
    } else {
        None
    };

    println!(
        "{}",
        serde_json::json!({
            "model": model.info().name,
            "device": format!("{device:?}"),
            "weights": format!("{weights:?}"),
            "tf32": tf32,
            "load_s": load_s,
            "single_tokens": tokens.len(),
            "single_ms": {"min": single[0], "p50": single[single.len() / 2], "max": single[single.len() - 1]},
            "short": short_read,
            "graph_shapes": graph_memory.map(|g| g.0),
            "graph_memory_mib": graph_memory.map(|g| g.1),
            "prefix_tokens": shared,
            "prefill_4k_ms": prefill_4k_ms,
            "packed_64_ms": packed_64_ms,
            "packed_suffix_tokens": segments.iter().map(|s| s.tokens.len()).sum::<usize>(),
            "questions": count,
            "per_decision_ms": (prefill_4k_ms + packed_64_ms) / count as f64,
            "packed_max_abs_diff": worst,
            "packed_max_prob_diff": worst_p,
            "fused": model.transformer().is_fused(),
            "candle_max_abs_diff": candle_max_abs_diff.map(|w| w.0),
            "candle_max_prob_diff": candle_max_abs_diff.map(|w| w.1),
            "prefill_long_tokens": long_tokens.len(),
            "prefill_long_ms": prefill_long_ms,
            "prefill_long_tokens_per_s": long_tokens.len() as f64 / (prefill_long_ms / 1e3),
            "kv_long_mib": kv_mib,
        })
    );
    Ok(())
}
