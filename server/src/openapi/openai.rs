//! OpenAI's Decisions format (`POST /v1/decisions`) and OpenAI's error shape, which the
//! operator endpoints (models, plugins, calibration, admin) use too.
//!
//! The parser is `crate::frontends::openai::parse`; the response is built there with `json!`
//! because each answer carries its question type plugin's own fields.

use serde::{Deserialize, Serialize};
use utoipa::{IntoResponses, ToSchema};

use super::jev::{JevError, JevValidationError};
use super::prompt::QuestionPrompt;
use super::structured::{CodedMessage, FieldsRequest, FieldsResponse};
use super::{AnyJson, NonBlank, NonEmptyText};

/// OpenAI's error body: `{"error": {message, type, param, code}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAiError {
    pub error: OpenAiErrorBody,
}

/// What went wrong, where, and its machine-readable code.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAiErrorBody {
    /// A sentence that names the field, the limit and the setting to change.
    pub message: String,
    /// The class of error, from the status.
    #[serde(rename = "type")]
    pub kind: OpenAiErrorType,
    /// The field at fault as a dotted path (`questions[2].choices`), or null for the request as
    /// a whole.
    pub param: Option<String>,
    /// Machine-readable: `value_error`, `missing`, `extra_forbidden`, `json_invalid`,
    /// `too_large`, `model_not_found`, `invalid_api_key`, `rate_limit_exceeded`, `not_ready`,
    /// a refusal code (`invalid_question`, `plugin_failed`, `context_length_exceeded`, ...), ...
    pub code: String,
}

/// OpenAI's error classes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpenAiErrorType {
    InvalidRequestError,
    AuthenticationError,
    PermissionError,
    RateLimitError,
    ServerError,
    /// A request past its deadline (`extra.timeout_ms`, `--request-timeout-ms`): 504.
    Timeout,
}

/// The body of `POST /v1/decisions`: OpenAI's shape, or the field-schema shape (`context` and
/// `schema` instead of `input` and `questions`; see `/v1/fields`), told apart by its fields.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DecisionsBody {
    Decisions(DecisionsRequest),
    Fields(FieldsRequest),
}

/// OpenAI's Decisions request. Unknown fields are refused (400), as OpenAI's API does.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionsRequest {
    /// The served model under any of its names (served name, file stem, `gpt-6-luna`); another
    /// name is 404.
    pub model: String,
    pub input: DecisionInput,
    /// The questions, answered in this order: 1 to `--max-questions` (default 400).
    #[schema(min_items = 1, max_items = 400)]
    pub questions: Vec<OpenAiQuestion>,
    /// Joins the caller's prefix-cache salt: requests with the same key share cached work.
    pub prompt_cache_key: Option<String>,
    /// Accepted for compatibility; caching is always on.
    pub prompt_cache_options: Option<PromptCacheOptions>,
    /// Recorded in the log only.
    pub safety_identifier: Option<String>,
    pub extra: Option<DecisionsExtra>,
}

/// `input`: the text the questions are about, or a conversation rendered to one text (a lone
/// user message is its text).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DecisionInput {
    #[schema(value_type = NonBlank)]
    Text(String),
    #[schema(value_type = InputItems)]
    Items(Vec<InputItem>),
}

/// One item of a conversation.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum InputItem {
    User(UserMessage),
    Instructions(InstructionsMessage),
    Assistant(AssistantMessage),
    Tool(ToolItem),
}

/// The `type` of a message item (it may be left out).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageType {
    Message,
}

/// A user message: text and JSON parts (images are refused: there is no vision model).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserMessage {
    #[serde(rename = "type", default)]
    #[schema(required = false)]
    pub kind: Option<MessageType>,
    pub role: UserRole,
    pub content: UserContent,
    #[schema(value_type = AnyJson, required = false)]
    pub phase: Option<serde_json::Value>,
}

/// `user`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UserRole {
    User,
}

/// A user message's content: text, or a non-empty list of parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum UserContent {
    #[schema(value_type = NonBlank)]
    Text(String),
    #[schema(value_type = UserParts)]
    Parts(Vec<UserPart>),
}

crate::openapi_non_empty_list!(
    /// At least one conversation item.
    InputItems, InputItem
);
crate::openapi_non_empty_list!(
    /// At least one part.
    UserParts, UserPart
);
crate::openapi_non_empty_list!(
    /// At least one part.
    InputTextParts, InputTextPart
);
crate::openapi_non_empty_list!(
    /// At least one part.
    AssistantParts, AssistantPart
);

