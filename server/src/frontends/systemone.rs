//! TypeSafe's Jev format: `POST /v1/systemone`.
//!
//! Request: `{model?, state, questions: {id: {type, instructions?, criteria?}}}`; `state` is
//! text, a JSON object or an array (objects and arrays are shown to the model as compact JSON,
//! keys in the order sent). Response: `{id, created, model, answers: {id: {...}}, usage}` plus
//! `partial_failures` naming the questions that failed while others were answered, and with
//! `return_prompt: true` `prompts` by question id (the prompts each was read with, see
//! [`super::prompts`]). Validation errors are 422 with a `detail` list of `{loc, msg, type}`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::json::{self as j, at};
use crate::error::{ApiError, Loc, Wire};
use crate::loc;
use crate::pipeline::{Decided, DecisionRequest, Outcome, Question};
use crate::state::SharedState;
use crate::tenancy::Caller;

/// Response header the SDK reads as the request id.
const REQUEST_ID_HEADER: &str = "x-typesafe-request-id";

#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) request: DecisionRequest,
    ids: Vec<String>,
    types: Vec<String>,
}

/// A Jev question map, parsed: the pipeline's questions and each one's id and type, in the
/// order sent.
#[derive(Debug, Clone, Default)]
pub(crate) struct QuestionSet {
    pub questions: Vec<Question>,
    pub ids: Vec<String>,
    pub types: Vec<String>,
}

/// `POST /v1/systemone`.
#[utoipa::path(post, path = "/v1/systemone", operation_id = "system_one", tag = "decisions",
    request_body = crate::openapi::jev::SystemOneRequest,
    responses(crate::openapi::jev::SystemOneResponses))]
pub async fn handle(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    handle_jev(&state, &headers, |caller, request_id| {
        run(&state, caller, &headers, body, request_id)
    })
    .await
}

/// What every Jev endpoint does around its own work `run` (given the caller and the request
/// id): authentication, errors in Jev's shape, the request-id header the SDK reads, and the
/// server's time.
pub(super) async fn handle_jev<F, Fut>(state: &SharedState, headers: &HeaderMap, run: F) -> Response
where
    F: FnOnce(Caller, String) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ApiError>>,
{
    let started = std::time::Instant::now();
    let request_id = super::request_id("req");
    let id = request_id.clone();
    let mut response = match super::authenticated(state, headers, |caller| run(caller, id)).await {
        Ok(response) => response,
        Err(error) => error.into_response_for(Wire::SystemOne),
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    super::add_server_time(&mut response, started);
    response
}

async fn run(
    state: &SharedState,
    caller: Caller,
    headers: &HeaderMap,
    body: Body,
    request_id: String,
) -> Result<Response, ApiError> {
    let engine = state.engine()?;
    let value = super::read_json(state, headers, body, true).await?;
    let answered = answer(state, &caller, engine, &value, &request_id).await?;
    let mut response = axum::Json(answered.body).into_response();
    super::add_step_times(&mut response, &answered.decided);
    Ok(response)
}

/// What `/v1/systemone` answers for a body, and how it was decided.
pub(crate) struct Answered {
    /// The response body.
    pub(crate) body: Value,
    /// The pipeline's outcomes, in the order of `ids`.
    pub(crate) decided: Decided,
    /// The question ids, in the order sent.
    pub(crate) ids: Vec<String>,
}

/// Answers a Jev body for `caller`: parses and validates it, checks the model it names, and
/// runs its questions through the pipeline under the caller's limits. The one path from a
/// `/v1/systemone` body to its answer, for the HTTP endpoint and the MCP `decide` tool.
pub(crate) async fn answer(
    state: &SharedState,
    caller: &Caller,
    engine: std::sync::Arc<crate::pipeline::Engine>,
    value: &Value,
    request_id: &str,
) -> Result<Answered, ApiError> {
    let parsed = parse(value, state.config.max_questions)?;
    let model = super::check_model(state, Wire::SystemOne, requested_model(value)?)?;
    let Parsed {
        mut request,
        ids,
        types,
    } = parsed;
    request.scope = super::request_scope(caller);
    request.cache_salt = crate::frontends::cache_salt(&caller, None);
    let (decided, _request) = super::decide(state, caller, engine, request).await?;
    let body = respond(&model, request_id, &decided, &ids, &types);
    Ok(Answered { body, decided, ids })
}

/// The body's `model`, when it names one.
pub(super) fn requested_model(value: &Value) -> Result<Option<&str>, ApiError> {
    match value.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => Ok(Some(name.as_str())),
        Some(other) => Err(j::invalid(
            &loc!["model"],
            format!("expected a string, got {}", j::type_name(other)),
        )),
    }
}

