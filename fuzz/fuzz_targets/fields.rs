//! `POST /v1/fields` bodies: the field-schema format (`fields::parse`).
//!
//! Input: a JSON body (other inputs are skipped). Asserts, besides no panic: errors are
//! 4xx, point into the body and render as Jev error bodies; a parsed request has 1 to
//! `--schema-max-fields` fields, one question per field in schema order, each located at its
//! field, and a context of at most `--schema-max-input-chars` characters that is the one sent.
#![no_main]

use decide_server::fuzzing::{self, Wire};
use decide_fuzz::{check_error, check_fields, json, limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(body) = json(data) else { return };
    match fuzzing::fields(
        &body,
        limits::SCHEMA_MAX_INPUT_CHARS,
        limits::SCHEMA_MAX_FIELDS,
    ) {
        Err(error) => check_error(error, Wire::SystemOne, &body),
        Ok(parsed) => check_fields(&parsed, &body),
    }
});
