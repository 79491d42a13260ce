//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), not an API: each is a thin
//! call of one parser a client reaches (body decoding, the OpenAI, Jev, batch, classify and
//! field-schema frontends, the JSON-Schema compiler), exactly as its handler calls it but
//! without a server, a model or a caller, so that arbitrary bytes can be fed to every parser
//! and what it returns checked. This module owns only that glue: the frontends stay private
//! to the crate, and nothing here is used by the server.

use std::cell::RefCell;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

pub use crate::error::{dotted, jev_loc, ApiError, Loc, LocPart, Wire};
pub use crate::frontends::classify::compile::{
    compile, escape, segments, Compiled, SchemaError, SchemaLeaf, SchemaLimits, Shape,
};
pub use crate::frontends::classify::ClassifyLimits;
pub use crate::frontends::leaf::{labels, Values};
pub use crate::pipeline::{DecisionRequest, Question};

use crate::frontends::{batch, body, classify, fields, openai, systemone};
use crate::loc;

thread_local! {
    /// One runtime per thread for the async body reader (libFuzzer runs a target on one
    /// thread; building a runtime per input would dominate the time of an execution).
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

/// Runs a future to completion on this thread's current-thread runtime.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    RUNTIME.with(|cell| {
        let mut cell = cell.borrow_mut();
        let runtime = cell.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime builds")
        });
        runtime.block_on(future)
    })
}

/// [`body::read_json`] of `body` sent with these `Content-Type` and `Content-Encoding`
/// header values (a value that is not a valid header value is left out: HTTP cannot carry
/// it), within `limit` bytes, multipart allowed where `multipart`.
pub fn read_body(
    content_type: Option<&[u8]>,
    content_encoding: Option<&[u8]>,
    body: Vec<u8>,
    limit: usize,
    multipart: bool,
) -> Result<Value, ApiError> {
    let mut headers = HeaderMap::new();
    let mut set = |name: HeaderName, value: Option<&[u8]>| {
        if let Some(value) = value.and_then(|v| HeaderValue::from_bytes(v).ok()) {
            headers.insert(name, value);
        }
    };
    set(header::CONTENT_TYPE, content_type);
    set(header::CONTENT_ENCODING, content_encoding);
    block_on(body::read_json(
        &headers,
        Body::from(body),
        limit,
        multipart,
    ))
}

/// The HTTP response an error becomes on `wire`: its status and its body read back as JSON
/// (`Value::Null` when the body is not JSON, which an error body must never be).
pub fn error_response(error: ApiError, wire: Wire) -> (u16, Value) {
    let response = error.into_response_for(wire);
    let status = response.status().as_u16();
    let bytes = block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
        .map(|b| b.to_vec())
        .unwrap_or_default();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Whether `POST /v1/decisions` reads this body as a field-schema request.
pub fn is_fields_request(value: &Value) -> bool {
    fields::is_fields_request(value)
}

/// `POST /v1/decisions` (OpenAI's format): the pipeline request its body parses to.
pub fn openai(value: &Value, max_questions: usize) -> Result<DecisionRequest, ApiError> {
    openai::parse(value, max_questions).map(|parsed| parsed.request)
}

/// The text an OpenAI `input` (a string, or messages and tool items) renders to.
pub fn openai_input(input: &Value) -> Result<String, ApiError> {
    openai::render_input(input, &loc!["input"])
}

/// `POST /v1/systemone` (Jev's format): the pipeline request its body parses to.
pub fn systemone(value: &Value, max_questions: usize) -> Result<DecisionRequest, ApiError> {
    systemone::parse(value, max_questions).map(|parsed| parsed.request)
}

/// A parsed `POST /v1/systemone/batch` body.
#[derive(Debug)]
pub struct Batch {
    /// The shared questions (none sent: empty).
    pub shared: Vec<Question>,
    /// Each item, or the error that fails it alone.
    pub items: Vec<Result<BatchItem, ApiError>>,
}

/// One item of a batch that parsed.
#[derive(Debug)]
pub struct BatchItem {
    pub state: String,
    /// Its own questions; `None`: the shared ones.
    pub questions: Option<Vec<Question>>,
}

/// `POST /v1/systemone/batch` under these limits (`--batch-max-items`,
/// `--batch-max-input-bytes`, `--max-questions`).
pub fn batch(
    value: &Value,
    max_items: usize,
    max_input_bytes: usize,
    max_questions: usize,
) -> Result<Batch, ApiError> {
    let limits = batch::BatchLimits {
        max_items,
        max_input_bytes,
        max_questions,
    };
    let parsed = batch::parse(value, limits)?;
    Ok(Batch {
        shared: parsed.shared.questions,
        items: parsed
            .items
            .into_iter()
            .map(|item| {
                item.map(|item| BatchItem {
                    state: item.state,
                    questions: item.own.map(|set| set.questions),
                })
            })
            .collect(),
    })
}

/// A parsed `POST /v1/classify` body.
#[derive(Debug)]
pub struct Classified {
    pub state: String,
    pub schema: Value,
    pub compiled: Compiled,
    /// The question each leaf is asked as, in leaf order.
    pub questions: Vec<Question>,
}

/// `POST /v1/classify` under `limits`, up to where the handler starts model work: the body
/// parsed, the schema compiled and accepted by the Draft 2020-12 validator the answer is
/// checked with.
pub fn classify(value: &Value, limits: &ClassifyLimits) -> Result<Classified, ApiError> {
    let parsed = classify::parse(value, limits)?;
    classify::validator(&parsed.schema)?;
    let questions = classify::leaves(&parsed)
        .iter()
        .map(crate::frontends::leaf::Leaf::question)
        .collect();
    Ok(Classified {
        state: parsed.state,
        schema: parsed.schema,
        compiled: parsed.compiled,
        questions,
    })
}

/// Whether the Draft 2020-12 validator of `schema` admits `value` (the check `/v1/classify`
/// makes on its assembled answer); `Err` when the schema is not a valid schema.
pub fn schema_admits(schema: &Value, value: &Value) -> Result<bool, String> {
    jsonschema::draft202012::new(schema)
        .map(|validator| validator.is_valid(value))
        .map_err(|e| e.to_string())
}

/// A parsed field-schema body (`POST /v1/fields`).
#[derive(Debug)]
pub struct Fields {
    pub context: String,
    /// The field names, in schema order.
    pub names: Vec<String>,
    /// The question each field is asked as, in field order.
    pub questions: Vec<Question>,
}

/// `POST /v1/fields` under `--schema-max-input-chars` and `--schema-max-fields`.
pub fn fields(
    value: &Value,
    max_input_chars: usize,
    max_fields: usize,
) -> Result<Fields, ApiError> {
    let parsed = fields::parse(value, max_input_chars, max_fields)?;
    Ok(Fields {
        questions: parsed.leaves.iter().map(|leaf| leaf.question()).collect(),
        context: parsed.context,
        names: parsed.names,
    })
}
