//! An answer's audit block: how it was read (readout, renderer, label scheme, who chose the
//! setup), its option mass and calibration, and its calibrated distribution by option.
//!
//! OpenAI's `extra.audit` and the MCP tools' structured answers carry the same block, so it is
//! built here once from the pipeline's [`Answer`].

use serde_json::{json, Map, Value};

use crate::pipeline::Answer;

/// The audit block of an answer; `full` adds the two-stage readout's stage-1 yes-share of
/// every option (OpenAI's `detail: full`).
pub fn of_answer(answer: &Answer, full: bool) -> Map<String, Value> {
    let mut audit = Map::new();
    for (key, value) in [
        ("calibration_temperature", json!(answer.temperature)),
        (
            "temperature_source",
            json!(answer.temperature_source.as_str()),
        ),
        ("option_mass", json!(answer.option_mass)),
        ("min_option_mass", json!(answer.min_option_mass)),
        ("input_tokens", json!(answer.input_tokens)),
        ("cached_input_tokens", json!(answer.cached_tokens)),
        ("readout", json!(answer.readout.readout)),
        ("renderer", json!(answer.rendering.renderer)),
        ("label_scheme", json!(answer.rendering.labels.as_str())),
        ("setup_source", json!(answer.rendering.source.as_str())),
    ] {
        audit.insert(key.into(), value);
    }
    readout_audit(answer, full, &mut audit);
    audit
}

/// The calibrated probabilities of an answer by option id, in option order.
pub fn probabilities(answer: &Answer) -> Map<String, Value> {
    answer
        .option_keys
        .iter()
        .zip(&answer.probabilities)
        .map(|(key, p)| (option_id(key), json!(p)))
        .collect()
}

/// The readout's own audit fields: the two-stage shortlist (and, when `full`, every option's
/// stage-1 yes-share), the permutation shifts and each shift's top option.
fn readout_audit(answer: &Answer, full: bool, audit: &mut Map<String, Value>) {
    let id = |i: usize| option_id(&answer.option_keys[i]);
    let r = &answer.readout;
    if let Some(shortlist) = &r.shortlist {
        let ids: Vec<String> = shortlist.iter().map(|&i| id(i)).collect();
        audit.insert("shortlist".into(), json!(ids));
    }
    if let (Some(stage1), true) = (&r.stage1, full) {
        let scores: Map<String, Value> = stage1
            .iter()
            .enumerate()
            .map(|(i, s)| (id(i), json!(s)))
            .collect();
        audit.insert("stage1".into(), Value::Object(scores));
    }
    if let (Some(shifts), Some(tops)) = (&r.shifts, &r.shift_top) {
        let tops: Vec<String> = tops.iter().map(|&i| id(i)).collect();
        audit.insert("permutation_shifts".into(), json!(shifts));
        audit.insert("permutation_top".into(), json!(tops));
    }
}

/// An option key (JSON text) as an object key: strings unquoted, other values as written.
pub fn option_id(key: &str) -> String {
    match serde_json::from_str::<Value>(key) {
        Ok(Value::String(text)) => text,
        _ => key.to_string(),
    }
}
