//! `POST /v1/systemone/batch` bodies (`batch::parse`): items of Jev requests with shared or
//! own questions.
//!
//! Input: a JSON body (other inputs are skipped). Asserts, besides no panic: errors of the
//! batch and of single items are 4xx, point into the body and render as Jev error bodies; a
//! parsed batch has 1 to `--batch-max-items` items, at most `--batch-max-input-bytes` of state
//! over the items that parsed, each item's state what it sent, and an item that parsed either
//! has questions of its own or the batch has shared ones.
#![no_main]

use decide_server::fuzzing::{self, Wire};
use decide_fuzz::{check_error, check_questions, check_state, json, limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(body) = json(data) else { return };
    let parsed = fuzzing::batch(
        &body,
        limits::BATCH_MAX_ITEMS,
        limits::BATCH_MAX_INPUT_BYTES,
        limits::MAX_QUESTIONS,
    );
    let batch = match parsed {
        Err(error) => return check_error(error, Wire::SystemOne, &body),
        Ok(batch) => batch,
    };
    let sent = body["items"].as_array().expect("items parsed");
    assert_eq!(batch.items.len(), sent.len());
    assert!((1..=limits::BATCH_MAX_ITEMS).contains(&sent.len()));
    check_questions(&batch.shared, &body, "systemone-");
    let mut bytes = 0;
    for (item, sent) in batch.items.into_iter().zip(sent) {
        match item {
            Err(error) => check_error(error, Wire::SystemOne, &body),
            Ok(item) => {
                bytes += item.state.len();
                check_state(&item.state, &sent["state"]);
                match &item.questions {
                    Some(own) => check_questions(own, &body, "systemone-"),
                    None => assert!(!batch.shared.is_empty(), "an item without questions"),
                }
            }
        }
    }
    assert!(
        bytes <= limits::BATCH_MAX_INPUT_BYTES,
        "{bytes} bytes of state passed"
    );
});
