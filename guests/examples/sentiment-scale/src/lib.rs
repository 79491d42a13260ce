//! `openai-sentiment`: an example of a question type a team writes for its own use.
//!
//! Question (on `/v1/decisions`): `{"type": "sentiment", "aspect"?: "delivery",
//! "levels"?: 3 | 5 | 7, "instructions"?: "..."}`. The plugin names a closed option set (the
//! scale's levels, from most negative to most positive); the server reads the model's
//! probability of each level and hands them back to `answer`, which returns this type's own
//! fields: `sentiment` (the most likely level), `score` (the expected value on a scale from
//! -1 to 1), `confidence` (the most likely level's probability) and `distribution` (each
//! level's probability).
//!
//! It depends only on the contract in `wit/` and on `serde_json`: nothing of decide's own.

wit_bindgen::generate!({ path: "../../../wit", world: "question-type-plugin" });

use decide::plugin::types::{CompiledQuestion, OptionDef, PluginError, PluginInfo};
use exports::decide::plugin::question_type::Guest;
use serde_json::{json, Map, Value};

/// The levels of each scale size: (answer key, text shown to the model).
fn scale(levels: u64) -> &'static [(&'static str, &'static str)] {
    match levels {
        3 => &[
            ("negative", "Negative"),
            ("neutral", "Neutral"),
            ("positive", "Positive"),
        ],
        7 => &[
            ("very_negative", "Very negative"),
            ("negative", "Negative"),
            ("slightly_negative", "Slightly negative"),
            ("neutral", "Neutral"),
            ("slightly_positive", "Slightly positive"),
            ("positive", "Positive"),
            ("very_positive", "Very positive"),
        ],
        _ => &[
            ("very_negative", "Very negative"),
            ("negative", "Negative"),
            ("neutral", "Neutral"),
            ("positive", "Positive"),
            ("very_positive", "Very positive"),
        ],
    }
}

/// Longest `aspect` or `instructions` accepted.
const MAX_TEXT: usize = 4000;

/// A validated question.
struct Question {
    instructions: String,
    levels: &'static [(&'static str, &'static str)],
}

fn invalid(message: String) -> PluginError {
    PluginError::InvalidQuestion(message)
}

fn text_field(map: &Map<String, Value>, field: &str) -> Result<Option<String>, PluginError> {
    match map.get(field) {
        None => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Err(invalid(format!(
            "{field}: must not be empty; omit it instead"
        ))),
        Some(Value::String(s)) if s.len() > MAX_TEXT => Err(invalid(format!(
            "{field}: {} bytes, over the limit of {MAX_TEXT}",
            s.len()
        ))),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(_) => Err(invalid(format!("{field}: must be a string"))),
    }
}

fn parse(question: &str) -> Result<Question, PluginError> {
    let value: Value = serde_json::from_str(question)
        .map_err(|e| invalid(format!("the question is not valid JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(invalid("the question must be a JSON object".into()));
    };
    for key in map.keys() {
        if !["type", "aspect", "levels", "instructions"].contains(&key.as_str()) {
            return Err(invalid(format!(
                "{key}: unknown field; a sentiment question has type, aspect, levels and instructions"
            )));
        }
    }
    let levels = match map.get("levels") {
        None => 5,
        Some(Value::Number(n)) if matches!(n.as_u64(), Some(3 | 5 | 7)) => n.as_u64().unwrap_or(5),
        Some(other) => {
            return Err(invalid(format!("levels: must be 3, 5 or 7, got {other}")));
        }
    };
    let aspect = text_field(&map, "aspect")?;
    let instructions = match (text_field(&map, "instructions")?, aspect) {
        (Some(instructions), _) => instructions,
        (None, Some(aspect)) => {
            format!("What is the sentiment the input expresses about {aspect}?")
        }
        (None, None) => "What is the overall sentiment of the input?".to_string(),
    };
    Ok(Question {
        instructions,
        levels: scale(levels),
    })
}

struct Plugin;

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "openai-sentiment".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "A sentiment scale (3, 5 or 7 levels) about an optional aspect; answers sentiment, score in [-1, 1], confidence, distribution.".into(),
        }
    }

    fn example() -> String {
        r#"{"type":"sentiment","aspect":"the delivery","levels":5}"#.into()
    }

    fn compile(question: String) -> Result<CompiledQuestion, PluginError> {
        let q = parse(&question)?;
        Ok(CompiledQuestion {
            instructions: Some(q.instructions),
            options: q
                .levels
                .iter()
                .map(|(key, text)| OptionDef {
                    // Keys are JSON values as text.
                    key: Value::from(*key).to_string(),
                    text: (*text).to_string(),
                    description: None,
                })
                .collect(),
        })
    }

    fn answer(question: String, probabilities: Vec<f64>) -> Result<String, PluginError> {
        let q = parse(&question)?;
        if probabilities.len() != q.levels.len() {
            return Err(PluginError::Failure(format!(
                "got {} probabilities for {} levels",
                probabilities.len(),
                q.levels.len()
            )));
        }
        let n = q.levels.len();
        let (mut top, mut score) = (0, 0.0);
        let mut distribution = Map::new();
        for (i, ((key, _), p)) in q.levels.iter().zip(&probabilities).enumerate() {
            if *p > probabilities[top] {
                top = i;
            }
            // Level i of n sits at -1 + 2i/(n-1) on the scale.
            score += p * (-1.0 + 2.0 * i as f64 / (n - 1) as f64);
            distribution.insert((*key).to_string(), json!(p));
        }
        Ok(json!({
            "sentiment": q.levels[top].0,
            "score": score,
            "confidence": probabilities[top],
            "distribution": distribution,
        })
        .to_string())
    }
}

export!(Plugin);