pub(crate) fn parse(value: &Value, max_questions: usize) -> Result<Parsed, ApiError> {
    let root = loc![];
    // Unknown top-level fields are ignored, as TypeSafe's API does (its SDK and clients may
    // send fields this server has no use for); questions stay strict, their plugins decide.
    let body = j::object(value, &root)?;
    let state = parse_state(body, &root)?;
    let QuestionSet {
        questions,
        ids,
        types,
    } = parse_questions(
        j::required(body, "questions", &root)?,
        &loc!["questions"],
        max_questions,
    )?;
    let mut request = decision_request(state, questions);
    request.timeout = j::timeout_ms(body, "timeout_ms", &root, TIMEOUT_FIELD)?;
    request.return_prompt = j::flag(body, "return_prompt", &root)?;
    Ok(Parsed {
        request,
        ids,
        types,
    })
}

/// The `state` of a Jev body (or of a batch item at `loc`): text, or a JSON object or array
/// shown to the model as compact JSON. `assets` are refused: there is no vision model.
pub(crate) fn parse_state(object: &Map<String, Value>, loc: &Loc) -> Result<String, ApiError> {
    if object.get("assets").is_some_and(|assets| !assets.is_null()) {
        return Err(j::invalid(
            &at(loc, "assets"),
            "assets are not supported: this server has no vision model; send text or JSON state",
        ));
    }
    j::state_text(j::required(object, "state", loc)?, &at(loc, "state"))
}

/// A Jev question map `{id: {type, ...}}` at `loc`: between one and `max_questions`
/// questions, each naming its type (the plugin `systemone-<type>` validates the rest).
pub(super) fn parse_questions(
    value: &Value,
    loc: &Loc,
    max_questions: usize,
) -> Result<QuestionSet, ApiError> {
    let map = j::object(value, loc)?;
    crate::pipeline::question_count(map.len(), max_questions, loc)?;
    let mut set = QuestionSet::default();
    for (id, question) in map {
        let loc = at(loc, id.as_str());
        if id.trim().is_empty() {
            return Err(j::invalid(&loc, "question ids must not be empty"));
        }
        let object = j::object(question, &loc)?;
        let kind = j::string(j::required(object, "type", &loc)?, &at(&loc, "type"))?.to_string();
        set.questions.push(Question {
            loc,
            plugin: format!("systemone-{kind}"),
            json: j::compact(question),
        });
        set.ids.push(id.clone());
        set.types.push(kind);
    }
    Ok(set)
}

/// The pipeline's request for Jev questions about `state`; scope and salt are the caller's,
/// set by the handler.
pub(crate) fn decision_request(state: String, questions: Vec<Question>) -> DecisionRequest {
    DecisionRequest {
        state,
        questions,
        temperature: None,
        cache_salt: 0,
        // The Jev format has no backend-options slot: its questions read with `auto`.
        readout: crate::readout::Options::default(),
        renderer: None,
        min_option_mass: None,
        timeout: None,
        return_prompt: false,
        scope: Default::default(),
    }
}