/// A part of a user message. (Each part names its own `type`, so that it can refuse unknown
/// fields: utoipa's internally tagged enums put the tag beside a closed object.)
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum UserPart {
    InputText(InputTextPart),
    InputJson(JsonPart),
}

/// `input_text`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputTextType {
    InputText,
}

/// `{type: input_text, text}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputTextPart {
    #[serde(rename = "type")]
    pub kind: InputTextType,
    #[schema(value_type = NonBlank)]
    pub text: String,
    /// Accepted for compatibility.
    #[schema(value_type = AnyJson, required = false)]
    pub prompt_cache_breakpoint: Option<serde_json::Value>,
}

/// `output_text`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputTextType {
    OutputText,
}

/// `{type: output_text, text}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputTextPart {
    #[serde(rename = "type")]
    pub kind: OutputTextType,
    #[schema(value_type = NonBlank)]
    pub text: String,
    #[schema(value_type = AnyJson, required = false)]
    pub prompt_cache_breakpoint: Option<serde_json::Value>,
}

/// `input_json`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputJsonType {
    InputJson,
}

/// `{type: input_json, data}`: an object or an array of objects, shown to the model as compact
/// JSON (at most 32 levels, 10,000 values, 256 KiB).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonPart {
    #[serde(rename = "type")]
    pub kind: InputJsonType,
    pub data: JsonData,
    #[schema(value_type = AnyJson, required = false)]
    pub prompt_cache_breakpoint: Option<serde_json::Value>,
}

/// An object, or an array of objects.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum JsonData {
    Object(serde_json::Map<String, serde_json::Value>),
    Objects(Vec<serde_json::Map<String, serde_json::Value>>),
}

/// A system or developer message: text only.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InstructionsMessage {
    #[serde(rename = "type", default)]
    #[schema(required = false)]
    pub kind: Option<MessageType>,
    pub role: InstructionsRole,
    pub content: TextContent,
    #[schema(value_type = AnyJson, required = false)]
    pub phase: Option<serde_json::Value>,
}

/// `system` or `developer`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InstructionsRole {
    System,
    Developer,
}

/// Text, or a non-empty list of `input_text` parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum TextContent {
    #[schema(value_type = NonBlank)]
    Text(String),
    #[schema(value_type = InputTextParts)]
    Parts(Vec<InputTextPart>),
}

/// An assistant message: output text and refusals.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AssistantMessage {
    #[serde(rename = "type", default)]
    #[schema(required = false)]
    pub kind: Option<MessageType>,
    pub role: AssistantRole,
    pub content: AssistantContent,
    #[schema(value_type = AnyJson, required = false)]
    pub phase: Option<serde_json::Value>,
}

/// `assistant`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssistantRole {
    Assistant,
}

/// Text, or a non-empty list of `output_text` and `refusal` parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AssistantContent {
    #[schema(value_type = NonBlank)]
    Text(String),
    #[schema(value_type = AssistantParts)]
    Parts(Vec<AssistantPart>),
}

/// A part of an assistant message.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AssistantPart {
    OutputText(OutputTextPart),
    Refusal(RefusalPart),
}

/// `{type: refusal, refusal}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefusalPart {
    #[serde(rename = "type")]
    pub kind: RefusalType,
    #[schema(value_type = NonBlank)]
    pub refusal: String,
}

/// A tool call or its output, shown to the model as `name(input) [call id]`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ToolItem {
    FunctionCall(FunctionCall),
    CustomToolCall(CustomToolCall),
    Output(ToolOutput),
}

/// `function_call`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FunctionCallType {
    FunctionCall,
}

/// `custom_tool_call`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CustomToolCallType {
    CustomToolCall,
}

/// `function_call_output` or `custom_tool_call_output`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutputType {
    FunctionCallOutput,
    CustomToolCallOutput,
}

/// `{type: function_call, call_id, name, arguments}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionCall {
    #[serde(rename = "type")]
    pub kind: FunctionCallType,
    #[schema(value_type = NonBlank)]
    pub call_id: String,
    #[schema(value_type = NonBlank)]
    pub name: String,
    pub arguments: String,
    #[schema(value_type = AnyJson, required = false)]
    pub id: Option<serde_json::Value>,
    #[schema(value_type = AnyJson, required = false)]
    pub namespace: Option<serde_json::Value>,
    #[schema(value_type = AnyJson, required = false)]
    pub status: Option<serde_json::Value>,
}

