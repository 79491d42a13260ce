//! What the fuzz targets share: the checks every parser's result must pass, whatever the
//! input (see each target in `fuzz_targets/` for what it feeds and what else it asserts).
//!
//! Every check panics with what broke and the values involved, so that libFuzzer reports
//! the input as a crash.

use decide_server::fuzzing::{dotted, jev_loc, ApiError, LocPart, Question, Wire};
use serde_json::Value;

/// Limits the frontend targets parse under: small, so that the limit paths are reached by
/// inputs of a few kilobytes (the server's defaults are far larger).
pub mod limits {
    /// `--max-questions`.
    pub const MAX_QUESTIONS: usize = 8;
    /// `--batch-max-items`.
    pub const BATCH_MAX_ITEMS: usize = 6;
    /// `--batch-max-input-bytes`.
    pub const BATCH_MAX_INPUT_BYTES: usize = 512;
    /// `--schema-max-fields`.
    pub const SCHEMA_MAX_FIELDS: usize = 8;
    /// `--max-options` (a schema leaf's candidates).
    pub const MAX_OPTIONS: usize = 16;
    /// `--schema-max-depth`.
    pub const SCHEMA_MAX_DEPTH: usize = 4;
    /// `--schema-max-input-chars`.
    pub const SCHEMA_MAX_INPUT_CHARS: usize = 256;
    /// `--schema-max-bytes`.
    pub const SCHEMA_MAX_BYTES: usize = 2048;
}

/// The value at `loc` in `body`: fields of objects and indices of arrays, nothing else.
pub fn resolve<'a>(body: &'a Value, loc: &[LocPart]) -> Option<&'a Value> {
    loc.iter()
        .try_fold(body, |value, part| match (value, part) {
            (Value::Object(map), LocPart::Field(name)) => map.get(name),
            (Value::Array(items), LocPart::Index(i)) => items.get(*i),
            _ => None,
        })
}

/// Checks an error a parser returned for `body` on `wire`: a client error (4xx), pointing
/// into the body (everything but the last segment of its location exists there: the last may
/// name a missing field), and rendered as the JSON error body of its wire format with that
/// status and location.
pub fn check_error(error: ApiError, wire: Wire, body: &Value) {
    let status = error.status(wire);
    assert!(
        status.is_client_error(),
        "a parse error must be a client error, got {status}: {error:?}"
    );
    let loc = error.loc().to_vec();
    if let Some((_, parent)) = loc.split_last() {
        assert!(
            resolve(body, parent).is_some(),
            "the error's location {} is not in the body: {error:?}\nbody: {body}",
            dotted(&loc)
        );
    }
    let message = error.to_string();
    assert!(!message.is_empty(), "an error without a message: {error:?}");
    let (rendered, json) = decide_server::fuzzing::error_response(error, wire);
    assert_eq!(
        rendered,
        status.as_u16(),
        "the response status is not the error's"
    );
    match wire {
        Wire::OpenAi => {
            let param = &json["error"]["param"];
            let expected = if loc.is_empty() {
                Value::Null
            } else {
                Value::String(dotted(&loc))
            };
            assert_eq!(*param, expected, "OpenAI error body: {json}");
            assert_eq!(json["error"]["message"], Value::String(message), "{json}");
        }
        // Jev's validation errors are a `detail` list of `{loc, msg, type}`; the others (an
        // unsupported encoding, ...) an object `{error_type, message}` about the request as a
        // whole.
        Wire::SystemOne => match &json["detail"] {
            Value::Array(details) => {
                let detail = &details[0];
                assert_eq!(detail["loc"], jev_loc(&loc), "Jev error body: {json}");
                assert_eq!(detail["msg"], Value::String(message), "{json}");
            }
            detail => {
                assert!(loc.is_empty(), "a located error outside the list: {json}");
                assert!(detail["error_type"].is_string(), "Jev error body: {json}");
                assert_eq!(detail["message"], Value::String(message), "{json}");
            }
        },
    }
}

