//! TypeSafe's Jev format (`POST /v1/systemone`) and its two error shapes: validation errors are
//! `{"detail": [{loc, msg, type}]}` (FastAPI's), every other error `{"detail": {error_type,
//! message}}`. The structured formats (`/v1/classify`, `/v1/fields`, `/v1/systemone/batch`) use
//! the same error shapes.
//!
//! The parser is `crate::frontends::systemone::parse`; the response is built there with `json!`
//! because each answer carries its question type plugin's own fields.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoResponses, ToSchema};

use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::RefOr;

use super::prompt::QuestionPrompt;
use super::{bounded_map, register, AnyJson, JsonNull, NonBlank, NonEmptyText};

/// A validation error: every problem found, each with where it is.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevValidationError {
    #[schema(min_items = 1)]
    pub detail: Vec<JevIssue>,
}

/// One problem of a request.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevIssue {
    /// `["body", field or index, ...]`: where in the body (`["body"]` for the body as a whole).
    #[schema(min_items = 1)]
    pub loc: Vec<LocPart>,
    /// A sentence that names the field, the limit and the setting to change.
    pub msg: String,
    /// Machine-readable: `value_error`, `missing`, `extra_forbidden`, `json_invalid`,
    /// `too_large`, `unsupported_request`, a refusal code, ...
    #[serde(rename = "type")]
    pub kind: String,
}

/// A field name or an array index.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum LocPart {
    Field(String),
    Index(u64),
}

/// Any other error (401, 404 unknown model, 415, 429, 502, 503, 504, ...).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevError {
    pub detail: JevErrorBody,
}

/// The class of error and what happened.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevErrorBody {
    pub error_type: JevErrorType,
    pub message: String,
}

/// Jev's error classes, from the status.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JevErrorType {
    AuthenticationError,
    PermissionError,
    NotFoundError,
    ConflictError,
    UnsupportedMediaType,
    RateLimitError,
    EngineError,
    ServiceUnavailable,
    TimeoutError,
    /// A request past its deadline (`timeout_ms`, `--request-timeout-ms`): 504.
    Timeout,
    /// The model worker's queue is full (`--max-queued-requests`, `--max-queued-tokens`): 503
    /// with `Retry-After`.
    Overloaded,
    InternalError,
    InvalidRequestError,
}

/// A Jev request. Unknown top-level fields are ignored, as TypeSafe's API does; the questions
/// stay strict (their plugins validate them). Also accepted zstd-compressed and as
/// `multipart/form-data` with the JSON in a `request` part.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct SystemOneRequest {
    /// The served model under any of its names (`jev-latest` too); another name is 404.
    pub model: Option<String>,
    pub state: JevState,
    pub questions: QuestionMap,
    /// Image assets are refused (422): there is no vision model. Only null is accepted.
    #[schema(value_type = JsonNull, required = false)]
    pub assets: Option<serde_json::Value>,
    /// This request's own deadline in milliseconds (it can only shorten
    /// `--request-timeout-ms`); past it, 504 and the work is dropped.
    #[schema(minimum = 1, maximum = 86_400_000)]
    pub timeout_ms: Option<u64>,
    /// decide's extension: return the prompts each question was read with, in `prompts` by
    /// question id (default false; anything but a boolean is 422). It changes nothing about
    /// how the questions are read.
    pub return_prompt: Option<bool>,
}

/// `state`: text, or a JSON object or array shown to the model as compact JSON (keys in the
/// order sent), at most `--max-input-bytes` (default 262,144) as rendered.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum JevState {
    #[schema(value_type = NonBlank)]
    Text(String),
    Object(serde_json::Map<String, serde_json::Value>),
    Array(Vec<serde_json::Value>),
}

/// Questions by id (ids not blank): 1 to `--max-questions` (default 400). A plugin
/// `systemone-T` adds the type `T`.
#[derive(Debug, Clone, Deserialize)]
pub struct QuestionMap(pub HashMap<String, JevQuestion>);

impl utoipa::PartialSchema for QuestionMap {
    fn schema() -> RefOr<Schema> {
        bounded_map::<JevQuestion>(1, 400, ObjectBuilder::new().pattern(Some(r"\S")), false)
    }
}
impl ToSchema for QuestionMap {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        register::<JevQuestion>(schemas);
    }
}

/// A question of a built-in type. (Each names its own `type` so that it can refuse unknown
/// fields.)
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum JevQuestion {
    Noul(Noul),
    Choice(JevChoice),
    Score(JevScore),
}

/// `noul`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum NoulType {
    Noul,
}

/// `choice`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JevChoiceType {
    Choice,
}

/// `score`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JevScoreType {
    Score,
}

/// A yes/no question: `noul` is p(true). Needs `instructions` or a described outcome.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Noul {
    #[serde(rename = "type")]
    pub kind: NoulType,
    pub instructions: Option<Content>,
    pub criteria: Option<NoulCriteria>,
}

/// What each outcome means.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoulCriteria {
    #[serde(rename = "true")]
    pub yes: Option<Content>,
    #[serde(rename = "false")]
    pub no: Option<Content>,
}

/// Text (not empty), or JSON shown as compact JSON.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    #[schema(value_type = NonEmptyText)]
    Text(String),
    Object(serde_json::Map<String, serde_json::Value>),
    Array(Vec<serde_json::Value>),
}

