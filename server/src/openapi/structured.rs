//! The structured formats: JSON-Schema classification (`/v1/classify`, also
//! `/plugins/jev-decison/infer` and its capabilities), field-schema decisions (`/v1/fields`, and
//! `/v1/decisions` in that shape) and batches of Jev inputs (`/v1/systemone/batch`). Their
//! errors are Jev's ([`super::jev`]).
//!
//! [`Capabilities`] is what `GET /plugins/jev-decison/capabilities` serializes; the other
//! responses are built with `json!` in `crate::frontends` and checked against these types by
//! the contract test.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoResponses, ToSchema};

use super::jev::{
    JevAnswered, JevError, JevState, JevUsage, JevValidationError, LocPart, QuestionMap,
};
use super::prompt::QuestionPrompt;
use utoipa::openapi::schema::{ObjectBuilder, Schema};
use utoipa::openapi::RefOr;

use super::{bounded_map, register, AnyJson, JsonNull, NonBlank};

/// Many states in one request. Unknown fields are refused (422).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub model: Option<String>,
    /// The questions asked of every item that has none of its own.
    pub questions: Option<QuestionMap>,
    /// 1 to `--batch-max-items` (default 256) items, with at most `--batch-max-input-bytes`
    /// (default 8 MiB) of state over all of them.
    #[schema(min_items = 1, max_items = 256)]
    pub items: Vec<BatchItem>,
    /// This request's own deadline in milliseconds (it can only shorten
    /// `--request-timeout-ms`); past it, 504 and the work is dropped.
    #[schema(minimum = 1, maximum = 86_400_000)]
    pub timeout_ms: Option<u64>,
    /// Return the prompts each question was read with: every answered item carries `prompts`
    /// by question id (default false).
    pub return_prompt: Option<bool>,
}

/// One state, with its own questions or the shared ones. An invalid item fails alone.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchItem {
    pub state: JevState,
    /// Replace the shared questions for this item.
    pub questions: Option<QuestionMap>,
    /// Refused (the item fails): there is no vision model. Only null is accepted.
    #[schema(value_type = JsonNull, required = false)]
    pub assets: Option<serde_json::Value>,
}

/// The items in request order, and the usage of those answered.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchResponse {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub items: Vec<BatchItemResult>,
    pub usage: JevUsage,
}

/// What `/v1/systemone` answers for the item, or why the item failed.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum BatchItemResult {
    Answered(JevAnswered),
    Failed(BatchItemError),
}

/// A failed item.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchItemError {
    pub error: BatchItemErrorBody,
}

/// The status the item would have alone, its code, why, and where (`["body", "items", 2,
/// "state"]`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchItemErrorBody {
    #[schema(minimum = 400, maximum = 599)]
    pub status: u16,
    pub code: String,
    pub message: String,
    pub loc: Vec<LocPart>,
}

/// A classification request. Unknown fields are refused (422); output-token budgets
/// (`max_tokens`, ...) and a `mode` other than `classify` get 400.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyRequest {
    /// At most `--schema-max-input-chars` (default 100,000) characters as rendered (else 413).
    pub state: JevState,
    /// What is asked of every field.
    #[schema(value_type = NonBlank)]
    pub question: String,
    /// A Draft 2020-12 JSON Schema of closed sets: `enum`, `boolean`, bounded `integer`,
    /// `const`, `null`, unions of these, closed objects and fixed-length arrays; at most
    /// `--schema-max-bytes` (64 KiB), `--schema-max-fields` (64), `--schema-max-depth` (8).
    /// Anything else is 422 naming the schema's pointer.
    #[schema(value_type = AnyJson)]
    pub schema: serde_json::Value,
    pub mode: Option<ClassifyMode>,
    /// A field whose confidence is below it is not accepted (`value` null).
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_confidence: Option<f64>,
    /// When a string, one of the served model's names (else 404).
    #[schema(value_type = AnyJson, required = false)]
    pub model: Option<serde_json::Value>,
    /// This request's own deadline in milliseconds (it can only shorten
    /// `--request-timeout-ms`); past it, 504 and the work is dropped.
    #[schema(minimum = 1, maximum = 86_400_000)]
    pub timeout_ms: Option<u64>,
    /// decide's extension: return the prompts each asked field was read with, in `prompts`
    /// by the field's pointer (default false).
    pub return_prompt: Option<bool>,
}

/// The only mode: classification (no text is generated).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClassifyMode {
    Classify,
}