/// Checks the questions a parser handed the pipeline: each located at a value of the body
/// (where errors about it will point), its JSON an object naming a `type`, its plugin
/// `<prefix><type>`.
pub fn check_questions(questions: &[Question], body: &Value, prefix: &str) {
    for question in questions {
        assert!(
            resolve(body, &question.loc).is_some(),
            "question located at {}, which is not in the body {body}",
            dotted(&question.loc)
        );
        let json: Value = serde_json::from_str(&question.json)
            .unwrap_or_else(|e| panic!("question JSON {:?} does not parse: {e}", question.json));
        let kind = json["type"]
            .as_str()
            .unwrap_or_else(|| panic!("question JSON without a type: {json}"));
        assert_eq!(question.plugin, format!("{prefix}{kind}"), "{json}");
    }
}

/// Checks a state text the pipeline is asked about: not blank, and where it came from a
/// string the string itself, else the compact JSON of what was sent.
pub fn check_state(state: &str, sent: &Value) {
    assert!(!state.trim().is_empty(), "a blank state passed: {sent}");
    match sent {
        Value::String(text) => assert_eq!(state, text),
        other => {
            let back: Value = serde_json::from_str(state)
                .unwrap_or_else(|e| panic!("a JSON state {state:?} does not parse: {e}"));
            assert_eq!(&back, other, "a JSON state is not what was sent");
        }
    }
}

/// The JSON value of the input, when it is JSON; the frontend targets skip other inputs
/// (reading the body is the body target's work).
pub fn json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

/// Checks a compiled JSON schema against the schema and the limits it was compiled under:
/// within the limits, every leaf a closed set of distinct values with distinct labels, its
/// schema pointer in the schema, and, when the schema is a valid Draft 2020-12 schema (the
/// handler refuses others), every answer the leaves can assemble admitted by its validator
/// (tried for the first, the last and an input-chosen value of each leaf).
pub fn check_compiled(
    schema: &Value,
    compiled: &decide_server::fuzzing::Compiled,
    limits: &decide_server::fuzzing::SchemaLimits,
    pick: u64,
) {
    use decide_server::fuzzing::{labels, Values};
    assert!(
        compiled.leaves.len() <= limits.max_fields,
        "{} leaves over the limit of {}",
        compiled.leaves.len(),
        limits.max_fields
    );
    let mut choices: Vec<Vec<Value>> = Vec::new();
    for leaf in &compiled.leaves {
        assert!(
            schema.pointer(&leaf.schema_pointer).is_some(),
            "leaf schema pointer {:?} is not in the schema",
            leaf.schema_pointer
        );
        let values = match &leaf.values {
            Values::Boolean => vec![Value::Bool(true), Value::Bool(false)],
            Values::Listed(values) => values.clone(),
        };
        assert!(
            (2..=limits.max_candidates.max(2)).contains(&values.len()),
            "leaf {:?} has {} values",
            leaf.pointer,
            values.len()
        );
        let shown = labels(&values);
        let mut seen = std::collections::HashSet::new();
        for label in &shown {
            assert!(!label.trim().is_empty(), "a blank label among {shown:?}");
            assert!(
                seen.insert(label),
                "label {label:?} names two values: {values:?}"
            );
        }
        choices.push(values);
    }
    let picks: [&dyn Fn(usize, usize) -> usize; 3] = [&|_, _| 0, &|_, n| n - 1, &|i, n| {
        ((pick >> (i % 32)) as usize).wrapping_add(i) % n
    }];
    for choose in picks {
        let chosen: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(i, values)| values[choose(i, values.len())].clone())
            .collect();
        let value = compiled.shape.assemble(&chosen);
        for (leaf, chosen) in compiled.leaves.iter().zip(&chosen) {
            assert_eq!(
                value.pointer(&leaf.pointer),
                Some(chosen),
                "leaf pointer {:?} does not locate its value in {value}",
                leaf.pointer
            );
        }
        for (pointer, fixed) in compiled.shape.fixed() {
            assert_eq!(
                value.pointer(&pointer),
                Some(&fixed),
                "fixed value at {pointer:?}"
            );
        }
        match decide_server::fuzzing::schema_admits(schema, &value) {
            Ok(true) => {}
            Ok(false) => panic!("the schema refuses an answer its compiled leaves allow: {value}"),
            // Not a valid schema (a keyword of the wrong type the compiler ignores, such as a
            // number in `required`): `/v1/classify` refuses it with its validator before
            // any model work, so no answer is ever assembled from it.
            Err(_) => return,
        }
    }
}

