//! Measures model load time and `read()` latency for a ~150-token prompt.
//!
//! Run: `cargo run --release -p decide-models --example read_latency -- .models/smol.gguf [REPS] [WEIGHTS]`
//! (WEIGHTS: quantized (default), f32, amx, f16, bf16; see `WeightFormat`)
//!
//! Prints load seconds, prompt length, and min / median / max of REPS reads (default 10),
//! plus a prefix-cache figure: the same prompt split as a cached prefix and a short suffix.
use std::path::Path;
use std::time::Instant;

use decide_models::{ChatMessage, Device, LoadOptions, Model, Readout, WeightFormat};

const STATE: &str =
    "Ticket #4821 from a customer on the premium plan: \"Since yesterday's update the \
mobile app logs me out every few minutes. I have reinstalled it twice, cleared the cache, and \
tried both Wi-Fi and mobile data. My colleague on the same plan has no problem. I need this \
fixed today because I use the app to approve invoices for my team, and three of them are \
overdue already. Otherwise, how do I approve them on the web?\"";

/// Quantized weights give bit-identical reads however the prompt is split or batched (on the
/// CPUs where that was verified); dense weights agree to float rounding.
fn check_same(a: &Readout, b: &Readout, weights: WeightFormat, what: &str) {
    if weights == WeightFormat::Quantized {
        assert_eq!(a, b, "{what}");
    } else {
        for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
            assert!((x - y).abs() < 1e-3, "{what}: {x} vs {y}");
        }
    }
}

/// User + system CPU seconds of this process so far (Linux `/proc/self/stat`, 100 Hz ticks).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: read_latency MODEL.gguf [REPS]")?;
    let reps: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(10);
    let weights = match args.next().as_deref() {
        None | Some("quantized") => WeightFormat::Quantized,
        Some("f32") => WeightFormat::F32,
        Some("amx") => WeightFormat::AmxBf16,
        Some("f16") => WeightFormat::F16,
        Some("bf16") => WeightFormat::BF16,
        Some(other) => return Err(format!("unknown weight format {other:?}").into()),
    };
    let device = Device::Cpu;

    let t0 = Instant::now();
    let model = Model::load_with(
        Path::new(&path),
        &device,
        &LoadOptions {
            weights,
            ..Default::default()
        },
    )?;
    let load_s = t0.elapsed().as_secs_f64();

    let question = "What is the customer's main request? Options:\nA) a refund\nB) a fix for being \
                    logged out, or another way to approve invoices\nC) an upgrade to a higher plan\n\
                    D) deleting their account\nAnswer with the letter only.";
    let messages = vec![ChatMessage {
        role: "user".into(),
        content: format!("{STATE}\n\n{question}"),
    }];
    let prompt = model.render(&messages)?;
    let labels: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
    let ids = model.label_ids(&prompt, &labels)?;

    let first = model.read(&prompt.tokens, &ids)?; // warm-up (first call packs weights)
    let mut times = Vec::with_capacity(reps);
    let cpu0 = cpu_seconds();
    for _ in 0..reps {
        let t = Instant::now();
        let r = model.read(&prompt.tokens, &ids)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(r, first);
    }
    let cpu_per_read_ms = cpu0
        .zip(cpu_seconds())
        .map(|(a, b)| (b - a) * 1e3 / reps as f64);
    times.sort_by(f64::total_cmp);

    // Prefix cache: everything up to the question prefilled once, then only the suffix.
    let cut = model.render(&[ChatMessage {
        role: "user".into(),
        content: format!("{STATE}\n\n"),
    }])?;
    let mut n = 0;
    while n < cut.tokens.len() && n < prompt.tokens.len() && cut.tokens[n] == prompt.tokens[n] {
        n += 1;
    }
    let n = n.saturating_sub(1).max(1);
    let (_, cache) = model.forward(&prompt.tokens[..n], 0, None, &[])?;
    let suffix = &prompt.tokens[n..];
    let mut suffix_times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        let (h, _) = model.forward(suffix, n, Some(&cache), &[suffix.len() - 1])?;
        let r = model.read_hidden(&h, &ids)?;
        suffix_times.push(t.elapsed().as_secs_f64() * 1e3);
        check_same(
            &r,
            &first,
            weights,
            "cached read differs from the one-pass read",
        );
    }
    suffix_times.sort_by(f64::total_cmp);

    // Four questions over the same state: one batched pass over the cached prefix.
    let variants = ["A", "B", "C", "D"].map(|first| {
        question.replace(
            "Answer with the letter only.",
            &format!("Answer with the letter only; {first} is not a hint."),
        )
    });
    let prompts = variants
        .iter()
        .map(|q| {
            model.render(&[ChatMessage {
                role: "user".into(),
                content: format!("{STATE}\n\n{q}"),
            }])
        })
        .collect::<Result<Vec<_>, _>>()?;
    let suffixes: Vec<&[u32]> = prompts.iter().map(|p| &p.tokens[n..]).collect();
    let label_sets: Vec<&[u32]> = vec![ids.as_slice(); prompts.len()];
    let t = Instant::now();
    let batched = model.read_suffixes(Some(&cache), &suffixes, &label_sets)?;
    let batched_ms = t.elapsed().as_secs_f64() * 1e3;
    for (p, r) in prompts.iter().zip(&batched) {
        let single = model.read(&p.tokens, &ids)?;
        check_same(
            r,
            &single,
            weights,
            "batched read differs from the single read",
        );
    }

    let info = model.info();
    println!(
        "model: {} ({}, {} layers, vocab {})",
        info.name, info.arch, info.n_layers, info.vocab_size
    );
    println!(
        "threads: {}, weights: {weights:?}",
        candle_core::utils::get_num_threads()
    );
    println!("load: {load_s:.2} s");
    println!(
        "prompt: {} tokens; labels {:?}",
        prompt.tokens.len(),
        labels
    );
    println!(
        "read: min {:.1} ms, median {:.1} ms, max {:.1} ms over {reps} reads",
        times[0],
        times[reps / 2],
        times[reps - 1]
    );
    if let Some(c) = cpu_per_read_ms {
        println!(
            "read CPU time: {c:.1} ms per read (all threads; on a busy machine wall time above is inflated, \
             CPU time / threads approximates an idle machine's wall time: {:.1} ms)",
            c / candle_core::utils::get_num_threads() as f64
        );
        println!(
            "load average now: {}",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
    }
    println!(
        "cached prefix of {n} tokens + suffix of {} tokens: median {:.1} ms (same readout)",
        suffix.len(),
        suffix_times[reps / 2]
    );
    println!(
        "{} questions batched on the cached prefix: {batched_ms:.1} ms in all, {:.1} ms per decision (same readouts)",
        prompts.len(),
        batched_ms / prompts.len() as f64
    );
    let probs: Vec<String> = first
        .logprobs
        .iter()
        .map(|l| format!("{:.3}", l.exp()))
        .collect();
    println!(
        "probabilities {probs:?}, option_mass {:.3}",
        first.option_mass
    );
    Ok(())
}
