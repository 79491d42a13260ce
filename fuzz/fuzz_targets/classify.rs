//! `POST /v1/classify` bodies (`classify::parse`): a state, a question and a JSON schema
//! compiled to closed-set leaves, up to where the handler starts model work (the schema
//! also accepted by the Draft 2020-12 validator the answer is checked with).
//!
//! Input: a JSON body (other inputs are skipped). Asserts, besides no panic: errors are
//! 4xx, point into the body (a schema error at the JSON pointer of the schema's part) and
//! render as Jev error bodies; a parsed request's state is what was sent, within
//! `--schema-max-input-chars`, its schema within `--schema-max-bytes`, one question per leaf
//! located at the leaf's schema, and the compiled schema passes `check_compiled` (limits,
//! distinct values and labels, every assembled answer admitted by the schema).
#![no_main]

use decide_server::fuzzing::{self, ClassifyLimits, SchemaLimits, Wire};
use decide_fuzz::{check_compiled, check_error, check_questions, check_state, hash, json, limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(body) = json(data) else { return };
    let limits = ClassifyLimits {
        schema: SchemaLimits {
            max_fields: limits::SCHEMA_MAX_FIELDS,
            max_candidates: limits::MAX_OPTIONS,
            max_depth: limits::SCHEMA_MAX_DEPTH,
        },
        max_input_chars: limits::SCHEMA_MAX_INPUT_CHARS,
        max_schema_bytes: limits::SCHEMA_MAX_BYTES,
    };
    match fuzzing::classify(&body, &limits) {
        Err(error) => check_error(error, Wire::SystemOne, &body),
        Ok(parsed) => {
            check_state(&parsed.state, &body["state"]);
            assert!(parsed.state.chars().count() <= limits.max_input_chars);
            assert_eq!(parsed.schema, body["schema"]);
            assert!(
                serde_json::to_string(&parsed.schema).unwrap().len() <= limits.max_schema_bytes
            );
            assert_eq!(parsed.questions.len(), parsed.compiled.leaves.len());
            check_questions(&parsed.questions, &body, "systemone-");
            check_compiled(&parsed.schema, &parsed.compiled, &limits.schema, hash(data));
        }
    }
});
