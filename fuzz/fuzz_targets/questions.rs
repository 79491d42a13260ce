//! The built-in plugins' question types and renderers, natively (`guests/common`): every
//! question type's `compile` and `answer` on arbitrary question JSON and probabilities, and
//! every renderer's `render` on what compiled.
//!
//! Input: question JSON text, optionally followed by a NUL and the state text, optionally
//! followed by a NUL and bytes read as little-endian `f64` probabilities (without them the
//! probabilities are uniform over the options) whose first byte also picks the labels. Seeds
//! are real questions.
//!
//! Asserts, besides no panic:
//! - `answer` refuses a question exactly as `compile` does, and a refused question is the
//!   caller's error (`Invalid`);
//! - a compiled question has 2 to 255 options (score: 2 to 10) with distinct keys that are
//!   JSON texts and non-empty texts, and compiles the same again;
//! - `answer` succeeds on one finite probability per option, with a JSON object, and
//!   otherwise fails as the host's error (`Failure`);
//! - the same question in the other wire format compiles to the same option set (predicate
//!   and noul, OpenAI and Jev choice, OpenAI and Jev score), as `questions.rs` promises;
//! - every renderer refuses a label count other than the option count (`Failure`), and
//!   otherwise ends with a user message showing the state, the question and every label.
#![no_main]

use decide_guest_common::questions::{
    noul, openai_choice, openai_score, predicate, systemone_choice, systemone_score, MAX_CHOICES,
    MAX_LEVELS,
};
use decide_guest_common::render::{self, question_text};
use decide_guest_common::{Compiled, Error, Result};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

type CompileFn = fn(&str) -> Result<Compiled>;
type AnswerFn = fn(&str, &[f64]) -> Result<String>;
type RenderFn = fn(&str, &Compiled, &[String]) -> Result<Vec<(String, String)>>;

/// The built-in question types: (name, compile, answer, most options).
const TYPES: &[(&str, CompileFn, AnswerFn, usize)] = &[
    ("predicate", predicate::compile, predicate::answer, 2),
    ("noul", noul::compile, noul::answer, 2),
    (
        "openai-choice",
        openai_choice::compile,
        openai_choice::answer,
        MAX_CHOICES,
    ),
    (
        "systemone-choice",
        systemone_choice::compile,
        systemone_choice::answer,
        MAX_CHOICES,
    ),
    (
        "openai-score",
        openai_score::compile,
        openai_score::answer,
        MAX_LEVELS,
    ),
    (
        "systemone-score",
        systemone_score::compile,
        systemone_score::answer,
        MAX_LEVELS,
    ),
];

/// The built-in renderers.
const RENDERERS: &[(&str, RenderFn)] = &[
    ("direct-options", render::direct_options),
    ("options-first", render::options_first),
    ("restated", render::restated),
    ("plain-letter", render::plain_letter),
    ("framed", render::framed),
];

fn split_nul(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

fuzz_target!(|data: &[u8]| {
    let (question, rest) = split_nul(data);
    let (state, tail) = split_nul(rest);
    let question = String::from_utf8_lossy(question);
    let state = String::from_utf8_lossy(state);
    let given: Vec<f64> = tail
        .chunks_exact(8)
        .take(MAX_CHOICES + 1)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let label_mode = tail.first().copied().unwrap_or(0);

    for &(name, compile, answer, most) in TYPES {
        let compiled = compile(&question);
        let options = compiled.as_ref().map_or(2, |c| c.options.len());
        let probabilities = if given.is_empty() {
            vec![1.0 / options as f64; options]
        } else {
            given.clone()
        };
        let answered = answer(&question, &probabilities);
        let compiled = match compiled {
            Err(error) => {
                assert!(matches!(error, Error::Invalid(_)), "{name}: {error:?}");
                assert_eq!(answered, Err(error), "{name}: answer refuses otherwise");
                continue;
            }
            Ok(compiled) => compiled,
        };
        check_options(name, &compiled, most);
        assert_eq!(
            compile(&question).as_ref(),
            Ok(&compiled),
            "{name}: not deterministic"
        );
        let fits = probabilities.len() == options && probabilities.iter().all(|p| p.is_finite());
        match answered {
            Ok(text) if fits => match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(_)) => {}
                other => panic!("{name}: answer {text:?} is not a JSON object: {other:?}"),
            },
            Err(Error::Failure(_)) if !fits => {}
            other => panic!("{name}: {probabilities:?} for {options} options: {other:?}"),
        }
        check_equivalent(name, &question, &compiled);
        let labels = labels(label_mode, &compiled, &state);
        for &(renderer, render) in RENDERERS {
            check_render(renderer, render, &state, &compiled, &labels);
        }
    }
});

