//! Field-schema decisions: `POST /v1/fields`, and `POST /v1/decisions` when the body has
//! `context` and `schema` instead of OpenAI's `input` and `questions`.
//!
//! Request: `{context, schema: {field: {type: "boolean" | "enum", description, choices?}},
//! strategy?, score_temperature?, min_probability?, cache_salt?}`, validated as that API
//! documents it (422 for each rule). Every field is a closed-set leaf
//! ([`crate::frontends::leaf`]) asked as one Jev question over the context, all of them in one
//! shared-prefix pass. Response: `parsed_json` (a value per field, null where it abstained),
//! `fields` with each field's candidates, whether the scores are calibrated, what the engine
//! did (`strategy`, `backend_requests`), time and token use; with `return_prompt: true` (decide's
//! extension) `prompts` by field name (see [`super::prompts`]).

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::json::{self as j, at};
use super::leaf::{self, Leaf, Values};
use crate::error::{ApiError, Wire};
use crate::loc;
use crate::pipeline::{Decided, DecisionRequest, Outcome, TemperatureSource};
use crate::state::SharedState;
use crate::tenancy::Caller;

/// The strategies a request may name. The engine always does the same: the context is
/// prefilled once and every field's own tokens are read in one batched pass over it, which
/// is what `prefill_then_batch` names; the response says so.
const STRATEGIES: &[&str] = &["auto", "batch", "prefill_then_batch", "aligned_prefill"];
/// What the engine does for every request.
const ENGINE_STRATEGY: &str = "prefill_then_batch";
/// The documented limits of the format (the input size and field count are settings).
const MAX_DESCRIPTION_CHARS: usize = 4_000;
const MAX_NAME_CHARS: usize = 128;
const MAX_CHOICE_CHARS: usize = 1_000;
const MAX_CHOICES: usize = 255;
const MAX_CACHE_SALT_CHARS: usize = 256;

/// A parsed field-schema request.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) context: String,
    pub(crate) names: Vec<String>,
    pub(crate) leaves: Vec<Leaf>,
    strategy: String,
    temperature: Option<f64>,
    min_probability: f64,
    cache_salt: Option<String>,
    /// `timeout_ms`: the request's own deadline.
    timeout: Option<crate::cancel::Requested>,
    /// `return_prompt`: the response carries each field's prompts.
    return_prompt: bool,
}

/// Is this body a field-schema request (`context` and `schema`, no `input` or `questions`)?
pub fn is_fields_request(value: &Value) -> bool {
    value.as_object().is_some_and(|body| {
        body.contains_key("context")
            && body.contains_key("schema")
            && !body.contains_key("input")
            && !body.contains_key("questions")
    })
}

/// `POST /v1/fields`.
#[utoipa::path(post, path = "/v1/fields", operation_id = "fields", tag = "structured",
    request_body = crate::openapi::structured::FieldsRequest,
    responses(crate::openapi::structured::FieldsResponses))]
pub async fn handle(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    let started = std::time::Instant::now();
    let mut response = match super::authenticated(&state, &headers, |caller| async {
        let value = super::read_json(&state, &headers, body, false).await?;
        run(&state, caller, value, started).await
    })
    .await
    {
        Ok(response) => response,
        Err(error) => error.into_response_for(Wire::SystemOne),
    };
    super::add_server_time(&mut response, started);
    response
}

/// Answers a field-schema request already read as JSON (also reached from
/// `/v1/decisions`).
pub async fn run(
    state: &SharedState,
    caller: Caller,
    value: Value,
    started: std::time::Instant,
) -> Result<Response, ApiError> {
    let engine = state.engine()?;
    let parsed = parse(
        &value,
        state.config.schema_max_input_chars,
        state.config.schema_max_fields,
    )?;
    let max_prompt_tokens = engine.limits().max_prompt_tokens;
    let request = DecisionRequest {
        state: parsed.context.clone(),
        questions: parsed.leaves.iter().map(Leaf::question).collect(),
        temperature: parsed.temperature,
        cache_salt: crate::frontends::cache_salt(&caller, parsed.cache_salt.as_deref()),
        readout: crate::readout::Options::default(),
        renderer: None,
        min_option_mass: None,
        timeout: parsed.timeout,
        return_prompt: parsed.return_prompt,
        scope: super::request_scope(&caller),
    };
    let decided = match super::decide(state, &caller, engine, request).await {
        Ok((decided, _)) => decided,
        Err(error) => return Err(as_fields_error(error)),
    };
    let mut response =
        axum::Json(respond(&parsed, &decided, started, max_prompt_tokens)).into_response();
    super::add_step_times(&mut response, &decided);
    Ok(response)
}