/// A value that satisfies the schema (when accepted), and each decision that made it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyResponse {
    /// `cls_...`.
    pub id: String,
    pub created: u64,
    pub model: String,
    /// Every field decided with enough confidence and the value valid.
    pub accepted: bool,
    /// The value, or null when not accepted.
    #[schema(value_type = AnyJson)]
    pub value: serde_json::Value,
    pub decisions: Vec<ClassifyDecision>,
    pub usage: StructuredUsage,
    /// Only when the assembled value failed its own schema (a bug: then not returned).
    #[serde(default)]
    #[schema(required = false)]
    pub validation_errors: Vec<String>,
    /// Absent when the schema fixes every value (nothing was asked).
    #[serde(default)]
    #[schema(required = false)]
    pub audit: Option<StructuredAudit>,
    /// With `return_prompt`: by the field's pointer (as in `decisions`), the prompts of every
    /// field asked whose prompts were rendered (fixed fields are not asked).
    #[serde(default)]
    #[schema(required = false)]
    pub prompts: HashMap<String, QuestionPrompt>,
}

/// One decided, fixed or failed field of the schema.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyDecision {
    /// The field's JSON pointer in the value.
    pub pointer: String,
    #[schema(value_type = AnyJson)]
    pub value: serde_json::Value,
    #[serde(default)]
    #[schema(required = false)]
    pub probability: Option<f64>,
    #[serde(default)]
    #[schema(required = false)]
    pub confidence: Option<f64>,
    /// The true next-token mass on the candidates' labels.
    #[serde(default)]
    #[schema(required = false)]
    pub candidate_mass: Option<f64>,
    pub accepted: bool,
    #[serde(default)]
    #[schema(required = false)]
    pub candidates: Vec<ClassifyCandidate>,
    /// Fixed by the schema (`const`, `null`, one-value enums): not asked.
    #[serde(default)]
    #[schema(required = false)]
    pub fixed: bool,
    #[serde(default)]
    #[schema(required = false)]
    pub error: Option<CodedMessage>,
}

/// A candidate value and its calibrated probability (null if not finite).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClassifyCandidate {
    #[schema(value_type = AnyJson)]
    pub value: serde_json::Value,
    pub probability: Option<f64>,
}

/// Token use: every prompt's tokens, those whose KV came from a cache, what the model computed.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StructuredUsage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub computed_input_tokens: u64,
    #[schema(maximum = 0)]
    pub output_tokens: u64,
}

/// How the request was read: model passes, scheduler jobs, the setup of its first answer.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StructuredAudit {
    pub forward_passes: u64,
    pub backend_requests: u64,
    #[serde(default)]
    #[schema(required = false)]
    pub renderer: String,
    #[serde(default)]
    #[schema(required = false)]
    pub render_version: String,
    #[serde(default)]
    #[schema(required = false)]
    pub label_scheme: String,
    #[serde(default)]
    #[schema(required = false)]
    pub readout: String,
    #[serde(default)]
    #[schema(required = false)]
    pub calibration_policy: String,
    #[serde(default)]
    #[schema(required = false)]
    pub temperature_source: String,
}

/// `GET /plugins/jev-decison/capabilities`: what this server classifies and its limits.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Capabilities {
    /// `jev-decison`.
    pub name: &'static str,
    pub model: String,
    pub modes: Vec<&'static str>,
    /// The JSON Schema draft of `schema` (2020-12).
    pub schema_draft: &'static str,
    /// The schema constructs decided.
    pub supported: Vec<&'static str>,
    pub limits: CapabilityLimits,
}

/// The server's limits of a classification request (their settings: `--schema-max-fields`,
/// `--max-options`, `--schema-max-depth`, `--schema-max-input-chars`, `--schema-max-bytes`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CapabilityLimits {
    pub max_fields: usize,
    pub max_candidates_per_field: usize,
    pub max_depth: usize,
    pub max_input_chars: usize,
    pub max_schema_bytes: usize,
}