/// `{type: custom_tool_call, call_id, name, input}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomToolCall {
    #[serde(rename = "type")]
    pub kind: CustomToolCallType,
    #[schema(value_type = NonBlank)]
    pub call_id: String,
    #[schema(value_type = NonBlank)]
    pub name: String,
    pub input: String,
    #[schema(value_type = AnyJson, required = false)]
    pub id: Option<serde_json::Value>,
    #[schema(value_type = AnyJson, required = false)]
    pub namespace: Option<serde_json::Value>,
    #[schema(value_type = AnyJson, required = false)]
    pub status: Option<serde_json::Value>,
}

/// `{type: function_call_output | custom_tool_call_output, call_id, output}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutput {
    #[serde(rename = "type")]
    pub kind: ToolOutputType,
    #[schema(value_type = NonBlank)]
    pub call_id: String,
    pub output: UserContent,
    #[schema(value_type = AnyJson, required = false)]
    pub id: Option<serde_json::Value>,
    #[schema(value_type = AnyJson, required = false)]
    pub status: Option<serde_json::Value>,
}

/// `prompt_cache_options`: accepted, not used (caching is always on).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptCacheOptions {
    #[schema(value_type = AnyJson, required = false)]
    pub mode: Option<serde_json::Value>,
    #[schema(value_type = AnyJson, required = false)]
    pub ttl: Option<serde_json::Value>,
}

/// A question of a built-in type. A plugin `openai-T` adds the type `T`; its plugin validates
/// its fields (a refusal of every question is the status of the first refusal: 422 for an
/// invalid question).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum OpenAiQuestion {
    Predicate(Predicate),
    Choice(OpenAiChoice),
    Score(OpenAiScore),
}

/// The built-in question types.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PredicateType {
    Predicate,
}

/// `choice`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChoiceType {
    Choice,
}

/// `score`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScoreType {
    Score,
}

/// A yes/no question: the answer's `probability` is p(true).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Predicate {
    #[serde(rename = "type")]
    pub kind: PredicateType,
    /// Unique within the request; echoed in the answer. Omit it rather than send null.
    #[serde(default)]
    #[schema(required = false, value_type = NonBlank)]
    pub name: String,
    pub instructions: Instructions,
}

/// One of 2 to 255 values.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAiChoice {
    #[serde(rename = "type")]
    pub kind: ChoiceType,
    #[serde(default)]
    #[schema(required = false, value_type = NonBlank)]
    pub name: String,
    pub instructions: Instructions,
    #[schema(min_items = 2, max_items = 255)]
    pub choices: Vec<ChoiceOption>,
}

/// A choice's value (distinct within the question) and what it means.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChoiceOption {
    pub value: ChoiceValue,
    pub description: Option<String>,
}

/// A non-empty string or a boolean.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ChoiceValue {
    #[schema(value_type = NonEmptyText)]
    Text(String),
    Flag(bool),
}

/// An ordinal score over 2 to 10 levels: `score` is the expected level index.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAiScore {
    #[serde(rename = "type")]
    pub kind: ScoreType,
    #[serde(default)]
    #[schema(required = false, value_type = NonBlank)]
    pub name: String,
    pub instructions: Instructions,
    #[schema(min_items = 2, max_items = 10)]
    pub levels: Vec<ScoreLevel>,
}

/// A level (labels distinct within the question).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScoreLevel {
    #[schema(value_type = NonBlank)]
    pub label: String,
    pub description: Option<String>,
}

/// Instructions: text, or a non-empty list of `input_text` / `input_json` parts.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum Instructions {
    #[schema(value_type = NonBlank)]
    Text(String),
    #[schema(value_type = UserParts)]
    Parts(Vec<UserPart>),
}

