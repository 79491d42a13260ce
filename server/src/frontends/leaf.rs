//! Leaves: the closed-set fields of a structured answer, each asked as one Jev question.
//!
//! The JSON-Schema format (`/v1/classify`) and the field-schema format (`/v1/fields`) both
//! describe an answer as fields whose values come from a closed set: a boolean, or one of
//! listed JSON values. Each such field is a [`Leaf`]. A leaf is asked as the `systemone-noul`
//! (boolean) or `systemone-choice` (values) question its instructions and values make, so it
//! goes through the one pipeline with every other leaf of the request over the same state (one
//! shared-prefix pass) and gets exactly the probabilities that question gets on
//! `/v1/systemone`. The schema is never repeated per field: a leaf's prompt holds only the
//! request's question and the field's own text.

use serde_json::{json, Map, Value};

use super::json as j;
use crate::error::Loc;
use crate::pipeline::{Answer, Question};

/// One closed-set field of a structured answer.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// Where the field is defined in the request body (errors and refusals point here).
    pub loc: Loc,
    /// What the model is asked: the request's question and the field's path and description.
    pub instructions: String,
    pub values: Values,
}

/// The values a leaf can take.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// `true` or `false`, asked as a yes/no question (`systemone-noul`).
    Boolean,
    /// One of these distinct JSON values, asked as a choice (`systemone-choice`) among their
    /// labels ([`labels`]), in this order.
    Listed(Vec<Value>),
}

/// One candidate of a decided leaf.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub value: Value,
    /// The label the model answers with for it (`A`, `B`, ... under the letters scheme), or
    /// the option's text where the readout has no one label per option (two-stage).
    pub label: String,
    /// Calibrated probability.
    pub probability: f64,
    /// The model's log-probability of the label (over the whole vocabulary; `ln p` of the
    /// combined distribution for combined readouts).
    pub logprob: f64,
}

/// A leaf as the model decided it.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The most probable value.
    pub value: Value,
    pub probability: f64,
    /// `(k * max - 1) / (k - 1)`: 0 for a uniform answer, 1 for a certain one.
    pub confidence: f64,
    /// The true next-token probability mass on the candidates' labels.
    pub candidate_mass: f64,
    /// Every candidate, in the order the request listed them (booleans: `true`, `false`).
    pub candidates: Vec<Candidate>,
}

impl Leaf {
    /// The Jev question this leaf is asked as (the same question asked on `/v1/systemone`
    /// gets the same probabilities).
    pub fn question(&self) -> Question {
        let json = match &self.values {
            Values::Boolean => json!({"type": "noul", "instructions": self.instructions}),
            Values::Listed(values) => {
                let criteria: Map<String, Value> = labels(values)
                    .into_iter()
                    .map(|label| (label, Value::Null))
                    .collect();
                json!({"type": "choice", "instructions": self.instructions, "criteria": criteria})
            }
        };
        let plugin = match self.values {
            Values::Boolean => "systemone-noul",
            Values::Listed(_) => "systemone-choice",
        };
        Question {
            loc: self.loc.clone(),
            plugin: plugin.to_string(),
            json: j::compact(&json),
        }
    }

    /// The leaf's decision from its answer: candidates in the leaf's order, each with its
    /// calibrated probability and its log-probability.
    pub fn decide(&self, answer: &Answer) -> Decision {
        let (values, texts) = match &self.values {
            Values::Boolean => (
                vec![Value::Bool(true), Value::Bool(false)],
                vec!["Yes".to_string(), "No".to_string()],
            ),
            Values::Listed(values) => (values.clone(), labels(values)),
        };
        let keys: Vec<String> = match &self.values {
            Values::Boolean => vec!["true".into(), "false".into()],
            Values::Listed(_) => texts
                .iter()
                .map(|l| Value::from(l.as_str()).to_string())
                .collect(),
        };
        let read_labels = &answer.readout.labels;
        let candidates: Vec<Candidate> = values
            .into_iter()
            .zip(texts)
            .zip(&keys)
            .map(|((value, text), key)| {
                let at = answer.option_keys.iter().position(|k| k == key);
                let label = match at {
                    Some(i) if read_labels.len() == answer.option_keys.len() => {
                        read_labels[i].clone()
                    }
                    _ => text,
                };
                Candidate {
                    value,
                    label,
                    probability: at.map_or(0.0, |i| answer.probabilities[i]),
                    logprob: at.map_or(f64::NEG_INFINITY, |i| f64::from(answer.logprobs[i])),
                }
            })
            .collect();
        let best = candidates
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.probability.total_cmp(&b.1.probability))
            .map_or(0, |(i, _)| i);
        let probabilities: Vec<f64> = candidates.iter().map(|c| c.probability).collect();
        Decision {
            value: candidates[best].value.clone(),
            probability: candidates[best].probability,
            confidence: confidence(&probabilities),
            candidate_mass: f64::from(answer.option_mass),
            candidates,
        }
    }
}

/// What the model is shown for each listed value: a string as itself, anything else as
/// compact JSON; when two values would show the same (`"1"` and `1`) or a string is blank,
/// every value is shown as JSON so each label names one value.
pub fn labels(values: &[Value]) -> Vec<String> {
    let plain: Vec<String> = values
        .iter()
        .map(|value| match value {
            Value::String(text) => text.clone(),
            other => j::compact(other),
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let clash = plain
        .iter()
        .any(|label| label.trim().is_empty() || !seen.insert(label.as_str()));
    if clash {
        values.iter().map(j::compact).collect()
    } else {
        plain
    }
}

/// `(k * max - 1) / (k - 1)` (1 when there is nothing to choose).
pub fn confidence(probabilities: &[f64]) -> f64 {
    let k = probabilities.len() as f64;
    if probabilities.len() < 2 {
        return 1.0;
    }
    let max = probabilities.iter().copied().fold(0.0, f64::max);
    ((k * max - 1.0) / (k - 1.0)).clamp(0.0, 1.0)
}

/// A JSON number for a probability (NaN and infinities, which JSON cannot hold, become null).
pub fn number(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_plain_unless_two_values_would_look_alike() {
        assert_eq!(
            labels(&[json!("low"), json!(2), json!({"a": 1})]),
            ["low", "2", r#"{"a":1}"#]
        );
        assert_eq!(labels(&[json!("1"), json!(1)]), [r#""1""#, "1"]);
        assert_eq!(labels(&[json!(" "), json!("x")]), [r#"" ""#, r#""x""#]);
    }

    #[test]
    fn a_leaf_is_the_jev_question_its_values_make() {
        let leaf = Leaf {
            loc: crate::loc!["schema"],
            instructions: "Which team?".into(),
            values: Values::Listed(vec![json!("billing"), json!(null)]),
        };
        let question = leaf.question();
        assert_eq!(question.plugin, "systemone-choice");
        assert_eq!(
            question.json,
            r#"{"type":"choice","instructions":"Which team?","criteria":{"billing":null,"null":null}}"#
        );
    }

    #[test]
    fn confidence_is_zero_for_uniform_and_one_for_certain() {
        assert_eq!(confidence(&[0.5, 0.5]), 0.0);
        assert_eq!(confidence(&[1.0, 0.0, 0.0]), 1.0);
    }
}
