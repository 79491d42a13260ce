//! The model's chat template and prompt tokenization on arbitrary messages (`decide-models`,
//! the test model SmolLM2's template and tokenizer from its GGUF metadata; no weights).
//!
//! Input: NUL-separated pieces, taken as (role, content) pairs (a role of at most one byte
//! picks system, user, assistant or tool; a lone last piece is a user message); see
//! `pieces` for repeated pieces.
//!
//! Asserts, besides no panic:
//! - rendering through the token cache (salted, twice: a miss then hits, under a small
//!   budget that evicts) gives exactly the prompt rendering without it gives;
//! - a refused conversation is a template error, and (SmolLM2's template never refuses) one
//!   whose role contains a control-token string;
//! - a prompt's ids are in the vocabulary and decode to its text (BOS aside; see
//!   `decoded_text`);
//! - contents without control-token strings: the ids are those of tokenizing the whole
//!   text;
//! - a content cannot forge control tokens: the prompt's control tokens are those of the
//!   same conversation with every content replaced by plain text (SmolLM2's template prints
//!   contents and never looks at them, so its own control tokens do not depend on them).
#![no_main]

use decide_fuzz::{decoded_text, hash, pieces, prompter};
use decide_models::{ChatMessage, ModelError};
use libfuzzer_sys::fuzz_target;

/// The token cache's budget while fuzzing: small, so that entries are evicted.
const CACHE_BYTES: usize = 64 << 10;

fuzz_target!(|data: &[u8]| {
    let prompter = prompter();
    prompter.set_token_cache_bytes(CACHE_BYTES);
    let pieces = pieces(data, 16);
    let messages: Vec<ChatMessage> = pieces
        .chunks(2)
        .map(|pair| match pair {
            [role, content] => ChatMessage {
                role: role_of(role),
                content: content.clone(),
            },
            [content] => ChatMessage {
                role: "user".into(),
                content: content.clone(),
            },
            _ => unreachable!("chunks of two"),
        })
        .collect();
    let rendered = prompter.render(&messages);
    let salt = hash(data) % 4;
    for _ in 0..2 {
        let cached = prompter.render_cached(&messages, salt);
        match (&rendered, &cached) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "the token cache changed the prompt"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            _ => panic!("render {rendered:?}, through the cache {cached:?}"),
        }
    }
    let smollm = prompter.pre_tokenizer() == "smollm";
    let prompt = match rendered {
        Ok(prompt) => prompt,
        Err(ModelError::Template(message)) => {
            if smollm {
                assert!(
                    messages.iter().any(|m| prompter.contains_control(&m.role)),
                    "refused without a control token in a role: {message}"
                );
            }
            return;
        }
        Err(other) => panic!("rendering failed otherwise: {other}"),
    };
    assert!(prompt
        .tokens
        .iter()
        .all(|&id| (id as usize) < prompter.vocab_len()));
    let bos = prompter.bos().filter(|_| prompter.adds_bos());
    let body = match (bos, prompt.tokens.split_first()) {
        (Some(bos), Some((&first, rest)))
            if first == bos
                && !prompt
                    .text
                    .starts_with(prompter.token_str(bos).unwrap_or("")) =>
        {
            rest
        }
        _ => &prompt.tokens[..],
    };
    if let Some(expected) = decoded_text(prompter, &prompt.text) {
        assert_eq!(prompter.decode(body).expect("decodes"), expected);
    }
    if !messages
        .iter()
        .any(|m| prompter.contains_control(&m.content))
    {
        assert_eq!(body, prompter.tokenize(&prompt.text).expect("tokenizes"));
    } else if smollm {
        let plain: Vec<ChatMessage> = messages
            .iter()
            .map(|m| ChatMessage {
                role: m.role.clone(),
                content: if m.content.is_empty() {
                    String::new()
                } else {
                    "text".into()
                },
            })
            .collect();
        let reference = prompter.render(&plain).expect("the same roles rendered");
        let controls = |ids: &[u32]| -> Vec<u32> {
            ids.iter()
                .copied()
                .filter(|&id| prompter.is_control(id))
                .collect()
        };
        assert_eq!(
            controls(&prompt.tokens),
            controls(&reference.tokens),
            "a content changed the prompt's control tokens"
        );
    }
});

/// A role: a piece of at most one byte picks a common one, a longer piece is the role.
fn role_of(piece: &str) -> String {
    match piece.as_bytes() {
        [] | [_] => ["system", "user", "assistant", "tool"]
            [piece.bytes().next().unwrap_or(1) as usize % 4]
            .into(),
        _ => piece.to_string(),
    }
}
