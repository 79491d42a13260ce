//! Prefill speed and label probabilities of one weight format on the CPU, to compare AMX bf16
//! weights with f32 (`WeightFormat::AmxBf16` against `F32`).
//!
//! Run: `amx_prefill MODEL.gguf f32|amx [ROWS...]` (rows default 100 300). Prints one JSON
//! object: `load_s`, `forward` (the model's description), per row count the median prefill
//! (`DECIDE_BENCH_RUNS` timed runs after one warm-up, default 5) in ms and tokens/s, and the
//! label probabilities of three short chat questions (`probs`), to diff between formats.
use std::path::Path;
use std::time::Instant;

use decide_models::{ChatMessage, Device, LoadOptions, Model, WeightFormat};

const QUESTIONS: [&str; 3] = [
    "Review: \"The battery died after two days and support never answered.\" Is this review \
     positive or negative? Answer A for positive, B for negative.",
    "Ticket: \"I was charged twice for my March invoice, please refund one payment.\" Which team \
     should handle it? A: billing, B: technical support, C: sales. Answer with the letter.",
    "Is 17 a prime number? A: yes, B: no. Answer with the letter.",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: amx_prefill MODEL.gguf f32|amx [ROWS...]")?;
    let weights = match args.next().as_deref() {
        Some("f32") => WeightFormat::F32,
        Some("amx") => WeightFormat::AmxBf16,
        other => return Err(format!("weights {other:?}: f32 or amx").into()),
    };
    let rows: Vec<usize> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
    let rows = if rows.is_empty() {
        vec![100, 300]
    } else {
        rows
    };
    let runs: usize = std::env::var("DECIDE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);

    let t0 = Instant::now();
    let options = LoadOptions {
        weights,
        ..Default::default()
    };
    let model = Model::load_with(Path::new(&path), &Device::Cpu, &options)?;
    let load_s = t0.elapsed().as_secs_f64();

    let mut text = String::new();
    let mut i = 0;
    let max_rows = rows.iter().copied().max().unwrap_or(0);
    while model.tokenize(&text)?.len() < max_rows {
        text.push_str(&format!(
            "Entry {i}: customer {} wrote about order {}; the agent promised a reply within {} days.\n",
            i * 7 % 1000,
            i * 31 % 9973,
            i % 5 + 1
        ));
        i += 1;
    }
    let tokens = model.tokenize(&text)?;
    let mut prefill = Vec::new();
    for &n in &rows {
        let mut ms: Vec<f64> = (0..=runs)
            .map(|_| {
                let t = Instant::now();
                model.prefill(&tokens[..n], None).expect("prefill");
                t.elapsed().as_secs_f64() * 1e3
            })
            .skip(1)
            .collect();
        ms.sort_by(f64::total_cmp);
        let median = ms[ms.len() / 2];
        prefill.push(format!(
            "{{\"rows\":{n},\"median_ms\":{median:.1},\"tokens_per_s\":{:.1},\"ms\":{ms:.1?}}}",
            n as f64 / median * 1e3
        ));
    }

    let mut probs = Vec::new();
    for q in QUESTIONS {
        let prompt = model.render(&[ChatMessage {
            role: "user".into(),
            content: q.into(),
        }])?;
        let labels: Vec<String> = ["A", "B", "C"].iter().map(|s| s.to_string()).collect();
        let ids = model.label_ids(&prompt, &labels)?;
        let read = model.read(&prompt.tokens, &ids)?;
        let p: Vec<String> = read
            .logprobs
            .iter()
            .map(|l| format!("{:.6}", l.exp()))
            .collect();
        probs.push(format!("[{}]", p.join(",")));
    }
    println!(
        "{{\"model\":{path:?},\"forward\":{:?},\"load_s\":{load_s:.1},\"prefill\":[{}],\"probs\":[{}]}}",
        model.info().forward,
        prefill.join(","),
        probs.join(",")
    );
    Ok(())
}