/// One of 2 to 255 labels (non-empty), each with its description or null.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevChoice {
    #[serde(rename = "type")]
    pub kind: JevChoiceType,
    pub instructions: Option<Content>,
    pub criteria: ChoiceCriteria,
}

/// Labels (not empty) and what they mean (or null).
#[derive(Debug, Clone, Deserialize)]
pub struct ChoiceCriteria(pub HashMap<String, Option<Content>>);

impl utoipa::PartialSchema for ChoiceCriteria {
    fn schema() -> RefOr<Schema> {
        bounded_map::<Content>(2, 255, ObjectBuilder::new().min_length(Some(1)), true)
    }
}
impl ToSchema for ChoiceCriteria {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        register::<Content>(schemas);
    }
}

/// An ordinal score over 2 to 10 distinct criteria, lowest first: `score` is the expected index.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevScore {
    #[serde(rename = "type")]
    pub kind: JevScoreType,
    pub instructions: Option<Content>,
    #[schema(min_items = 2, max_items = 10)]
    pub criteria: Vec<Content>,
}

/// The answers by question id.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SystemOneResponse {
    /// `req_...`, also in the `x-typesafe-request-id` header.
    pub id: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    pub model: String,
    pub answers: HashMap<String, JevAnswer>,
    pub usage: JevUsage,
    /// The questions that failed while others were answered.
    #[serde(default)]
    #[schema(required = false)]
    pub partial_failures: HashMap<String, PartialFailure>,
    /// With `return_prompt`: by question id, the prompts of every question whose prompts
    /// were rendered (answered, and failed after its reads were rendered).
    #[serde(default)]
    #[schema(required = false)]
    pub prompts: HashMap<String, QuestionPrompt>,
}

/// What the questions of one state got: `answers`, `usage` and the `partial_failures`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevAnswered {
    pub answers: HashMap<String, JevAnswer>,
    pub usage: JevUsage,
    #[serde(default)]
    #[schema(required = false)]
    pub partial_failures: HashMap<String, PartialFailure>,
    /// With the batch's `return_prompt`: each question's prompts by id.
    #[serde(default)]
    #[schema(required = false)]
    pub prompts: HashMap<String, QuestionPrompt>,
}

/// An answer: its type and the type plugin's fields (`noul` for nouls; `choice`, `confidence`,
/// `probabilities` by label for choices; `score`, `confidence`, `legend`, `probabilities` by
/// level index for scores; a plugin's own type adds its own).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct JevAnswer {
    #[serde(rename = "type")]
    pub kind: String,
    /// Nouls: p(true).
    #[serde(default)]
    #[schema(required = false, minimum = 0.0, maximum = 1.0)]
    pub noul: f64,
    /// Choices: the most probable label.
    #[serde(default)]
    #[schema(required = false)]
    pub choice: String,
    #[serde(default)]
    #[schema(required = false, minimum = 0.0, maximum = 1.0)]
    pub confidence: f64,
    #[serde(default)]
    #[schema(required = false, minimum = 0.0)]
    pub score: f64,
    /// Scores: each level index's criterion.
    #[serde(default)]
    #[schema(required = false, value_type = HashMap<String, AnyJson>)]
    pub legend: HashMap<String, serde_json::Value>,
    /// Calibrated probabilities by label (choices) or level index (scores).
    #[serde(default)]
    #[schema(required = false)]
    pub probabilities: HashMap<String, f64>,
}

/// A failed question: the status it would have alone, its code and why.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PartialFailure {
    #[schema(minimum = 400, maximum = 599)]
    pub status: u16,
    pub code: String,
    pub message: String,
}

/// Jev's usage; `cached_input_tokens` is decide's (input tokens whose KV came from a cache).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JevUsage {
    pub input_tokens: u64,
    #[schema(maximum = 0)]
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
}

/// The statuses of `POST /v1/systemone`.
#[derive(IntoResponses)]
pub enum SystemOneResponses {
    /// The answers by id.
    #[response(status = 200)]
    Ok(SystemOneResponse),
    /// Every question refused with 400 (a prompt over `--max-prompt-tokens`).
    #[response(status = 400)]
    BadRequest(JevValidationError),
    /// The key is missing or not valid.
    #[response(status = 401)]
    Unauthorized(JevError),
    /// `model` is not a name of the served model.
    #[response(status = 404)]
    UnknownModel(JevError),
    /// The body is over `--max-body-bytes`, or the request over a tenant's whole minute.
    #[response(status = 413)]
    TooLarge(JevValidationError),
    /// A `Content-Encoding` other than zstd.
    #[response(status = 415)]
    UnsupportedMedia(JevError),
    /// Invalid request, or every question refused (the first refusal).
    #[response(status = 422)]
    Unprocessable(JevValidationError),
    /// A tenant's rate, concurrency or queue limit; `Retry-After` says when to retry.
    #[response(status = 429)]
    RateLimited(JevError),
    /// Every question failed on the model (`engine_error`: a failed pass).
    #[response(status = 502)]
    BadGateway(JevError),
    /// The server is loading or draining, or its queue is full (`overloaded`); with
    /// `Retry-After`.
    #[response(status = 503)]
    NotReady(JevError),
    /// Past the request's deadline (`timeout_ms`, `--request-timeout-ms`); its work is dropped.
    #[response(status = 504)]
    Timeout(JevError),
}