/// decide's own options.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionsExtra {
    /// The request's own calibration temperature (first before the tenant's, the operator's
    /// and the calibrated one).
    #[schema(exclusive_minimum = 0.0, maximum = 100.0)]
    pub calibration_temperature: Option<f64>,
    pub backend_options: Option<BackendOptions>,
    /// Recorded only: reads are deterministic.
    pub seed: Option<i64>,
    /// How much of each answer's `extra` to return (default `basic`).
    pub detail: Option<Detail>,
    /// A renderer plugin for this request.
    #[schema(min_length = 1, max_length = 128)]
    pub renderer: Option<String>,
    /// Answers whose option mass is below it become `low_option_mass` refusals.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_option_mass: Option<f64>,
    /// This request's own deadline in milliseconds (it can only shorten
    /// `--request-timeout-ms`); past it, 504 and the work is dropped.
    #[schema(minimum = 1, maximum = 86_400_000)]
    pub timeout_ms: Option<u64>,
    /// Return the prompts each question was read with (default false): every answer, and
    /// every refusal whose prompts were rendered, carries them in `extra.prompt`, whatever
    /// `detail` says. It changes nothing about how the questions are read.
    pub return_prompt: Option<bool>,
}

/// `extra.detail`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Detail {
    None,
    Basic,
    Full,
}

/// How the labels are read.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackendOptions {
    pub readout: Option<Readout>,
    /// Finalists `two-stage` reads directly.
    #[schema(minimum = 2, maximum = 26)]
    pub shortlist: Option<u32>,
    /// Cyclic label shifts `permutation` averages (selects `permutation` with `auto`; another
    /// named readout with it is 400).
    #[schema(minimum = 1, maximum = 16)]
    pub permutations: Option<u32>,
    pub labels: Option<LabelScheme>,
}

/// A readout.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Readout {
    Auto,
    Direct,
    WideDirect,
    TwoStage,
    Permutation,
}

/// A label scheme.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LabelScheme {
    Letters,
    Numbers,
    Words,
}

/// The answers, in question order.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DecisionResponse {
    /// `dec_...`.
    pub id: String,
    pub object: DecisionObject,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    pub answers: Vec<DecisionAnswer>,
    pub usage: DecisionUsage,
}

/// `decision`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionObject {
    Decision,
}

/// An answer or a refusal.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DecisionAnswer {
    Refusal(RefusalAnswer),
    Answer(Answer),
}

/// An answer: its question's type and name, the type plugin's fields (`probability` for
/// predicates; `choice`, `confidence`, `probabilities` for choices; `score`, `confidence`,
/// `probabilities` for scores; a plugin's own type adds its own), and the audit.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct Answer {
    /// The question's type (not `refusal`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The question's name, or null.
    pub name: Option<String>,
    /// Predicates: p(true).
    #[serde(default)]
    #[schema(required = false, minimum = 0.0, maximum = 1.0)]
    pub probability: f64,
    /// `(k*max - 1)/(k - 1)` over the calibrated probabilities.
    #[serde(default)]
    #[schema(required = false, minimum = 0.0, maximum = 1.0)]
    pub confidence: f64,
    /// Scores: `sum(i * p_i)`.
    #[serde(default)]
    #[schema(required = false, minimum = 0.0)]
    pub score: f64,
    /// Choices: the most probable value.
    #[serde(default)]
    #[schema(required = false, value_type = AnyJson)]
    pub choice: serde_json::Value,
    /// Choices and scores: each option's calibrated probability.
    #[serde(default)]
    #[schema(required = false)]
    pub probabilities: Vec<OptionProbability>,
    /// With `detail` basic or full, or `return_prompt`.
    #[serde(default)]
    #[schema(required = false)]
    pub extra: Option<AnswerExtra>,
}

/// An option's probability (scores add the level `label`; `value` is its index).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct OptionProbability {
    #[schema(value_type = AnyJson)]
    pub value: serde_json::Value,
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub probability: f64,
    #[serde(default)]
    #[schema(required = false)]
    pub label: String,
}

/// An answer's audit and, in full detail, the raw label log-probabilities; with
/// `return_prompt`, the prompts it was read with.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerExtra {
    /// With `detail` basic or full.
    #[serde(default)]
    #[schema(required = false)]
    pub audit: Option<AnswerAudit>,
    #[serde(default)]
    #[schema(required = false)]
    pub backend: Option<BackendDetail>,
    /// With `extra.return_prompt`.
    #[serde(default)]
    #[schema(required = false)]
    pub prompt: Option<QuestionPrompt>,
}

/// `{name: "decide", option_logits: {option: logprob}}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackendDetail {
    pub name: String,
    pub option_logits: std::collections::HashMap<String, f64>,
}

