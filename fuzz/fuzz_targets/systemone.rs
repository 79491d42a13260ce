//! `POST /v1/systemone` bodies: Jev's format (`systemone::parse`).
//!
//! Input: a JSON body (other inputs are skipped). Asserts, besides no panic: errors are
//! 4xx, point into the body and render as Jev error bodies; a parsed request has 1 to
//! `--max-questions` questions, each exactly the question sent under its id, located there,
//! for the plugin `systemone-<type>`; its state is the text sent, or the compact JSON of the
//! object or array sent.
#![no_main]

use decide_server::fuzzing::{self, LocPart, Wire};
use decide_fuzz::{check_error, check_questions, check_state, json, limits};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some(body) = json(data) else { return };
    match fuzzing::systemone(&body, limits::MAX_QUESTIONS) {
        Err(error) => check_error(error, Wire::SystemOne, &body),
        Ok(request) => {
            let sent = body["questions"].as_object().expect("questions parsed");
            assert!((1..=limits::MAX_QUESTIONS).contains(&sent.len()));
            assert_eq!(request.questions.len(), sent.len());
            check_questions(&request.questions, &body, "systemone-");
            for (question, (id, sent)) in request.questions.iter().zip(sent) {
                assert_eq!(
                    question.loc,
                    vec![
                        LocPart::Field("questions".into()),
                        LocPart::Field(id.clone())
                    ]
                );
                let json: Value = serde_json::from_str(&question.json).expect("checked");
                assert_eq!(&json, sent, "the question is not the one sent");
            }
            check_state(&request.state, &body["state"]);
        }
    }
});
