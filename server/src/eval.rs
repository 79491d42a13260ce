//! `decide eval`: readouts measured on a labelled question file.
//!
//! Every question of the file (the calibration JSONL format, see
//! [`crate::calibration::questions`]) is asked through the real pipeline once per readout
//! (questions about one state in one request, so they share its prefix), uncalibrated
//! (T = 1, so the top answer is the model's). It prints accuracy per readout, how often two
//! readouts agree on the top answer, and with `--permute K` the label-order bias: each question
//! re-asked under K cyclic option orders in one batched read, how often the top answer changes,
//! the accuracy under each order, and the accuracy of the averaged distribution (the
//! `permutation` readout). `--answers FILE` writes every question's answer as JSON lines, to
//! compare two runs (two formats of one model, say) question by question.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};

use crate::calibration::questions::{expected_index, LabelledQuestion, QuestionSet};
use crate::config::EvalArgs;
use crate::pipeline::{DecisionRequest, Engine, Outcome, Question};
use crate::progress::Reporter;
use crate::readout::{self, permutation::argmax, Choice, Detail};
use crate::server;

/// One question's outcome under one readout, or why it was not answered.
type Asked = Result<Answered, String>;

/// What a readout answered to one question.
struct Answered {
    /// The most probable option.
    top: usize,
    option_mass: f32,
    detail: Detail,
    probabilities: Vec<f64>,
}

