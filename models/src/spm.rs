//! Gemma's SentencePiece vocabulary from GGUF metadata (`tokenizer.ggml.model = llama` in a
//! `gemma*` file), as a `tokenizers` pipeline: the same one transformers builds when it loads
//! the same GGUF (`gemma_tokenizer` in its `gguf_tokenizer_mapping.py`), so the ids agree with
//! transformers' for the file.
//!
//! The file has tokens, scores and token types but no merges. Following transformers: tokens
//! that are runs of spaces are spelled with `▁` (the pipeline replaces spaces by `▁` before
//! BPE); merges are every split of a token into two tokens, ranked by the merged token's
//! position in the file (Gemma's scores do not follow its merge order), then by the pieces'
//! lengths; control tokens (type 3) become special added tokens, user-defined ones (type 4)
//! plain added tokens. Byte fallback covers bytes without a token.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::error::{ModelError, Result};
use crate::gguf::Gguf;

const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// A `tokenizer.json` document for the file's vocabulary.
pub(crate) fn gemma_tokenizer_json(g: &Gguf) -> Result<String> {
    let tokens = g.str_array("tokenizer.ggml.tokens")?;
    let types = g
        .int_array_opt("tokenizer.ggml.token_type")?
        .unwrap_or_default();
    let unk = g
        .usize_opt("tokenizer.ggml.unknown_token_id")
        .and_then(|i| tokens.get(i))
        .cloned()
        .ok_or_else(|| {
            ModelError::Tokenizer(format!(
                "{}: a SentencePiece vocabulary needs tokenizer.ggml.unknown_token_id",
                g.path.display()
            ))
        })?;
    let respelled: Vec<String> = tokens
        .iter()
        .map(|t| {
            if t.contains(' ') && t.trim().is_empty() {
                "\u{2581}".repeat(t.chars().count())
            } else {
                t.clone()
            }
        })
        .collect();
    // token -> id, the last of duplicates winning (a Python dict built in file order).
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(respelled.len());
    for (i, t) in respelled.iter().enumerate() {
        ids.insert(t.as_str(), i);
    }
    let merges = merges(&respelled, &ids);

    let mut vocab = Map::with_capacity(respelled.len());
    for (i, t) in respelled.iter().enumerate() {
        vocab.insert(t.clone(), json!(i));
    }
    let added: Vec<Value> = tokens
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let ty = types.get(i).copied()?;
            let special = ty == TOKEN_TYPE_CONTROL;
            // A user-defined token added only under its own spelling (not a respelled run).
            let user = ty == TOKEN_TYPE_USER_DEFINED && ids.contains_key(t.as_str());
            (special || user).then(|| {
                json!({"id": i, "content": t, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": special})
            })
        })
        .collect();
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": false},
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"}
        ]},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": unk,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": Value::Object(vocab),
            "merges": merges.into_iter().map(|(l, r)| json!([l, r])).collect::<Vec<_>>(),
        }
    });
    Ok(doc.to_string())
}

/// transformers' `generate_merges(vocab, positions)`: per token (first occurrence order,
/// ranked by minus its last position), every split into two tokens, sorted by the pieces'
/// ids; then all of them stably sorted best first by (rank, left length, right length).
fn merges<'a>(tokens: &'a [String], ids: &HashMap<&str, usize>) -> Vec<(&'a str, &'a str)> {
    let mut seen = std::collections::HashSet::with_capacity(tokens.len());
    let mut all: Vec<(&str, &str, i64)> = Vec::new();
    for t in tokens {
        if !seen.insert(t.as_str()) {
            continue;
        }
        let rank = -(ids[t.as_str()] as i64);
        let mut local: Vec<(&str, &str, i64)> = t
            .char_indices()
            .skip(1)
            .map(|(at, _)| (&t[..at], &t[at..]))
            .filter(|(l, r)| ids.contains_key(l) && ids.contains_key(r))
            .map(|(l, r)| (l, r, rank))
            .collect();
        local.sort_by_key(|(l, r, _)| (ids[l], ids[r]));
        all.extend(local);
    }
    let key = |(l, r, rank): &(&str, &str, i64)| (*rank, l.chars().count(), r.chars().count());
    all.sort_by(|a, b| key(b).cmp(&key(a)));
    all.into_iter().map(|(l, r, _)| (l, r)).collect()
}
