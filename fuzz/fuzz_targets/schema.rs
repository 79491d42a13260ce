//! The JSON-Schema compiler (`classify::compile::compile`) on arbitrary JSON, under small
//! limits and under the server's defaults.
//!
//! Input: a JSON value, the schema (other inputs are skipped). Asserts, besides no panic: a
//! refusal names a JSON pointer whose parent is in the schema (the last segment may name a
//! keyword that is missing), and one that refuses a listed `enum` value points at that very
//! value; a compiled schema passes `check_compiled` (within the limits, distinct values and
//! labels per leaf, every answer its leaves can assemble admitted by the schema's validator).
#![no_main]

use decide_server::fuzzing::{compile, SchemaLimits};
use decide_fuzz::{check_compiled, hash, json, limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(schema) = json(data) else { return };
    let small = SchemaLimits {
        max_fields: limits::SCHEMA_MAX_FIELDS,
        max_candidates: limits::MAX_OPTIONS,
        max_depth: limits::SCHEMA_MAX_DEPTH,
    };
    // The server's defaults (--schema-max-fields, --max-options, --schema-max-depth).
    let defaults = SchemaLimits {
        max_fields: 64,
        max_candidates: 255,
        max_depth: 8,
    };
    for limits in [small, defaults] {
        match compile(&schema, &limits) {
            Ok(compiled) => check_compiled(&schema, &compiled, &limits, hash(data)),
            Err(error) => {
                let pointer = &error.pointer;
                assert!(
                    pointer.is_empty() || pointer.starts_with('/'),
                    "not a JSON pointer: {pointer:?}"
                );
                let parent = &pointer[..pointer.rfind('/').unwrap_or(0)];
                assert!(
                    schema.pointer(parent).is_some(),
                    "the refusal's pointer {pointer:?} is not in the schema: {error:?}"
                );
                assert!(!error.message.is_empty());
                if names_listed_value(&decide_server::fuzzing::segments(pointer)) {
                    let named = schema
                        .pointer(pointer)
                        .unwrap_or_else(|| panic!("pointer {pointer:?} names no value"));
                    let text = serde_json::to_string(named).unwrap();
                    assert!(
                        error.message.starts_with(&text),
                        "the refusal at {pointer:?} (value {text}) names another value: {}",
                        error.message
                    );
                }
            }
        }
    }
});

/// Whether a schema pointer ends at a listed value: an `enum` entry or a `const`, where the
/// compiler refuses a value the node's own constraints exclude, naming the value. Walks the
/// pointer as the compiler nests schemas (`properties/<name>`, `prefixItems/<i>`,
/// `anyOf/<i>`, `oneOf/<i>`), so a property that happens to be named `enum` is not taken for
/// the keyword.
fn names_listed_value(segments: &[String]) -> bool {
    #[derive(PartialEq)]
    enum At {
        Schema,
        Name,
        Index,
        Enum,
        Listed,
        Other,
    }
    let mut at = At::Schema;
    for segment in segments {
        at = match at {
            At::Schema => match segment.as_str() {
                "properties" => At::Name,
                "prefixItems" | "anyOf" | "oneOf" => At::Index,
                "enum" => At::Enum,
                "const" => At::Listed,
                _ => At::Other,
            },
            At::Name | At::Index => At::Schema,
            At::Enum => At::Listed,
            At::Listed | At::Other => At::Other,
        };
    }
    at == At::Listed
}
