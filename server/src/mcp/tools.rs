//! The tools a caller sees and what calling each does.
//!
//! - `decide`: a `/v1/systemone` body (a state and typed questions), answered by the same code
//!   as that endpoint; the structured result is that endpoint's response plus, by question id,
//!   each answer's `probabilities` over its options and its `audit` block.
//! - `classify`: a `/v1/classify` body (a state, a question and a closed JSON Schema); the
//!   structured result is that endpoint's response (values, per-field probabilities, audit).
//! - one tool per question type the caller has ([`super::typed`]).
//!
//! The input schemas of `decide` and `classify` are the endpoints' request bodies from the
//! OpenAPI document, with this server's limits ([`super::schemas`]).

use std::sync::{Arc, OnceLock};

use rmcp::model::Tool;
use serde_json::{json, Map, Value};

use super::{schemas, typed};
use crate::error::ApiError;
use crate::frontends::{audit, classify, systemone};
use crate::loc;
use crate::pipeline::{Engine, Outcome};
use crate::state::SharedState;
use crate::tenancy::Caller;

/// The tool asking typed questions about a state (`/v1/systemone`'s body).
pub const DECIDE: &str = "decide";
/// The tool filling a closed JSON Schema (`/v1/classify`'s body).
pub const CLASSIFY: &str = "classify";

const DECIDE_DESCRIPTION: &str = "Answer typed questions about a state with calibrated probabilities read from the model's \
next-token distribution (no text is generated). `state` is text or JSON; `questions` maps an id to a question: \
{\"type\": \"noul\", \"instructions\": \"...\"} (yes/no), {\"type\": \"choice\", \"instructions\": \"...\", \
\"criteria\": {\"label\": \"description or null\", ...}}, {\"type\": \"score\", \"instructions\": \"...\", \
\"criteria\": [\"low\", \"mid\", \"high\"]}, or any other type this server has (see the other tools). The same body \
as POST /v1/systemone, with the same answers; the result adds each answer's probabilities over its options and its audit.";

const CLASSIFY_DESCRIPTION: &str = "Fill a JSON Schema of closed sets (enum, boolean, bounded integer, const, closed \
objects, fixed-length arrays) from a state: every field the model decides is one question over the state, read in one \
shared pass, with its probability and candidates. The same body as POST /v1/classify, with the same answer.";

/// What a tool call gave.
pub enum Called {
    /// The tool answered: a short text for clients that read only text, and the structured
    /// result.
    Answer { text: String, structured: Value },
    /// No tool of that name is served to this caller (a JSON-RPC error, not a tool error).
    UnknownTool(String),
}

/// A tool's input schema (a JSON Schema object).
type Schema = Arc<Map<String, Value>>;

/// The input schemas of `decide` and `classify`, with this server's limits.
struct BodySchemas {
    decide: Schema,
    classify: Schema,
}

fn body_schemas(state: &SharedState) -> &'static BodySchemas {
    static SCHEMAS: OnceLock<BodySchemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let document = crate::openapi::document_for(&state.config);
        let body = |path| Arc::new(schemas::request_body(&document, path).unwrap_or_default());
        BodySchemas {
            decide: body("/v1/systemone"),
            classify: body("/v1/classify"),
        }
    })
}

/// Every tool `caller` may call, `decide` and `classify` first.
pub fn catalogue(state: &SharedState, engine: &Engine, caller: &Caller) -> Vec<Tool> {
    let BodySchemas { decide, classify } = body_schemas(state);
    let mut tools = vec![
        Tool::new(DECIDE, DECIDE_DESCRIPTION, decide.clone())
            .annotate(typed::annotations("Typed decisions about a state")),
        Tool::new(CLASSIFY, CLASSIFY_DESCRIPTION, classify.clone())
            .annotate(typed::annotations("JSON-Schema classification")),
    ];
    tools.extend(typed::tools(engine, caller, decide));
    tools
}

/// Calls the tool `name` with `arguments` for `caller`.
pub async fn call(
    state: &SharedState,
    caller: &Caller,
    name: &str,
    arguments: &Value,
) -> Result<Called, ApiError> {
    let engine = state.engine()?;
    check_size(state, arguments)?;
    match name {
        DECIDE => {
            let request_id = crate::frontends::request_id("req");
            let answered = systemone::answer(state, caller, engine, arguments, &request_id).await?;
            let mut structured = answered.body;
            let mut probabilities = Map::new();
            let mut audits = Map::new();
            for (id, outcome) in answered.ids.iter().zip(&answered.decided.outcomes) {
                if let Outcome::Answer(answer) = outcome {
                    probabilities.insert(id.clone(), Value::Object(audit::probabilities(answer)));
                    audits.insert(id.clone(), Value::Object(audit::of_answer(answer, false)));
                }
            }
            let text = summary(&structured, &["answers", "partial_failures"]);
            structured["probabilities"] = Value::Object(probabilities);
            structured["audit"] = Value::Object(audits);
            Ok(Called::Answer { text, structured })
        }
        CLASSIFY => {
            let (structured, _) = classify::answer(state, caller, engine, arguments).await?;
            let text = summary(&structured, &["accepted", "value"]);
            Ok(Called::Answer { text, structured })
        }
        other => match typed::find(&engine, caller, other) {
            Some(question_type) => {
                let structured = question_type.ask(state, caller, engine, arguments).await?;
                let text = summary(&structured, &["answer"]);
                Ok(Called::Answer { text, structured })
            }
            None => Ok(Called::UnknownTool(format!(
                "no tool `{other}` here: tools/list names the tools this caller has"
            ))),
        },
    }
}

/// The arguments are held to `--max-body-bytes`, as an HTTP body is.
fn check_size(state: &SharedState, arguments: &Value) -> Result<(), ApiError> {
    let bytes = crate::frontends::json::compact(arguments).len();
    let limit = state.config.max_body_bytes;
    if bytes > limit {
        return Err(ApiError::TooLarge {
            loc: loc![],
            message: format!(
                "the tool arguments are {bytes} bytes, over the limit of {limit} (setting --max-body-bytes / DECIDE_MAX_BODY_BYTES)"
            ),
        });
    }
    Ok(())
}

/// The short text of a result: the named fields of `structured`, as compact JSON.
fn summary(structured: &Value, fields: &[&str]) -> String {
    let picked: Map<String, Value> = fields
        .iter()
        .filter_map(|field| Some((field.to_string(), structured.get(*field)?.clone())))
        .collect();
    json!(picked).to_string()
}
