//! The prompts a request asked back (`extra.return_prompt` on OpenAI's format, `return_prompt`
//! on the Jev formats), on the wire. Every format writes a question's prompts as the same
//! object, `{reads: [{text, token_ids, prefix_tokens, cached_tokens, labels,
//! label_token_ids}]}` (see [`crate::pipeline::QuestionPrompts`]); each places it where it
//! puts a question's extras:
//! OpenAI's in the answer's `extra.prompt`, the Jev formats in a top-level `prompts` object
//! keyed the way that format keys its questions.

use serde_json::{json, Map, Value};

use crate::pipeline::{Outcome, QuestionPrompts};

/// The wire object of one question's prompts.
pub fn to_json(prompt: &QuestionPrompts) -> Value {
    let reads: Vec<Value> = prompt
        .reads
        .iter()
        .map(|read| {
            json!({
                "text": read.text,
                "token_ids": read.token_ids,
                "prefix_tokens": read.prefix_tokens,
                "cached_tokens": read.cached_tokens,
                "labels": read.labels,
                "label_token_ids": read.label_token_ids,
            })
        })
        .collect();
    json!({ "reads": reads })
}

/// `{key: prompts}` for each outcome that carries prompts, `keys` naming the outcomes in
/// order (question ids, field names, schema pointers); `None` when none carries any (the
/// request did not ask).
pub fn by_key<'k>(outcomes: &[Outcome], keys: impl IntoIterator<Item = &'k str>) -> Option<Value> {
    let map: Map<String, Value> = keys
        .into_iter()
        .zip(outcomes)
        .filter_map(|(key, outcome)| Some((key.to_string(), to_json(outcome.prompt()?))))
        .collect();
    (!map.is_empty()).then_some(Value::Object(map))
}