/// 2 to `most` options with distinct keys (each a JSON text) and non-empty texts.
fn check_options(name: &str, compiled: &Compiled, most: usize) {
    let n = compiled.options.len();
    assert!((2..=most).contains(&n), "{name}: {n} options");
    let mut keys = std::collections::HashSet::new();
    for option in &compiled.options {
        assert!(
            keys.insert(&option.key),
            "{name}: duplicate key {:?}",
            option.key
        );
        assert!(
            serde_json::from_str::<Value>(&option.key).is_ok(),
            "{name}: key {:?} is not JSON",
            option.key
        );
        assert!(!option.text.is_empty(), "{name}: an option without text");
    }
}

/// The question written in the other wire format, where there is one, compiles alike.
fn check_equivalent(name: &str, question: &str, compiled: &Compiled) {
    let Ok(Value::Object(q)) = serde_json::from_str::<Value>(question) else {
        return;
    };
    let Some(Value::String(instructions)) = q.get("instructions") else {
        return;
    };
    let other = match name {
        "predicate" => {
            noul::compile(&json!({"type": "noul", "instructions": instructions}).to_string())
        }
        "openai-choice" => {
            let mut criteria = serde_json::Map::new();
            for choice in q["choices"].as_array().expect("compiled") {
                let Value::String(value) = &choice["value"] else {
                    return;
                };
                criteria.insert(
                    value.clone(),
                    choice.get("description").cloned().unwrap_or(Value::Null),
                );
            }
            systemone_choice::compile(
                &json!({"type": "choice", "instructions": instructions, "criteria": criteria})
                    .to_string(),
            )
        }
        "openai-score" => {
            let mut criteria = Vec::new();
            for level in q["levels"].as_array().expect("compiled") {
                if level.get("description").is_some_and(|d| !d.is_null()) {
                    return;
                }
                criteria.push(level["label"].clone());
            }
            systemone_score::compile(
                &json!({"type": "score", "instructions": instructions, "criteria": criteria})
                    .to_string(),
            )
        }
        _ => return,
    };
    assert_eq!(
        other.as_ref(),
        Ok(compiled),
        "{name}: the other wire format compiles otherwise"
    );
}

/// Labels for the options, by `mode`: letters, digits, the option texts, pieces of the
/// state, or one label too few or too many.
fn labels(mode: u8, compiled: &Compiled, state: &str) -> Vec<String> {
    let n = compiled.options.len();
    let letters = |n: usize| -> Vec<String> {
        (0..n)
            .map(|i| {
                let letter = char::from(b'A' + (i % 26) as u8);
                if i < 26 {
                    letter.to_string()
                } else {
                    format!("{letter}{}", i / 26)
                }
            })
            .collect()
    };
    match mode % 6 {
        0 => letters(n),
        1 => (1..=n).map(|i| i.to_string()).collect(),
        2 => compiled.options.iter().map(|o| o.text.clone()).collect(),
        3 => {
            let mut pieces: Vec<String> = state.split('\u{1}').map(str::to_string).collect();
            pieces.resize(n, "X".into());
            pieces
        }
        4 => letters(n - 1),
        _ => letters(n + 1),
    }
}

/// A renderer's messages: refused for a label count other than the option count, else
/// system or user messages ending with a user message that shows the state, the question
/// and every label.
fn check_render(name: &str, render: RenderFn, state: &str, compiled: &Compiled, labels: &[String]) {
    let rendered = render(state, compiled, labels);
    if labels.len() != compiled.options.len() {
        assert!(
            matches!(rendered, Err(Error::Failure(_))),
            "{name}: {rendered:?}"
        );
        return;
    }
    let messages = rendered.unwrap_or_else(|e| panic!("{name}: {e:?}"));
    for (role, _) in &messages {
        assert!(role == "system" || role == "user", "{name}: role {role:?}");
    }
    let Some((role, last)) = messages.last() else {
        panic!("{name}: no messages")
    };
    assert_eq!(role, "user", "{name}: the last message is not the user's");
    assert!(last.contains(state), "{name}: the state is not shown");
    assert!(
        last.contains(question_text(compiled)),
        "{name}: the question is not shown"
    );
    for label in labels {
        assert!(
            last.contains(label.as_str()),
            "{name}: label {label:?} is not shown"
        );
    }
}
