//! Where the host's time per question goes: plugin calls, prompt preparation (renderer, chat
//! template, tokenization, label ids) and whole requests through the pipeline.
//!
//!     cargo run --release -p decide-server --example host_steps -- .models/smol.gguf [--reps 30] [--decide [--multi-reps 3]] [--long-words 3000]
//!
//! Prints medians over `--reps` repetitions (µs unless marked ms). The states and questions are
//! those of bench/bench.py: `single` asks one question over a short state, `multi` 64 questions
//! over a ~3000-word support log (~4.6k Qwen tokens; `--long-words` sets its length: 18,400
//! words are ~28k tokens, issue 17's long input). `cold` uses a tenant salt no earlier
//! repetition used (token cache and prefix cache empty for it), `warm` repeats one salt (the
//! same tenant; `single` asks another question in each repetition, `multi` the same 64).
//!
//! - `plugin calls`: each plugin entry point the pipeline calls, one call at a time, on a fresh
//!   instance and on one kept in a [`Session`] (as a request's later calls run).
//! - `prepare`: what `Engine::decide` counts as prepare, step by step, on this thread: the
//!   renderer plugin call (one session per request), `Model::render_cached` (chat template + tokenization), `label_ids`.
//! - `decide` (with `--decide`; needs a model fast enough on CPU, e.g. smol): whole requests
//!   through `Engine::decide`, its own `Server-Timing` steps (compile, prepare, model, answer):
//!   `single`, `long1 cold` (one question over the long input under a new salt, as issue 17's
//!   first read), `multi64` cold and warm. `long1 cold`'s prepare is the `prepare` rows'
//!   render + template + label ids of a first question, but after a forward pass: on a
//!   2-core CPU with smol and 4.7k tokens 1.9-2.5 ms against their ~0.4 ms in a tight loop
//!   (session 32), a gap like the server's 2.0-2.6 ms against host_steps' 0.9 ms for the
//!   28k read on the GPU hosts.

use std::time::{Duration, Instant};

use clap::Parser;
use decide_server::calibration::CalibrationState;
use decide_server::config::Config;
use decide_server::pipeline::{DecisionRequest, Question, StepTimes, TemperatureSource};
use decide_server::plugins::{CompiledQuestion, Session};
use decide_server::readout;

const TOPICS: [&str; 8] = [
    "billing",
    "shipping",
    "login",
    "refunds",
    "performance",
    "security",
    "pricing",
    "support",
];

/// bench.py's `long_state(words)`.
fn long_state(words: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut count = 0;
    let mut i = 0;
    while count < words {
        let topic = TOPICS[i % TOPICS.len()];
        let line = format!(
            "Entry {i}: customer {} wrote about {topic}; the agent replied that the {topic} team would follow up within {} days and logged reference {}.",
            i * 7 % 1000,
            i % 5 + 1,
            i * 31 % 9973
        );
        count += line.split_whitespace().count();
        lines.push(line);
        i += 1;
    }
    lines.join("\n")
}

/// bench.py's `question(i)`: (plugin, question JSON without name).
fn question(i: usize) -> (String, String) {
    let topic = TOPICS[i % TOPICS.len()];
    match i % 3 {
        0 => (
            "openai-predicate".into(),
            serde_json::json!({"type": "predicate", "instructions": format!("The log mentions {topic} issue number {i}.")}).to_string(),
        ),
        1 => (
            "openai-choice".into(),
            serde_json::json!({"type": "choice", "instructions": format!("Which team handles question {i}?"),
                "choices": TOPICS[..4].iter().map(|t| serde_json::json!({"value": t})).collect::<Vec<_>>()}).to_string(),
        ),
        _ => (
            "openai-score".into(),
            serde_json::json!({"type": "score", "instructions": format!("How urgent is item {i}?"),
                "levels": [{"label": "low"}, {"label": "medium"}, {"label": "high"}]}).to_string(),
        ),
    }
}

const SHORT_STATE: &str =
    "I was charged twice for my subscription this month. Please refund the extra charge.";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median µs of `reps` runs of `f`.