/// A field-schema request, validated as that API documents it. Unknown fields are refused
/// (422).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldsRequest {
    /// The text the fields are about: not blank, at most `--schema-max-input-chars` (100,000)
    /// characters.
    #[schema(pattern = r"\S", max_length = 100000)]
    pub context: String,
    pub schema: FieldSchema,
    /// Accepted and reported; the engine always prefills once and reads every field in one
    /// batched pass (`prefill_then_batch`).
    pub strategy: Option<Strategy>,
    /// The request's own temperature.
    #[schema(minimum = 0.05, maximum = 10.0)]
    pub score_temperature: Option<f64>,
    /// A field whose probability is below it abstains (`value` null, `selected_value` kept).
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_probability: Option<f64>,
    /// Joins the tenant's cache salt.
    #[schema(min_length = 1, max_length = 256)]
    pub cache_salt: Option<String>,
    /// This request's own deadline in milliseconds (it can only shorten
    /// `--request-timeout-ms`); past it, 504 and the work is dropped.
    #[schema(minimum = 1, maximum = 86_400_000)]
    pub timeout_ms: Option<u64>,
    /// decide's extension: return the prompts each field was read with, in `prompts` by
    /// field name (default false).
    pub return_prompt: Option<bool>,
}

/// 1 to `--schema-max-fields` (64) fields by name (1 to 128 characters, no control characters).
#[derive(Debug, Clone, Deserialize)]
pub struct FieldSchema(pub HashMap<String, FieldSpec>);

impl utoipa::PartialSchema for FieldSchema {
    fn schema() -> RefOr<Schema> {
        let names = ObjectBuilder::new()
            .min_length(Some(1))
            .max_length(Some(128))
            .pattern(Some(r"^[^\x00-\x1f\x7f-\x9f]*$"));
        bounded_map::<FieldSpec>(1, 64, names, false)
    }
}
impl ToSchema for FieldSchema {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        register::<FieldSpec>(schemas);
    }
}

/// A field: a boolean or one of listed strings.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum FieldSpec {
    Boolean(BooleanField),
    Enum(EnumField),
}

/// `boolean`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BooleanType {
    Boolean,
}

/// `enum`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnumType {
    Enum,
}

/// A yes/no field.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BooleanField {
    #[serde(rename = "type")]
    pub kind: BooleanType,
    /// What the field means, asked after `Field: <name>`.
    #[schema(pattern = r"\S", max_length = 4000)]
    pub description: String,
}

/// One of 2 to 255 distinct, non-blank strings of at most 1,000 characters.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnumField {
    #[serde(rename = "type")]
    pub kind: EnumType,
    #[schema(pattern = r"\S", max_length = 4000)]
    pub description: String,
    #[schema(min_items = 2, max_items = 255, inline)]
    pub choices: Vec<EnumChoice>,
}

/// A choice: not blank, at most 1,000 characters.
#[derive(Debug, Clone, Deserialize)]
pub struct EnumChoice(pub String);

impl utoipa::PartialSchema for EnumChoice {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(r"\S"))
            .max_length(Some(1000))
            .into()
    }
}
impl ToSchema for EnumChoice {}

/// `strategy`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Auto,
    Batch,
    PrefillThenBatch,
    AlignedPrefill,
}

/// A value per field (null where it abstained), each field's candidates, and what the engine
/// did.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldsResponse {
    #[schema(value_type = HashMap<String, AnyJson>)]
    pub parsed_json: HashMap<String, serde_json::Value>,
    pub fields: HashMap<String, FieldResult>,
    /// Every field's correction was measured (not a default or the request's temperature).
    pub scores_are_calibrated: bool,
    pub abstained_fields: Vec<String>,
    /// What the engine did: always `prefill_then_batch`.
    pub strategy: Strategy,
    pub requested_strategy: Strategy,
    pub backend_requests: u64,
    pub elapsed_ms: f64,
    pub usage: StructuredUsage,
    pub max_prompt_tokens: u64,
    pub cache_block_tokens: u64,
    pub audit: StructuredAudit,
    /// With `return_prompt`: by field name, the prompts of every field whose prompts were
    /// rendered.
    #[serde(default)]
    #[schema(required = false)]
    pub prompts: HashMap<String, QuestionPrompt>,
}

/// A field's decision.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldResult {
    /// The value, or null when it abstained or failed.
    #[schema(value_type = AnyJson)]
    pub value: serde_json::Value,
    /// The most probable value even when it abstained (null when it failed).
    #[schema(value_type = AnyJson)]
    pub selected_value: serde_json::Value,
    pub probability: Option<f64>,
    pub abstained: bool,
    pub candidate_probability_mass: Option<f64>,
    pub candidates: Vec<FieldCandidate>,
    #[serde(default)]
    #[schema(required = false)]
    pub error: Option<CodedMessage>,
}

/// A candidate: its value, the label the model answers with, its calibrated probability and
/// the label's log-probability (null if not finite).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FieldCandidate {
    #[schema(value_type = AnyJson)]
    pub value: serde_json::Value,
    pub label: String,
    pub probability: Option<f64>,
    pub logprob: Option<f64>,
}

