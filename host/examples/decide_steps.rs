//! The `Server-Timing` steps (compile, prepare, model, answer) of whole requests through
//! `Engine::decide`, medians over REPS requests, with bench.py's states and questions:
//!
//!     cargo run --release -p decide --example decide_steps -- .models/smol.gguf WORDS COUNT REPS
//!
//! WORDS 0 is bench.py's short `single` state, else `long_state(WORDS)`. COUNT 1 asks another
//! question in each request as one tenant (bench.py `single`); more asks questions 0..COUNT as
//! a new tenant each time (cold token and prefix caches, bench.py `multi`). The answers are
//! calibrated as on a calibrated server (T = 1, no per-request calibration call). It uses only
//! `Engine` APIs that older versions have, so the same file measures a checkout before a
//! change. On CPU the model step dominates; run it where nothing else competes for the cores.
use std::time::Duration;

use clap::Parser;
use decide::calibration::CalibrationState;
use decide::config::{Cli, Command};
use decide::pipeline::{DecisionRequest, Question, StepTimes, TemperatureSource};

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

fn long_state(words: usize) -> String {
    let (mut lines, mut count, mut i) = (Vec::new(), 0, 0);
    while count < words {
        let topic = TOPICS[i % 8];
        let line = format!("Entry {i}: customer {} wrote about {topic}; the agent replied that the {topic} team would follow up within {} days and logged reference {}.", i * 7 % 1000, i % 5 + 1, i * 31 % 9973);
        count += line.split_whitespace().count();
        lines.push(line);
        i += 1;
    }
    lines.join("\n")
}

fn question(i: usize) -> (String, String) {
    let topic = TOPICS[i % 8];
    match i % 3 {
        0 => ("openai-predicate".into(), serde_json::json!({"type": "predicate", "instructions": format!("The log mentions {topic} issue number {i}.")}).to_string()),
        1 => ("openai-choice".into(), serde_json::json!({"type": "choice", "instructions": format!("Which team handles question {i}?"), "choices": TOPICS[..4].iter().map(|t| serde_json::json!({"value": t})).collect::<Vec<_>>()}).to_string()),
        _ => ("openai-score".into(), serde_json::json!({"type": "score", "instructions": format!("How urgent is item {i}?"), "levels": [{"label": "low"}, {"label": "medium"}, {"label": "high"}]}).to_string()),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let (words, count, reps): (usize, usize, usize) = (a[2].parse()?, a[3].parse()?, a[4].parse()?);
    let Command::Serve(config) = Cli::parse_from(["decide", "serve", "--model", &a[1]]).command
    else {
        unreachable!()
    };
    let (mut engine, _) = decide::server::load_engine(
        &config,
        std::sync::Arc::new(decide::metrics::Metrics::default()),
        &|_| {},
    )?;
    let sha = engine
        .plugins()
        .calibration("temperature")
        .unwrap()
        .sha256()
        .to_string();
    engine.set_calibration(CalibrationState {
        policy: "temperature".into(),
        plugin_sha256: sha,
        params: vec![1.0],
        temperature: 1.0,
        source: TemperatureSource::Calibrated,
    });
    let state = if words == 0 {
        "I was charged twice for my subscription this month. Please refund the extra charge."
            .to_string()
    } else {
        long_state(words)
    };
    let request = |first: usize, salt: u64| DecisionRequest {
        state: state.clone(),
        questions: (first..first + count)
            .map(|i| {
                let (plugin, json) = question(i);
                Question {
                    loc: decide::loc!["questions", i],
                    plugin,
                    json,
                }
            })
            .collect(),
        temperature: None,
        cache_salt: salt,
        readout: Default::default(),
    };
    engine.decide(&request(0, 1))?;
    let mut steps: Vec<StepTimes> = Vec::new();
    for rep in 0..reps {
        // single (count 1): the same tenant, another question each time; several: a new tenant (cold).
        let (first, salt) = if count == 1 {
            (rep + 1, 1)
        } else {
            (0, 100 + rep as u64)
        };
        steps.push(engine.decide(&request(first, salt))?.timings);
    }
    let ms = |f: fn(&StepTimes) -> Duration| {
        median(steps.iter().map(|s| f(s).as_secs_f64() * 1e3).collect())
    };
    println!("words {words} questions {count} reps {reps}: compile {:.3}  prepare {:.3}  model {:.1}  answer {:.3}  (ms, medians)", ms(|s| s.compile), ms(|s| s.prepare), ms(|s| s.model), ms(|s| s.answer));
    Ok(())
}
