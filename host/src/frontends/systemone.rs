//! TypeSafe's Jev format: `POST /v1/systemone`.
//!
//! Request: `{model?, state, questions: {id: {type, instructions?, criteria?}}}`; `state` is
//! text, a JSON object or an array (objects and arrays are shown to the model as compact JSON,
//! keys in the order sent). Response: `{id, created, model, answers: {id: {...}}, usage}` plus
//! `partial_failures` naming the questions that failed while others were answered. Validation
//! errors are 422 with a `detail` list of `{loc, msg, type}`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::json::{self as j, at};
use crate::api::SharedState;
use crate::error::{ApiError, Wire};
use crate::loc;
use crate::pipeline::{Decided, DecisionRequest, Outcome, Question};
use crate::tenancy::Caller;

/// Response header the SDK reads as the request id.
const REQUEST_ID_HEADER: &str = "x-typesafe-request-id";

#[derive(Debug)]
struct Parsed {
    request: DecisionRequest,
    ids: Vec<String>,
    types: Vec<String>,
}

/// `POST /v1/systemone`.
pub async fn handle(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    let started = std::time::Instant::now();
    let request_id = super::request_id("req");
    let mut response = match super::authenticated(&state, &headers, |caller| {
        run(&state, caller, &headers, body, &request_id)
    })
    .await
    {
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
    request_id: &str,
) -> Result<Response, ApiError> {
    let engine = state.engine()?;
    let value = super::read_json(state, headers, body, true).await?;
    let parsed = parse(&value, state.config.max_questions)?;
    let requested = match value.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.as_str()),
        Some(other) => {
            return Err(j::invalid(
                &loc!["model"],
                format!("expected a string, got {}", j::type_name(other)),
            ))
        }
    };
    let model = super::check_model(state, Wire::SystemOne, requested)?;
    let Parsed {
        mut request,
        ids,
        types,
    } = parsed;
    request.scope = super::request_scope(&caller);
    request.cache_salt = caller.cache_salt(None);
    let (decided, _request) = super::decide(state, &caller, engine, request).await?;
    let mut response =
        axum::Json(respond(&model, request_id, &decided, &ids, &types)).into_response();
    super::add_step_times(&mut response, &decided);
    Ok(response)
}

fn parse(value: &Value, max_questions: usize) -> Result<Parsed, ApiError> {
    let root = loc![];
    let body = j::object(value, &root)?;
    j::only_fields(body, &["model", "state", "questions", "assets"], &root)?;
    if body.get("assets").is_some_and(|assets| !assets.is_null()) {
        return Err(j::invalid(
            &loc!["assets"],
            "assets are not supported: this server has no vision model; send text or JSON state",
        ));
    }
    let state = match j::required(body, "state", &root)? {
        Value::String(_) => j::string(&body["state"], &loc!["state"])?.to_string(),
        value @ (Value::Object(_) | Value::Array(_)) => j::compact(value),
        other => {
            return Err(j::invalid(
                &loc!["state"],
                format!(
                    "expected text, a JSON object or an array, got {}",
                    j::type_name(other)
                ),
            ))
        }
    };
    let questions_loc = loc!["questions"];
    let map = j::object(j::required(body, "questions", &root)?, &questions_loc)?;
    j::question_count(map.len(), max_questions, &questions_loc)?;
    let mut questions = Vec::with_capacity(map.len());
    let mut ids = Vec::with_capacity(map.len());
    let mut types = Vec::with_capacity(map.len());
    for (id, question) in map {
        let loc = at(&questions_loc, id.as_str());
        if id.trim().is_empty() {
            return Err(j::invalid(&loc, "question ids must not be empty"));
        }
        let object = j::object(question, &loc)?;
        let kind = j::string(j::required(object, "type", &loc)?, &at(&loc, "type"))?.to_string();
        questions.push(Question {
            loc,
            plugin: format!("systemone-{kind}"),
            json: j::compact(question),
        });
        ids.push(id.clone());
        types.push(kind);
    }
    Ok(Parsed {
        request: DecisionRequest {
            state,
            questions,
            temperature: None,
            cache_salt: 0,
            // The Jev format has no backend-options slot: its questions read with `auto`.
            readout: crate::readout::Options::default(),
            renderer: None,
            min_option_mass: None,
            scope: Default::default(),
        },
        ids,
        types,
    })
}

fn respond(
    model: &str,
    request_id: &str,
    decided: &Decided,
    ids: &[String],
    types: &[String],
) -> Value {
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
                    json!({"status": refusal.status.as_u16(), "code": refusal.code, "message": refusal.message}),
                );
            }
        }
    }
    let mut response = json!({
        "id": request_id,
        "created": super::unix_now(),
        "model": model,
        "answers": answers,
        // `cached_input_tokens` is ours (the SDK ignores unknown usage fields): input tokens
        // whose KV came from a cache.
        "usage": {"input_tokens": decided.input_tokens, "output_tokens": 0, "cached_input_tokens": decided.cached_tokens},
    });
    if !failures.is_empty() {
        response["partial_failures"] = Value::Object(failures);
    }
    response
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
    fn assets_and_unknown_fields_are_refused() {
        let assets = parse(
            &json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}, "assets": {"a": {}}}),
            400,
        );
        assert!(assets.unwrap_err().to_string().contains("no vision model"));
        let unknown = parse(
            &json!({"state": "x", "questions": {}, "temperature": 1}),
            400,
        );
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
        let empty = parse(
            &json!({"state": "", "questions": {"q": {"type": "noul", "instructions": "?"}}}),
            400,
        );
        assert!(empty.unwrap_err().to_string().starts_with("state"));
    }
}