/// A 64-bit hash of the input (FNV-1a), for choices the targets derive from it.
pub fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Checks a parsed field-schema body (see the `fields` target).
pub fn check_fields(parsed: &decide_server::fuzzing::Fields, body: &Value) {
    let schema = body["schema"].as_object().expect("schema parsed");
    assert!((1..=limits::SCHEMA_MAX_FIELDS).contains(&schema.len()));
    let names: Vec<&String> = schema.keys().collect();
    assert_eq!(parsed.names.iter().collect::<Vec<_>>(), names);
    assert_eq!(parsed.questions.len(), names.len());
    check_questions(&parsed.questions, body, "systemone-");
    for (question, name) in parsed.questions.iter().zip(&names) {
        assert_eq!(
            question.loc,
            vec![
                LocPart::Field("schema".into()),
                LocPart::Field((*name).clone())
            ]
        );
    }
    assert!(parsed.context.chars().count() <= limits::SCHEMA_MAX_INPUT_CHARS);
    check_state(&parsed.context, &body["context"]);
}

/// The tokenizer and chat template of the test model, loaded once per process from its
/// GGUF metadata (no weights): `$DECIDE_TEST_MODEL`, else `.models/smol.gguf` at the
/// repository root (what `scripts/fetch-model.sh smol` fetches).
pub fn prompter() -> &'static decide_models::Prompter {
    static PROMPTER: std::sync::LazyLock<decide_models::Prompter> =
        std::sync::LazyLock::new(|| {
            let path = std::env::var_os("DECIDE_TEST_MODEL")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.models/smol.gguf")
                });
            decide_models::Prompter::load(&path).unwrap_or_else(|e| {
                panic!(
                    "the tokenizer targets need a model: set DECIDE_TEST_MODEL or run \
                 scripts/fetch-model.sh smol ({}: {e})",
                    path.display()
                )
            })
        });
    &PROMPTER
}

/// What decoding the ids of `text` must give: `text` itself for byte-level BPE without a
/// normalizer (`smollm`, `gpt2`), except for bytes the vocabulary has no token for (SmolLM2
/// lacks a few ASCII control bytes and bytes such as 0xF1 that lead rare 4-byte characters):
/// BPE drops those, as Hugging Face's tokenizers and llama.cpp do, so the model never sees
/// them and the rest decodes as lossy UTF-8. `None` for a tokenizer that normalizes (`qwen2`,
/// NFC), where no such equality is promised.
pub fn decoded_text(prompter: &decide_models::Prompter, text: &str) -> Option<String> {
    static KNOWN: std::sync::OnceLock<[bool; 256]> = std::sync::OnceLock::new();
    if !matches!(prompter.pre_tokenizer(), "smollm" | "gpt2") {
        return None;
    }
    let known = KNOWN.get_or_init(|| {
        let mut known = [false; 256];
        for (byte, c) in byte_level_chars() {
            known[usize::from(byte)] = prompter.token_id(&c.to_string()).is_some();
        }
        known
    });
    let kept: Vec<u8> = text.bytes().filter(|&b| known[usize::from(b)]).collect();
    Some(String::from_utf8_lossy(&kept).into_owned())
}

/// GPT-2's byte-level alphabet: the character each byte is written as in the vocabulary
/// (printable Latin-1 as itself, every other byte as a character from U+0100 on, in order).
fn byte_level_chars() -> Vec<(u8, char)> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xa1..=0xac | 0xae..=0xff);
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                (b, char::from(b))
            } else {
                let c = char::from_u32(next).expect("U+0100.. are characters");
                next += 1;
                (b, c)
            }
        })
        .collect()
}

/// Text pieces of an input: split at NUL bytes; a piece that starts with byte 2 is its
/// remainder repeated (the count is its second byte), so short inputs reach the long texts
/// that the tokenizer cuts into cached pieces.
pub fn pieces(data: &[u8], most: usize) -> Vec<String> {
    data.split(|&b| b == 0)
        .take(most)
        .map(|piece| match piece {
            [2, count, rest @ ..] => {
                String::from_utf8_lossy(&rest.repeat(usize::from(*count) + 1)).into_owned()
            }
            _ => String::from_utf8_lossy(piece).into_owned(),
        })
        .collect()
}
