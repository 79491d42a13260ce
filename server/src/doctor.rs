//! `decide doctor --model FILE`: checks a model without serving.
//!
//! Loads the model and plugins exactly as `serve` does, then prints what decides whether the
//! model can serve decisions: its architecture, how its chat template ends (the answer slot),
//! which readouts fit and their capacities, and the answer-slot self-check. Exits 0 when the
//! model can serve, 1 with the reason when it cannot (unsupported architecture, no chat
//! template, a failed self-check).

use std::sync::Arc;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::pipeline::Engine;
use crate::readout;
use crate::server;

/// Characters of the rendered prompt's end shown as the template ending.
const ENDING_CHARS: usize = 40;

/// Runs the checks, prints the report to stdout and returns the process exit code.
pub fn run(config: &Config) -> i32 {
    println!("model file: {}", config.model.display());
    let progress = crate::progress::Reporter::cli(config.progress_every_s);
    let loaded = server::load_engine(config, Arc::new(Metrics::default()), &progress, &|step| {
        tracing::info!("{step}")
    });
    let (mut engine, _) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return verdict(Err(format!("{error:#}"))),
    };
    let info = engine.model().info().clone();
    println!(
        "model: {} (arch {}, {} layers, vocabulary {}, context {})",
        info.name, info.arch, info.n_layers, info.vocab_size, info.context_length
    );
    match template_ending(&engine) {
        Ok(ending) => println!("template ending: {ending}"),
        Err(why) => return verdict(Err(why)),
    }
    let report = engine.run_self_check(config.self_check_min_mass, &progress);
    if !engine.model().answer_suffix().is_empty() {
        println!(
            "template ending with the self-check's answer suffix: {}",
            template_ending(&engine).unwrap_or_default()
        );
    }
    print_readouts(&engine, config.max_options);
    println!("{}", report.summary());
    if report.passed() {
        verdict(Ok(()))
    } else {
        verdict(Err(report.summary()))
    }
}

/// The last characters of a rendered prompt, escaped.
fn template_ending(engine: &Engine) -> Result<String, String> {
    let prompt = engine
        .model()
        .render(&readout::labels::probe_messages())
        .map_err(|error| error.to_string())?;
    let chars: Vec<char> = prompt.text.chars().collect();
    let tail: String = chars[chars.len().saturating_sub(ENDING_CHARS)..]
        .iter()
        .collect();
    Ok(format!("{tail:?} ({} prompt tokens)", prompt.tokens.len()))
}

/// Capacities, and which readout `auto` picks for a few option counts.
fn print_readouts(engine: &Engine, max_options: usize) {
    let sets = engine.label_sets();
    println!("readouts: {}", sets.summary());
    let mut counts = vec![2, 26, 27, 100, 255, max_options];
    counts.sort_unstable();
    counts.dedup();
    let picks: Vec<String> = counts
        .iter()
        .map(
            |&n| match readout::plan(&readout::Options::default(), &numbered_question(n), sets) {
                Ok(plan) => format!("{n} options -> {}", plan.name()),
                Err(why) => format!("{n} options -> refused ({why})"),
            },
        )
        .collect();
    println!("auto picks: {}", picks.join(", "));
    if let Some(last) = sets.wide.last() {
        println!(
            "wide labels: {} .. {last}",
            sets.wide[..sets.wide.len().min(28)].join(" ")
        );
    }
}

/// A question of `n` options named `option 1`.. (what `auto` picks depends on the count only).
fn numbered_question(n: usize) -> crate::plugins::CompiledQuestion {
    crate::plugins::CompiledQuestion {
        instructions: None,
        options: (1..=n)
            .map(|i| crate::plugins::OptionDef {
                key: i.to_string(),
                text: format!("option {i}"),
                description: None,
            })
            .collect(),
    }
}

fn verdict(result: Result<(), String>) -> i32 {
    match result {
        Ok(()) => {
            println!("verdict: ok, this model can serve decisions");
            0
        }
        Err(why) => {
            println!("verdict: cannot serve decisions: {why}");
            1
        }
    }
}
