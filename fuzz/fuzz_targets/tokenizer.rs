//! The model's tokenizer on arbitrary text (`decide-models`, built from the GGUF metadata of
//! the test model, SmolLM2; no weights are loaded), and the label reads on arbitrary labels.
//!
//! Input: text (invalid UTF-8 replaced); its NUL-separated pieces after the first are
//! labels (see `pieces` for repeated pieces).
//!
//! Asserts, besides no panic: tokenizing never fails and gives ids in the vocabulary;
//! decoding gives the text back (with control tokens recognised and read as plain text
//! alike; see `decoded_text` for the bytes a vocabulary has no token for) where the
//! tokenizer has no normalizer; text without a control-token string
//! tokenizes the same both ways; label ids read after a prompt are one distinct token per
//! label, each decoding to its label, and the remembered (cached) label ids are the same.
#![no_main]

use decide_fuzz::{decoded_text, hash, pieces, prompter};
use decide_models::ChatMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let prompter = prompter();
    let text = String::from_utf8_lossy(data);
    let ids = prompter.tokenize(&text).expect("tokenizing never fails");
    let plain = prompter
        .tokenize_plain(&text)
        .expect("tokenizing never fails");
    for id in ids.iter().chain(&plain) {
        assert!(
            (*id as usize) < prompter.vocab_len(),
            "id {id} outside the vocabulary"
        );
    }
    if let Some(expected) = decoded_text(prompter, &text) {
        assert_eq!(
            prompter.decode(&ids).expect("decodes"),
            expected,
            "ids {ids:?}"
        );
        assert_eq!(
            prompter.decode(&plain).expect("decodes"),
            expected,
            "plain ids {plain:?}"
        );
    }
    if !prompter.contains_control(&text) {
        assert_eq!(
            ids, plain,
            "no control token, yet the two tokenizations differ"
        );
    }

    let pieces = pieces(data, 9);
    let Some((content, labels)) = pieces.split_first() else {
        return;
    };
    if labels.is_empty() {
        return;
    }
    let messages = [ChatMessage {
        role: "user".into(),
        content: content.clone(),
    }];
    let Ok(prompt) = prompter.render(&messages) else {
        return;
    };
    let read = prompter.label_ids(&prompt, labels);
    let remembered = prompter.label_ids_cached(&prompt, labels, hash(data) % 4);
    match (&read, &remembered) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "remembered label ids differ"),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("label ids {read:?}, remembered {remembered:?}"),
    }
    match read {
        Ok(ids) => {
            assert_eq!(ids.len(), labels.len());
            for (id, label) in ids.iter().zip(labels) {
                assert_eq!(&prompter.decode(&[*id]).expect("decodes"), label);
                assert_eq!(
                    ids.iter().filter(|x| *x == id).count(),
                    1,
                    "a shared id {id}"
                );
            }
        }
        Err(decide_models::ModelError::Label { label, .. }) => {
            assert!(
                labels.contains(&label),
                "refused label {label:?} was not asked"
            )
        }
        Err(other) => panic!("label ids failed otherwise: {other}"),
    }
});