/// The format's statuses for a request whose every field failed: a prompt over the model's
/// context is a validation error (422), a failed model pass an engine failure (502).
fn as_fields_error(error: ApiError) -> ApiError {
    match error {
        ApiError::QuestionFailed {
            loc, message, code, ..
        } => {
            let status = match code {
                "model_failed" | "engine_error" => StatusCode::BAD_GATEWAY,
                _ => StatusCode::UNPROCESSABLE_ENTITY,
            };
            ApiError::QuestionFailed {
                status,
                loc,
                message,
                code,
            }
        }
        other => other,
    }
}

pub(crate) fn parse(
    value: &Value,
    max_input_chars: usize,
    max_fields: usize,
) -> Result<Parsed, ApiError> {
    let root = loc![];
    let body = j::object(value, &root)?;
    j::only_fields(
        body,
        &[
            "context",
            "schema",
            "strategy",
            "score_temperature",
            "min_probability",
            "cache_salt",
            "timeout_ms",
            "return_prompt",
        ],
        &root,
    )?;
    let timeout = j::timeout_ms(body, "timeout_ms", &root, "timeout_ms of the request")?;
    let return_prompt = j::flag(body, "return_prompt", &root)?;
    let context = j::string(j::required(body, "context", &root)?, &loc!["context"])?.to_string();
    let chars = context.chars().count();
    if chars > max_input_chars {
        return Err(j::invalid(
            &loc!["context"],
            format!("{chars} characters exceed the limit of {max_input_chars} (setting --schema-max-input-chars / DECIDE_SCHEMA_MAX_INPUT_CHARS)"),
        ));
    }
    let schema_loc = loc!["schema"];
    let schema = j::object(j::required(body, "schema", &root)?, &schema_loc)?;
    if schema.is_empty() || schema.len() > max_fields {
        return Err(j::invalid(
            &schema_loc,
            format!(
                "must have 1 to {max_fields} fields, got {} (setting --schema-max-fields / DECIDE_SCHEMA_MAX_FIELDS)",
                schema.len()
            ),
        ));
    }
    let mut names = Vec::with_capacity(schema.len());
    let mut leaves = Vec::with_capacity(schema.len());
    for (name, field) in schema {
        leaves.push(parse_field(name, field, &at(&schema_loc, name.as_str()))?);
        names.push(name.clone());
    }
    let strategy = match body.get("strategy") {
        None | Some(Value::Null) => "auto".to_string(),
        Some(Value::String(s)) if STRATEGIES.contains(&s.as_str()) => s.clone(),
        Some(other) => {
            return Err(j::invalid(
                &loc!["strategy"],
                format!(
                    "must be one of {}, got {}",
                    STRATEGIES.join(", "),
                    j::compact(other)
                ),
            ))
        }
    };
    let temperature = number_in(body, "score_temperature", 0.05, 10.0)?;
    let min_probability = number_in(body, "min_probability", 0.0, 1.0)?.unwrap_or(0.0);
    let cache_salt = match body.get("cache_salt") {
        None | Some(Value::Null) => None,
        Some(Value::String(salt))
            if !salt.is_empty() && salt.chars().count() <= MAX_CACHE_SALT_CHARS =>
        {
            Some(salt.clone())
        }
        Some(other) => {
            return Err(j::invalid(
                &loc!["cache_salt"],
                format!(
                "must be a non-empty string of at most {MAX_CACHE_SALT_CHARS} characters, got {}",
                j::type_name(other)
            ),
            ))
        }
    };
    Ok(Parsed {
        context,
        names,
        leaves,
        strategy,
        temperature,
        min_probability,
        cache_salt,
        timeout,
        return_prompt,
    })
}

/// An optional number within `[low, high]`.
fn number_in(
    body: &Map<String, Value>,
    field: &str,
    low: f64,
    high: f64,
) -> Result<Option<f64>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_f64() {
            Some(x) if (low..=high).contains(&x) => Ok(Some(x)),
            _ => Err(j::invalid(
                &loc![field],
                format!(
                    "must be a number from {low} to {high}, got {}",
                    j::compact(value)
                ),
            )),
        },
    }
}