/// Runs the evaluation, prints the figures and writes the JSON report when asked.
pub fn run(args: &EvalArgs) -> anyhow::Result<()> {
    let config = &args.config;
    let (engine, served, progress) = server::load_for_cli(config)?;
    let mut set = QuestionSet::read(&args.questions).map_err(anyhow::Error::msg)?;
    if args.limit > 0 && args.limit < set.questions.len() {
        // An evenly spaced subset, so a short run still covers every part of the file.
        let n = set.questions.len();
        set.questions = (0..args.limit)
            .map(|i| set.questions[i * n / args.limit].clone())
            .collect();
    }
    let expected = expected_indices(&engine, &set.questions)?;
    let choices = parse_readouts(&args.readouts)?;
    println!(
        "model {served}: {} questions from {} ({}); readouts: {}",
        set.questions.len(),
        set.origin,
        option_counts(&engine, &set.questions),
        engine.label_sets().summary()
    );

    let mut report = serde_json::Map::new();
    let mut results: Vec<(Choice, Vec<Asked>)> = Vec::new();
    for &choice in &choices {
        let options = readout::Options {
            choice,
            shortlist: args.shortlist,
            ..readout::Options::default()
        };
        let started = Instant::now();
        let asked = ask_all(&engine, &set.questions, options, &progress);
        let seconds = started.elapsed().as_secs_f64();
        let figures = accuracy(&asked, &expected);
        println!(
            "readout {}: accuracy {:.3} ({} of {} answered), refused {}, mean option mass {:.3}, {seconds:.1} s",
            choice.as_str(),
            figures.accuracy,
            figures.correct,
            figures.answered,
            figures.refused,
            figures.mean_mass
        );
        report.insert(
            choice.as_str().into(),
            json!({"accuracy": figures.accuracy, "correct": figures.correct, "answered": figures.answered,
                   "refused": figures.refused, "mean_option_mass": figures.mean_mass, "seconds": seconds,
                   "picked": picked(&asked)}),
        );
        results.push((choice, asked));
    }
    let mut agreement = serde_json::Map::new();
    for (i, (a, asked_a)) in results.iter().enumerate() {
        for (b, asked_b) in &results[i + 1..] {
            let (same, both) = agree(asked_a, asked_b);
            let rate = ratio(same, both);
            println!(
                "agreement {} vs {}: {rate:.3} ({same} of {both} questions answered by both)",
                a.as_str(),
                b.as_str()
            );
            agreement.insert(
                format!("{} vs {}", a.as_str(), b.as_str()),
                json!({"rate": rate, "same": same, "both": both}),
            );
        }
    }
    report.insert("agreement".into(), Value::Object(agreement));
    if args.permute > 0 {
        let (figures, asked) = permute(&engine, &set.questions, &expected, args.permute, &progress);
        report.insert("permute".into(), figures);
        results.push((Choice::Permutation, asked));
    }
    if let Some(path) = &args.answers {
        write_answers(path, &set.questions, &expected, &results)?;
        println!("answers written to {}", path.display());
    }
    if let Some(path) = &args.report {
        let body = json!({"model": served, "questions": set.origin, "count": set.questions.len(),
                          "readouts": engine.label_sets().summary(), "results": report});
        std::fs::write(path, serde_json::to_string_pretty(&body)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// `--permute K`: the `permutation` readout with K shifts, its per-shift top answers.
fn permute(
    engine: &Engine,
    questions: &[LabelledQuestion],
    expected: &[usize],
    k: usize,
    progress: &Reporter,
) -> (Value, Vec<Asked>) {
    let options = readout::Options {
        choice: Choice::Permutation,
        permutations: k,
        ..readout::Options::default()
    };
    let started = Instant::now();
    let asked = ask_all(engine, questions, options, progress);
    let seconds = started.elapsed().as_secs_f64();
    let mut flips = 0;
    let mut answered = 0;
    let mut per_order: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    for (result, &want) in asked.iter().zip(expected) {
        let Ok(Answered { detail, .. }) = result else {
            continue;
        };
        let tops = detail.shift_top.clone().unwrap_or_default();
        answered += 1;
        if tops.iter().any(|&t| t != tops[0]) {
            flips += 1;
        }
        for (order, &top) in tops.iter().enumerate() {
            let entry = per_order.entry(order).or_default();
            entry.1 += 1;
            if top == want {
                entry.0 += 1;
            }
        }
    }
    let averaged = accuracy(&asked, expected);
    let orders: Vec<f64> = per_order.values().map(|&(c, n)| ratio(c, n)).collect();
    let flip_rate = ratio(flips, answered);
    println!(
        "permute {k}: top answer changes under some order for {flips} of {answered} questions (flip rate {flip_rate:.3}); \
         accuracy per order {}; accuracy of the averaged distribution (readout permutation) {:.3}; {seconds:.1} s",
        orders.iter().map(|a| format!("{a:.3}")).collect::<Vec<_>>().join(", "),
        averaged.accuracy
    );
    let figures = json!({"k": k, "answered": answered, "flips": flips, "flip_rate": flip_rate,
           "accuracy_per_order": orders, "accuracy_averaged": averaged.accuracy, "seconds": seconds});
    (figures, asked)
}

/// `--answers`: one JSON line per question and readout (`permutation` with `--permute`).
fn write_answers(
    path: &std::path::Path,
    questions: &[LabelledQuestion],
    expected: &[usize],
    results: &[(Choice, Vec<Asked>)],
) -> anyhow::Result<()> {
    let mut lines = String::new();
    for (choice, asked) in results {
        for ((q, &want), result) in questions.iter().zip(expected).zip(asked) {
            let line = match result {
                Ok(a) => json!({
                    "readout": choice.as_str(), "id": q.id, "expected": want, "top": a.top,
                    "option_mass": a.option_mass, "read": a.detail.readout,
                    "shift_top": a.detail.shift_top, "probabilities": a.probabilities}),
                Err(why) => json!({"readout": choice.as_str(), "id": q.id, "expected": want,
                                   "refused": why}),
            };
            lines += &(line.to_string() + "\n");
        }
    }
    std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))
}

/// Asks every question with `options`; questions about one state share a request.
fn ask_all(
    engine: &Engine,
    questions: &[LabelledQuestion],
    options: readout::Options,
    progress: &Reporter,
) -> Vec<Asked> {
    let task = progress.start("evaluating", "questions", questions.len() as u64);
    task.set_detail(format!("readout {}", options.choice.as_str()));
    let mut by_state: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, q) in questions.iter().enumerate() {
        by_state.entry(q.state.as_str()).or_default().push(i);
    }
    let mut out: Vec<Asked> = questions.iter().map(|_| Err("not asked".into())).collect();
    for (state, indices) in by_state {
        let request = DecisionRequest {
            state: state.to_string(),
            questions: indices
                .iter()
                .map(|&i| Question {
                    loc: crate::loc![questions[i].id.clone()],
                    plugin: questions[i].plugin.clone(),
                    json: questions[i].json.clone(),
                })
                .collect(),
            temperature: Some(1.0),
            // Each evaluated readout reads cold: no prefix cached by an earlier readout.
            cache_salt: crate::prefix_cache::tenant_salt(&["decide-eval", &format!("{options:?}")]),
            readout: options,
            renderer: None,
            // Evaluation measures every answer; abstaining would hide the ones it scores.
            min_option_mass: Some(0.0),
            timeout: None,
            return_prompt: false,
            scope: Default::default(),
        };
        let answered = engine.decide(&request);
        task.advance(indices.len() as u64);
        match answered {
            Ok(decided) => {
                for (&i, outcome) in indices.iter().zip(decided.outcomes) {
                    out[i] = match outcome {
                        Outcome::Answer(answer) => Ok(Answered {
                            top: argmax(&answer.probabilities),
                            option_mass: answer.option_mass,
                            detail: answer.readout,
                            probabilities: answer.probabilities,
                        }),
                        Outcome::Refusal(refusal) => Err(refusal.message),
                    };
                }
            }
            Err(error) => {
                for &i in &indices {
                    out[i] = Err(error.to_string());
                }
            }
        }
    }
    out
}

