//! `POST /v1/decisions` bodies: OpenAI's Decisions format (`openai::parse`, with the
//! rendering of `input` messages, tool items and `input_json` parts), or the field-schema
//! format when the body has `context` and `schema` instead, as the handler dispatches them.
//!
//! Input: a JSON body (other inputs are skipped). Asserts, besides no panic: errors are
//! 4xx, point into the body and render as OpenAI error bodies (field-schema errors as Jev
//! ones); a parsed request has 1 to `--max-questions` questions, each the question sent
//! without its `name`, located at it, for the plugin `openai-<type>`; its state is the
//! rendering of `input`, a string input being the state itself. `input` (or, failing that,
//! the whole body) is also rendered on its own.
#![no_main]

use decide_server::fuzzing::{self, Wire};
use decide_fuzz::{check_error, check_questions, json, limits};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some(body) = json(data) else { return };
    if fuzzing::is_fields_request(&body) {
        fields_request(&body);
    } else {
        match fuzzing::openai(&body, limits::MAX_QUESTIONS) {
            Err(error) => check_error(error, Wire::OpenAi, &body),
            Ok(request) => {
                let sent = body["questions"].as_array().expect("questions parsed");
                assert_eq!(request.questions.len(), sent.len());
                assert!((1..=limits::MAX_QUESTIONS).contains(&sent.len()));
                check_questions(&request.questions, &body, "openai-");
                for (question, sent) in request.questions.iter().zip(sent) {
                    let mut expected = sent.clone();
                    expected.as_object_mut().expect("an object").remove("name");
                    let json: Value = serde_json::from_str(&question.json).expect("checked");
                    assert_eq!(json, expected, "the question is not the one sent");
                }
                let rendered = fuzzing::openai_input(&body["input"]).expect("input parsed");
                assert_eq!(request.state, rendered);
                if let Value::String(text) = &body["input"] {
                    assert_eq!(&request.state, text);
                }
            }
        }
    }
    let input = body.get("input").unwrap_or(&body);
    let wrapped = serde_json::json!({ "input": input });
    match fuzzing::openai_input(input) {
        Err(error) => check_error(error, Wire::OpenAi, &wrapped),
        Ok(text) => {
            assert!(!text.trim().is_empty(), "input {input} rendered blank");
            if let Value::String(sent) = input {
                assert_eq!(&text, sent);
            }
        }
    }
});

/// A field-schema body reached through `/v1/decisions` (errors in Jev's shape, as there).
fn fields_request(body: &Value) {
    match fuzzing::fields(
        body,
        limits::SCHEMA_MAX_INPUT_CHARS,
        limits::SCHEMA_MAX_FIELDS,
    ) {
        Err(error) => check_error(error, Wire::SystemOne, body),
        Ok(parsed) => decide_fuzz::check_fields(&parsed, body),
    }
}