fn parse_field(name: &str, field: &Value, loc: &crate::error::Loc) -> Result<Leaf, ApiError> {
    let count = name.chars().count();
    if count == 0 || count > MAX_NAME_CHARS || name.chars().any(char::is_control) {
        return Err(j::invalid(
            loc,
            format!(
                "a field name must be 1 to {MAX_NAME_CHARS} characters without control characters"
            ),
        ));
    }
    let map = j::object(field, loc)?;
    j::only_fields(map, &["type", "description", "choices"], loc)?;
    let kind = j::string(j::required(map, "type", loc)?, &at(loc, "type"))?;
    let description = j::string(
        j::required(map, "description", loc)?,
        &at(loc, "description"),
    )?;
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(j::invalid(
            &at(loc, "description"),
            format!("must be at most {MAX_DESCRIPTION_CHARS} characters"),
        ));
    }
    let values = match kind {
        "boolean" => {
            if map.contains_key("choices") {
                return Err(j::invalid(
                    &at(loc, "choices"),
                    "choices apply only to fields of type enum",
                ));
            }
            Values::Boolean
        }
        "enum" => Values::Listed(choices(
            j::required(map, "choices", loc)?,
            &at(loc, "choices"),
        )?),
        other => {
            return Err(j::invalid(
                &at(loc, "type"),
                format!("must be \"boolean\" or \"enum\", got {other:?}"),
            ))
        }
    };
    Ok(Leaf {
        loc: loc.clone(),
        instructions: format!("Field: {name}\n{description}"),
        values,
    })
}