/// How a 504 names the Jev formats' `timeout_ms` (our extension: the request's own deadline).
pub(crate) const TIMEOUT_FIELD: &str = "timeout_ms of the request";

fn respond(
    model: &str,
    request_id: &str,
    decided: &Decided,
    ids: &[String],
    types: &[String],
) -> Value {
    let mut response = Map::new();
    response.insert("id".into(), json!(request_id));
    response.insert("created".into(), json!(super::unix_now()));
    response.insert("model".into(), json!(model));
    response.extend(answered(decided, ids, types));
    Value::Object(response)
}

/// What a Jev response says about decided questions: `answers` by id, `usage`,
/// `partial_failures` when some failed while others were answered, and `prompts` by id when
/// the request asked for them.
pub(super) fn answered(decided: &Decided, ids: &[String], types: &[String]) -> Map<String, Value> {
    let mut answers = Map::new();
    let mut failures = Map::new();
    for (index, outcome) in decided.outcomes.iter().enumerate() {
        match outcome {
            Outcome::Answer(answer) => {
                let mut object = Map::new();
                object.insert("type".into(), json!(types[index]));
                for (key, value) in &answer.fields {
                    object.insert(key.clone(), value.clone());
                }
                answers.insert(ids[index].clone(), Value::Object(object));
            }
            Outcome::Refusal(refusal) => {
                failures.insert(
                    ids[index].clone(),
                    json!({"status": crate::error::refusal_status(refusal.kind).as_u16(), "code": refusal.code, "message": refusal.message}),
                );
            }
        }
    }
    let mut out = Map::new();
    out.insert("answers".into(), Value::Object(answers));
    out.insert(
        "usage".into(),
        usage(decided.input_tokens, decided.cached_tokens),
    );
    if !failures.is_empty() {
        out.insert("partial_failures".into(), Value::Object(failures));
    }
    let ids = ids.iter().map(String::as_str);
    if let Some(prompts) = super::prompts::by_key(&decided.outcomes, ids) {
        out.insert("prompts".into(), prompts);
    }
    out
}

/// Jev's `usage` object. `cached_input_tokens` is ours (the SDK ignores unknown usage
/// fields): input tokens whose KV came from a cache.
pub(crate) fn usage(input_tokens: usize, cached_tokens: usize) -> Value {
    json!({"input_tokens": input_tokens, "output_tokens": 0, "cached_input_tokens": cached_tokens})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_states_render_compactly_in_the_order_sent() {
        let parsed = parse(
            &json!({"state": {"subject": "Refund", "body": "Charged twice"}, "questions": {"q": {"type": "noul", "instructions": "Billing?"}}}),
            400,
        )
        .unwrap();
        assert_eq!(
            parsed.request.state,
            r#"{"subject":"Refund","body":"Charged twice"}"#
        );
        assert_eq!(parsed.request.questions[0].plugin, "systemone-noul");
    }

    #[test]
    fn assets_are_refused_and_unknown_top_level_fields_ignored() {
        let assets = parse(
            &json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}, "assets": {"a": {}}}),
            400,
        );
        assert!(assets.unwrap_err().to_string().contains("no vision model"));
        let unknown = parse(
            &json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}, "temperature": 1, "metadata": {"a": 1}}),
            400,
        );
        assert_eq!(unknown.unwrap().ids, ["q"]);
        let empty = parse(
            &json!({"state": "", "questions": {"q": {"type": "noul", "instructions": "?"}}}),
            400,
        );
        assert!(empty.unwrap_err().to_string().starts_with("state"));
    }

    #[test]
    fn return_prompt_is_a_boolean() {
        let body = |flag: Value| {
            parse(
                &json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}, "return_prompt": flag}),
                400,
            )
        };
        assert!(body(json!(true)).unwrap().request.return_prompt);
        assert!(!body(json!(null)).unwrap().request.return_prompt);
        let error = body(json!(1)).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("return_prompt: expected true or false"),
            "{error}"
        );
    }
}