/// The expected option index of each question, from its compiled options.
fn expected_indices(engine: &Engine, questions: &[LabelledQuestion]) -> anyhow::Result<Vec<usize>> {
    questions
        .iter()
        .map(|q| {
            let plugin = engine
                .plugins()
                .question_type(&q.plugin)
                .with_context(|| format!("{}: no question-type plugin `{}`", q.id, q.plugin))?;
            let compiled = plugin
                .compile(&q.json)
                .map_err(|e| anyhow::anyhow!("{}: {e:?}", q.id))?;
            expected_index(&compiled.options, &q.expected).with_context(|| {
                format!(
                    "{}: expected {} is not one of its options",
                    q.id, q.expected
                )
            })
        })
        .collect()
}

/// "options 30-255, mean 84": the spread of option counts.
fn option_counts(engine: &Engine, questions: &[LabelledQuestion]) -> String {
    let counts: Vec<usize> = questions
        .iter()
        .filter_map(|q| {
            let plugin = engine.plugins().question_type(&q.plugin)?;
            plugin.compile(&q.json).ok().map(|c| c.options.len())
        })
        .collect();
    let (min, max) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    let mean = counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
    format!("options {min}-{max}, mean {mean:.0}")
}

fn parse_readouts(list: &str) -> anyhow::Result<Vec<Choice>> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|name| match Choice::parse(name) {
            Some(Choice::Permutation) => {
                anyhow::bail!("--readouts: use --permute K for the permutation readout")
            }
            Some(choice) => Ok(choice),
            None => anyhow::bail!(
                "--readouts: `{name}` is not a readout; use {}",
                Choice::NAMES.join(", ")
            ),
        })
        .collect()
}

struct Figures {
    accuracy: f64,
    correct: usize,
    answered: usize,
    refused: usize,
    mean_mass: f64,
}

fn accuracy(asked: &[Asked], expected: &[usize]) -> Figures {
    let (mut correct, mut answered, mut mass) = (0, 0, 0.0);
    for (result, &want) in asked.iter().zip(expected) {
        if let Ok(Answered {
            top, option_mass, ..
        }) = result
        {
            answered += 1;
            mass += f64::from(*option_mass);
            if *top == want {
                correct += 1;
            }
        }
    }
    Figures {
        accuracy: ratio(correct, answered),
        correct,
        answered,
        refused: asked.len() - answered,
        mean_mass: mass / answered.max(1) as f64,
    }
}

/// Which readout each answered question was read with (auto's picks), counted.
fn picked(asked: &[Asked]) -> Value {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for Answered { detail, .. } in asked.iter().flatten() {
        *counts.entry(detail.readout).or_default() += 1;
    }
    json!(counts)
}

fn agree(a: &[Asked], b: &[Asked]) -> (usize, usize) {
    let mut same = 0;
    let mut both = 0;
    for (x, y) in a.iter().zip(b) {
        if let (Ok(x), Ok(y)) = (x, y) {
            both += 1;
            if x.top == y.top {
                same += 1;
            }
        }
    }
    (same, both)
}

fn ratio(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}