/// How an answer was read: the setup, the calibration, the option mass, the tokens; full
/// detail adds the rest (model, state hash, render version, label layout, policy).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AnswerAudit {
    pub calibration_temperature: f64,
    /// `request`, `tenant`, `operator`, `calibrated` or `default`.
    pub temperature_source: String,
    /// The true next-token probability mass on the option labels.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub option_mass: f64,
    pub min_option_mass: f64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub readout: String,
    pub renderer: String,
    pub label_scheme: String,
    /// `request`, `tenant`, `pinned`, `tuned` or `default`.
    pub setup_source: String,
}

/// A question that could not be answered; the others were.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefusalAnswer {
    #[serde(rename = "type")]
    pub kind: RefusalType,
    pub name: Option<String>,
    pub extra: RefusalExtra,
}

/// `refusal`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefusalType {
    Refusal,
}

/// Why, for an abstention the mass and the threshold, and with `extra.return_prompt` the
/// prompts when they were rendered (an abstention, a failed read or plugin call after it).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefusalExtra {
    pub error: CodedMessage,
    #[serde(default)]
    #[schema(required = false)]
    pub audit: Option<AbstentionAudit>,
    #[serde(default)]
    #[schema(required = false)]
    pub prompt: Option<QuestionPrompt>,
}

/// An abstention's option mass and the threshold it fell below.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AbstentionAudit {
    pub option_mass: f64,
    pub min_option_mass: f64,
}

/// OpenAI's usage block; no tokens are generated.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionUsage {
    pub input_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    #[schema(maximum = 0)]
    pub output_tokens: u64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
}

/// Input tokens whose KV came from the prefix cache.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
    pub cache_write_tokens: u64,
}

/// Always 0: nothing is generated.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputTokensDetails {
    #[schema(maximum = 0)]
    pub reasoning_tokens: u64,
}

/// What `/v1/decisions` answers in either shape.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DecisionsOk {
    Decisions(DecisionResponse),
    Fields(FieldsResponse),
}

/// An error of either shape of `/v1/decisions`: OpenAI's, or the field-schema format's
/// validation list.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DecisionsInvalid {
    OpenAi(OpenAiError),
    Fields(JevValidationError),
}

/// An error of either shape of `/v1/decisions`: OpenAI's, or the field-schema format's
/// `{detail: {error_type, message}}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum DecisionsFailed {
    OpenAi(OpenAiError),
    Fields(JevError),
}

/// The statuses of `POST /v1/decisions`. Errors of the OpenAI shape are OpenAI's; a body in
/// the field-schema shape gets that format's errors once it is read.
#[derive(IntoResponses)]
pub enum DecisionsResponses {
    /// The answers (OpenAI's shape), or the fields (field-schema shape).
    #[response(status = 200)]
    Ok(#[to_schema] DecisionsOk),
    /// Invalid request, naming the field (`param`), or every question refused with 400
    /// (a prompt over `--max-prompt-tokens`).
    #[response(status = 400)]
    BadRequest(OpenAiError),
    /// `--api-key` or tenants are configured and the key is missing or not valid.
    #[response(status = 401)]
    Unauthorized(OpenAiError),
    /// `model` is not a name of the served model.
    #[response(status = 404)]
    UnknownModel(OpenAiError),
    /// The body is over `--max-body-bytes`, or a request over a whole minute of a tenant's
    /// rate.
    #[response(status = 413)]
    TooLarge(#[to_schema] DecisionsInvalid),
    /// A `Content-Encoding` other than zstd, or `multipart/form-data`.
    #[response(status = 415)]
    UnsupportedMedia(OpenAiError),
    /// Every question refused (the first refusal: an invalid question, a plugin failure, an
    /// abstention), or an invalid field-schema body.
    #[response(status = 422)]
    Unprocessable(#[to_schema] DecisionsInvalid),
    /// A tenant's rate, concurrency or queue limit; `Retry-After` says when to retry.
    #[response(status = 429)]
    RateLimited(#[to_schema] DecisionsFailed),
    /// Every question (or field) failed on the model (`engine_error`: a failed pass).
    #[response(status = 502)]
    BadGateway(#[to_schema] DecisionsFailed),
    /// The server is loading or draining, or its queue is full (`overloaded`); with
    /// `Retry-After`.
    #[response(status = 503)]
    NotReady(#[to_schema] DecisionsFailed),
    /// Past the request's deadline (`extra.timeout_ms`, `--request-timeout-ms`); its work is
    /// dropped.
    #[response(status = 504)]
    Timeout(#[to_schema] DecisionsFailed),
}