/// An enum's choices: 2 to 255 distinct, non-blank strings of at most 1,000 characters.
fn choices(value: &Value, loc: &crate::error::Loc) -> Result<Vec<Value>, ApiError> {
    let list = j::array(value, loc)?;
    if list.len() < 2 || list.len() > MAX_CHOICES {
        return Err(j::invalid(
            loc,
            format!("must have 2 to {MAX_CHOICES} choices, got {}", list.len()),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, choice) in list.iter().enumerate() {
        let text = j::string(choice, &at(loc, i))?;
        if text.chars().count() > MAX_CHOICE_CHARS {
            return Err(j::invalid(
                &at(loc, i),
                format!("must be at most {MAX_CHOICE_CHARS} characters"),
            ));
        }
        if !seen.insert(text) {
            return Err(j::invalid(
                &at(loc, i),
                format!("duplicate choice {text:?}"),
            ));
        }
    }
    Ok(list.clone())
}

fn respond(
    parsed: &Parsed,
    decided: &Decided,
    started: std::time::Instant,
    max_prompt_tokens: usize,
) -> Value {
    let mut parsed_json = Map::new();
    let mut fields = Map::new();
    let mut abstained_fields = Vec::new();
    let mut calibrated = true;
    for ((name, leaf), outcome) in parsed
        .names
        .iter()
        .zip(&parsed.leaves)
        .zip(&decided.outcomes)
    {
        let field = match outcome {
            Outcome::Answer(answer) => {
                calibrated &= matches!(
                    answer.temperature_source,
                    TemperatureSource::Calibrated | TemperatureSource::Tenant
                );
                let decision = leaf.decide(answer);
                let abstained = decision.probability < parsed.min_probability;
                let candidates: Vec<Value> = decision
                    .candidates
                    .iter()
                    .map(|c| {
                        json!({"value": c.value, "label": c.label,
                               "probability": leaf::number(c.probability), "logprob": leaf::number(c.logprob)})
                    })
                    .collect();
                json!({
                    "value": if abstained { Value::Null } else { decision.value.clone() },
                    "selected_value": decision.value,
                    "probability": leaf::number(decision.probability),
                    "abstained": abstained,
                    "candidate_probability_mass": leaf::number(decision.candidate_mass),
                    "candidates": candidates,
                })
            }
            Outcome::Refusal(refusal) => json!({
                "value": null, "selected_value": null, "probability": null, "abstained": true,
                "candidate_probability_mass": refusal.abstained.map(|a| a.option_mass),
                "candidates": [],
                "error": {"code": refusal.code, "message": refusal.message},
            }),
        };
        if field["abstained"] == Value::Bool(true) {
            abstained_fields.push(name.clone());
        }
        parsed_json.insert(name.clone(), field["value"].clone());
        fields.insert(name.clone(), field);
    }
    let mut response = json!({
        "parsed_json": parsed_json,
        "fields": fields,
        "scores_are_calibrated": calibrated,
        "abstained_fields": abstained_fields,
        "strategy": ENGINE_STRATEGY,
        "requested_strategy": parsed.strategy,
        "backend_requests": decided.scheduler_jobs,
        "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
        "usage": super::classify::usage(Some(decided)),
        "max_prompt_tokens": max_prompt_tokens,
        "cache_block_tokens": crate::prefix_cache::BLOCK_TOKENS,
        "audit": super::classify::audit(decided),
    });
    let names = parsed.names.iter().map(String::as_str);
    if let Some(prompts) = super::prompts::by_key(&decided.outcomes, names) {
        response["prompts"] = prompts;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Value {
        json!({"context": "Charged twice, refund please.",
               "schema": {"refund": {"type": "boolean", "description": "Does the customer ask for a refund?"},
                          "team": {"type": "enum", "description": "Which team?", "choices": ["billing", "shipping"]}}})
    }

    fn rejected(change: impl Fn(&mut Value)) -> String {
        let mut body = valid();
        change(&mut body);
        match parse(&body, 100_000, 64) {
            Ok(_) => panic!("{body} parsed"),
            Err(error) => {
                assert_eq!(
                    error.status(Wire::SystemOne),
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "{error}"
                );
                error.to_string()
            }
        }
    }

    #[test]
    fn the_shape_is_told_apart_from_openais() {
        assert!(is_fields_request(&valid()));
        assert!(!is_fields_request(
            &json!({"input": "x", "questions": [], "context": "x", "schema": {}})
        ));
        assert!(!is_fields_request(
            &json!({"model": "m", "input": "x", "questions": []})
        ));
    }

    #[test]
    fn a_valid_request_parses_into_leaves_in_order() {
        let parsed = parse(&valid(), 100_000, 64).unwrap();
        assert_eq!(parsed.names, ["refund", "team"]);
        assert_eq!(parsed.leaves[0].values, Values::Boolean);
        assert_eq!(parsed.leaves[1].instructions, "Field: team\nWhich team?");
        assert_eq!(parsed.strategy, "auto");
    }

    #[test]
    fn every_documented_rule_is_a_422_naming_its_field() {
        type Change = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|b| b["context"] = json!("")), "context"),
            (
                Box::new(|b| b["context"] = json!("x".repeat(100_001))),
                "context: 100001 characters",
            ),
            (
                Box::new(|b| b["schema"] = json!({})),
                "schema: must have 1 to 64",
            ),
            (
                Box::new(|b| b["schema"]["team"]["choices"] = json!(["a"])),
                "schema.team.choices: must have 2",
            ),
            (
                Box::new(|b| b["schema"]["team"]["choices"] = json!(["a", "a"])),
                "schema.team.choices[1]: duplicate",
            ),
            (
                Box::new(|b| b["schema"]["team"]["choices"] = json!(["a", " "])),
                "schema.team.choices[1]: must not be empty",
            ),
            (
                Box::new(|b| b["schema"]["team"]["choices"] = json!(["a", "b".repeat(1001)])),
                "at most 1000",
            ),
            (
                Box::new(|b| b["schema"]["refund"]["description"] = json!("d".repeat(4001))),
                "at most 4000",
            ),
            (
                Box::new(|b| b["schema"]["refund"]["description"] = json!("")),
                "schema.refund.description",
            ),
            (
                Box::new(|b| b["schema"]["refund"]["choices"] = json!(["a", "b"])),
                "only to fields of type enum",
            ),
            (
                Box::new(|b| b["schema"]["refund"]["type"] = json!("string")),
                "schema.refund.type",
            ),
            (
                Box::new(|b| b["schema"]["refund"]["extra"] = json!(1)),
                "schema.refund.extra: unknown field",
            ),
            (
                Box::new(|b| {
                    b["schema"]["a\u{7}b"] = json!({"type": "boolean", "description": "x"})
                }),
                "control characters",
            ),
            (
                Box::new(|b| {
                    b["schema"]["n".repeat(129)] = json!({"type": "boolean", "description": "x"})
                }),
                "1 to 128",
            ),
            (Box::new(|b| b["extra"] = json!(1)), "extra: unknown field"),
            (
                Box::new(|b| b["score_temperature"] = json!(0.01)),
                "score_temperature: must be a number from 0.05 to 10",
            ),
            (
                Box::new(|b| b["min_probability"] = json!(1.5)),
                "min_probability",
            ),
            (Box::new(|b| b["cache_salt"] = json!("")), "cache_salt"),
            (
                Box::new(|b| b["cache_salt"] = json!("s".repeat(257))),
                "cache_salt",
            ),
            (
                Box::new(|b| b["strategy"] = json!("stream")),
                "strategy: must be one of",
            ),
            (
                Box::new(|b| b["return_prompt"] = json!("true")),
                "return_prompt: expected true or false",
            ),
        ];
        for (change, words) in cases {
            let message = rejected(change);
            assert!(
                message.contains(words),
                "{message} does not contain {words}"
            );
        }
        let mut many = valid();
        for i in 0..65 {
            many["schema"][format!("f{i}")] = json!({"type": "boolean", "description": "x"});
        }
        let error = parse(&many, 100_000, 64).unwrap_err().to_string();
        assert!(error.contains("--schema-max-fields"), "{error}");
    }
}