/// The statuses of `POST /v1/systemone/batch`.
#[derive(IntoResponses)]
pub enum BatchResponses {
    /// Every item, answered or failed alone.
    #[response(status = 200)]
    Ok(BatchResponse),
    /// The key is missing or not valid.
    #[response(status = 401)]
    Unauthorized(JevError),
    /// `model` is not a name of the served model.
    #[response(status = 404)]
    UnknownModel(JevError),
    /// The body, or the state over all items (`--batch-max-input-bytes`), is too large.
    #[response(status = 413)]
    TooLarge(JevValidationError),
    /// `multipart/form-data` or a `Content-Encoding` other than zstd.
    #[response(status = 415)]
    UnsupportedMedia(JevError),
    /// An invalid batch (body, shared questions, no items, too many items).
    #[response(status = 422)]
    Unprocessable(JevValidationError),
    /// A tenant's rate, concurrency or queue limit.
    #[response(status = 429)]
    RateLimited(JevError),
    /// The server is loading or draining, or its queue is full (`overloaded`).
    #[response(status = 503)]
    NotReady(JevError),
    /// Past the request's deadline (`timeout_ms`, `--request-timeout-ms`); its work is dropped.
    #[response(status = 504)]
    Timeout(JevError),
}

/// The statuses of `POST /v1/classify` and `POST /plugins/jev-decison/infer`.
#[derive(IntoResponses)]
pub enum ClassifyResponses {
    /// The value and its decisions.
    #[response(status = 200)]
    Ok(ClassifyResponse),
    /// A generation mode or an output-token budget, which this server does not offer; or
    /// every field refused with 400.
    #[response(status = 400)]
    BadRequest(JevValidationError),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(JevError),
    #[response(
        status = 404,
        description = "`model` is not a name of the served model."
    )]
    UnknownModel(JevError),
    /// The body, the state or the schema is over its limit.
    #[response(status = 413)]
    TooLarge(JevValidationError),
    #[response(
        status = 415,
        description = "`multipart/form-data` or an unknown `Content-Encoding`."
    )]
    UnsupportedMedia(JevError),
    /// An invalid request or a schema it cannot decide (naming the schema's pointer), or every
    /// field refused.
    #[response(status = 422)]
    Unprocessable(JevValidationError),
    #[response(
        status = 429,
        description = "A tenant's rate, concurrency or queue limit."
    )]
    RateLimited(JevError),
    /// Every field failed on the model (`engine_error`: a failed pass).
    #[response(status = 502)]
    BadGateway(JevError),
    /// The server is loading or draining, or its queue is full (`overloaded`).
    #[response(status = 503)]
    NotReady(JevError),
    /// Past the request's deadline (`timeout_ms`, `--request-timeout-ms`); its work is dropped.
    #[response(status = 504)]
    Timeout(JevError),
}

/// The statuses of `POST /v1/fields`.
#[derive(IntoResponses)]
pub enum FieldsResponses {
    /// Each field's decision.
    #[response(status = 200)]
    Ok(FieldsResponse),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(JevError),
    #[response(status = 413, description = "The body is over `--max-body-bytes`.")]
    TooLarge(JevValidationError),
    #[response(
        status = 415,
        description = "`multipart/form-data` or an unknown `Content-Encoding`."
    )]
    UnsupportedMedia(JevError),
    /// An invalid request (each rule of the format), or every field failed on a prompt over
    /// the model's context.
    #[response(status = 422)]
    Unprocessable(JevValidationError),
    #[response(
        status = 429,
        description = "A tenant's rate, concurrency or queue limit."
    )]
    RateLimited(JevError),
    #[response(status = 502, description = "Every field failed on the model.")]
    BadGateway(JevError),
    /// The server is loading or draining, or its queue is full (`overloaded`).
    #[response(status = 503)]
    NotReady(JevError),
    /// Past the request's deadline (`timeout_ms`, `--request-timeout-ms`); its work is dropped.
    #[response(status = 504)]
    Timeout(JevError),
}

/// The statuses of `GET /plugins/jev-decison/capabilities`.
#[derive(IntoResponses)]
pub enum CapabilitiesResponses {
    /// Modes, supported constructs and limits.
    #[response(status = 200)]
    Ok(Capabilities),
}

/// `{code, message}` of a failed question or field.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodedMessage {
    /// `invalid_question`, `plugin_failed`, `readout_capacity`, `context_length_exceeded`,
    /// `low_option_mass`, `model_failed`, ...
    pub code: String,
    pub message: String,
}