fn time_us(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                us(t.elapsed())
            })
            .collect(),
    )
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let model_path = args
        .iter()
        .find(|a| !a.starts_with("--") && a.ends_with(".gguf"))
        .cloned()
        .unwrap_or_else(|| ".models/smol.gguf".into());
    // The number after `flag`, or `default`.
    let count = |flag: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|r| r.parse().ok())
            .unwrap_or(default)
    };
    let reps = count("--reps", 30);
    let run_decide = args.iter().any(|a| a == "--decide");
    let multi_reps = count("--multi-reps", 3);

    // Weights stay quantized unless asked: only the `--decide` figures run the model.
    let weights = args
        .iter()
        .position(|a| a == "--weights")
        .and_then(|i| args.get(i + 1))
        .map_or(if run_decide { "auto" } else { "quantized" }, |w| {
            w.as_str()
        });
    /// `decide serve`'s flags, parsed as the binary parses them (every default included).
    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        config: Config,
    }
    let Serve { config } =
        Serve::parse_from(["decide", "--model", &model_path, "--weights", weights]);
    let metrics = std::sync::Arc::new(decide_server::metrics::Metrics::default());
    let progress = decide_server::progress::Reporter::cli(config.progress_every_s);
    let (engine, served) =
        decide_server::server::load_engine(&config, metrics, &progress, &|_| {})?;
    // As a calibrated server: the calibration's parameters are known, no per-request call.
    let calibration = engine.plugins().calibration("temperature").unwrap();
    engine.set_calibration(CalibrationState {
        policy: "temperature".into(),
        plugin_sha256: calibration.sha256().to_string(),
        params: vec![1.0],
        temperature: 1.0,
        source: TemperatureSource::Calibrated,
    });
    let plugins = engine.plugins().clone();
    let renderer = plugins.renderer("direct-options").unwrap();
    let long = long_state(count("--long-words", 3000));
    let model = engine.model();
    println!(
        "model {served} ({model_path}); long state {} bytes, {} tokens; {reps} reps; {} cores",
        long.len(),
        model.tokenize(&long)?.len(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    // `--loop WHAT`: run one step for 5 s (for `perf record`). `template-long-cold` renders
    // the long state under a new tenant salt each time, as a first read over a new input does.
    if let Some(what) = args
        .iter()
        .position(|a| a == "--loop")
        .and_then(|i| args.get(i + 1))
    {
        let c = plugins
            .question_type("openai-choice")
            .unwrap()
            .compile(&question(1).1)
            .unwrap();
        let labels: Vec<String> = ["A", "B", "C", "D"].map(String::from).to_vec();
        let state = if what.contains("long") {
            long.as_str()
        } else {
            SHORT_STATE
        };
        let messages = renderer.render(state, &c, &labels)?;
        let until = Instant::now() + Duration::from_secs(5);
        let mut n = 0u64;
        // Per-iteration times too: the mean moves with whatever else the machine runs.
        let mut times = Vec::new();
        while Instant::now() < until {
            let t = Instant::now();
            match what.as_str() {
                "template-short" | "template-long" => {
                    model.render_cached(&messages, 7)?;
                }
                // A new tenant salt each time: the token cache misses, as a first read does.
                "template-long-cold" => {
                    model.render_cached(&messages, 1_000 + n)?;
                }
                "render-short" | "render-long" => {
                    renderer.render(state, &c, &labels)?;
                }
                // The whole long state in one call on this thread: what
                // `template-long-cold` costs beyond tokenizing it.
                "tokenize-long" => {
                    model.tokenize(&long)?;
                }
                "tokenize-tiny" => {
                    model.tokenize("\n")?;
                }
                "tokenize-line" => {
                    model.tokenize("<|im_start|>system\nYou are a careful classifier. Read the input, then answer.<|im_end|>\n")?;
                }
                "labels" => {
                    let prompt = model.render_cached(&messages, 7)?;
                    let t = Instant::now();
                    model.label_ids(&prompt, &labels)?;
                    let _ = t;
                }
                "compile" => {
                    plugins
                        .question_type("openai-choice")
                        .unwrap()
                        .compile(&question(1).1)?;
                }
                other => anyhow::bail!("unknown --loop {other}"),
            }
            times.push(us(t.elapsed()));
            n += 1;
        }
        println!(
            "{what}: {:.1} µs per iteration (median {:.1})",
            5e6 / n as f64,
            median(times)
        );
        return Ok(());
    }

    // Plugin calls.
    println!("== plugin calls (median µs per call)");
    let questions: Vec<(String, String)> = (0..3).map(question).collect();
    for (plugin, json) in &questions {
        let qt = plugins.question_type(plugin).unwrap();
        let compile = time_us(reps, || {
            qt.compile(json).unwrap();
        });
        let n = qt.compile(json).unwrap().options.len();
        let probs = vec![1.0 / n as f64; n];
        let answer = time_us(reps, || {
            qt.answer(json, &probs).unwrap();
        });
        let session = Session::new();
        let compile_kept = time_us(reps, || {
            qt.compile_in(&session, json).unwrap();
        });
        let answer_kept = time_us(reps, || {
            qt.answer_in(&session, json, &probs).unwrap();
        });
        println!(
            "{plugin:18} compile {compile:7.1}  answer {answer:7.1}   on a kept instance: compile {compile_kept:7.1}  answer {answer_kept:7.1}"
        );
    }
    let compiled: CompiledQuestion = plugins
        .question_type("openai-choice")
        .unwrap()
        .compile(&questions[1].1)
        .unwrap();
    let labels: Vec<String> = ["A", "B", "C", "D"].map(String::from).to_vec();
    for (name, state) in [("short", SHORT_STATE), ("long", long.as_str())] {
        let t = time_us(reps, || {
            renderer.render(state, &compiled, &labels).unwrap();
        });
        let session = Session::new();
        let kept = time_us(reps, || {
            renderer
                .render_in(&session, state, &compiled, &labels)
                .unwrap();
        });
        println!(
            "direct-options     render ({name} state) {t:7.1}   on a kept instance {kept:7.1}"
        );
    }
    let scores = vec![-0.5, -1.5, -2.5, -3.5];
    let t = time_us(reps, || {
        calibration.apply(&scores, &[1.0]).unwrap();
    });
    let session = Session::new();
    let kept = time_us(reps, || {
        calibration.apply_in(&session, &scores, &[1.0]).unwrap();
    });
    println!("temperature        apply {t:7.1}   on a kept instance {kept:7.1}");

    // Prepare, step by step.
    println!("== prepare per question (median µs): render plugin / template+tokens / label ids");
    let mut salt = 1u64 << 40;
    for (name, state, count) in [("single", SHORT_STATE, 1), ("multi", long.as_str(), 64)] {
        // `single` asks another question in each request (as bench.py's `single`), `multi`
        // the same 64.
        let asks: Vec<(CompiledQuestion, Vec<String>)> = (0..count.max(reps.max(3)))
            .map(|i| {
                let (plugin, json) = question(i);
                let c = plugins
                    .question_type(&plugin)
                    .unwrap()
                    .compile(&json)
                    .unwrap();
                let plan = readout::plan(&Default::default(), &c, engine.label_sets()).unwrap();
                let ask = plan.asks(&c).remove(0);
                (ask.question, ask.labels)
            })
            .collect();
        for warm in [false, true] {
            let (mut r, mut t, mut l, mut first) = (vec![], vec![], vec![], vec![]);
            for rep in 0..reps.max(3) {
                if !warm || rep == 0 {
                    salt += 1;
                }
                // One session per request, as `Engine::decide` makes.
                let session = Session::new();
                let these = if count == 1 {
                    &asks[rep..rep + 1]
                } else {
                    &asks[..count]
                };
                for (i, (q, labels)) in these.iter().enumerate() {
                    let t0 = Instant::now();
                    let messages = renderer.render_in(&session, state, q, labels).unwrap();
                    let t1 = Instant::now();
                    let prompt = model.render_cached(&messages, salt).unwrap();
                    let t2 = Instant::now();
                    model.label_ids_cached(&prompt, labels, salt).unwrap();
                    let t3 = Instant::now();
                    if i == 0 {
                        first.push(us(t2 - t1));
                    } else {
                        r.push(us(t1 - t0));
                        t.push(us(t2 - t1));
                        l.push(us(t3 - t2));
                    }
                    if count == 1 {
                        r.push(us(t1 - t0));
                        t.push(us(t2 - t1));
                        l.push(us(t3 - t2));
                    }
                }
            }
            println!(
                "{name:6} {:4}: render {:7.1}  template+tokens {:7.1} (first question {:8.1})  label ids {:6.1}",
                if warm { "warm" } else { "cold" },
                median(r),
                median(t),
                median(first),
                median(l)
            );
        }
    }

    if run_decide {
        println!("== Engine::decide (median ms of the Server-Timing steps)");
        // Questions `first..first + count` of bench.py's list.
        let request = |state: &str, first: usize, count: usize, salt: u64| DecisionRequest {
            state: state.to_string(),
            questions: (first..first + count)
                .map(|i| {
                    let (plugin, json) = question(i);
                    Question {
                        loc: decide_server::loc!["questions", i],
                        plugin,
                        json,
                    }
                })
                .collect(),
            temperature: None,
            cache_salt: salt,
            readout: Default::default(),
            renderer: None,
            min_option_mass: None,
            timeout: None,
            return_prompt: false,
            scope: Default::default(),
        };
        for (name, state, count, cold, n) in [
            ("single", SHORT_STATE, 1, false, reps),
            ("long1 cold", long.as_str(), 1, true, multi_reps),
            ("multi64 cold", long.as_str(), 64, true, multi_reps),
            ("multi64 warm", long.as_str(), 64, false, multi_reps),
        ] {
            let mut steps: Vec<StepTimes> = Vec::new();
            let mut totals = Vec::new();
            salt += 1;
            engine.decide(&request(state, 0, count, salt))?;
            for rep in 0..n {
                if cold {
                    salt += 1;
                }
                // `single` asks another question each time, as bench.py's `single`.
                let first = if count == 1 { rep + 1 } else { 0 };
                let t = Instant::now();
                let decided = engine.decide(&request(state, first, count, salt))?;
                totals.push(t.elapsed().as_secs_f64() * 1e3);
                steps.push(decided.timings);
            }
            let ms = |f: fn(&StepTimes) -> Duration| {
                median(steps.iter().map(|s| f(s).as_secs_f64() * 1e3).collect())
            };
            println!(
                "{name:13} compile {:6.2}  prepare {:6.2}  model {:8.2}  answer {:6.2}  total {:8.2}",
                ms(|s| s.compile),
                ms(|s| s.prepare),
                ms(|s| s.model),
                ms(|s| s.answer),
                median(totals)
            );
        }
    }
    Ok(())
}

/// The server's allocator (cli/src/main.rs), so these figures are the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
