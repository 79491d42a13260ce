//! JSON-Schema classification: `POST /v1/classify` (also `POST /plugins/jev-decison/infer`,
//! with `GET /plugins/jev-decison/capabilities`, so that clients of that format work
//! unchanged).
//!
//! Request: `{state, question, schema, mode?, min_confidence?, model?}`. The schema
//! ([`compile`]) becomes closed-set leaves; each leaf is one Jev question over the same state
//! ([`crate::frontends::leaf`]), with the question and the field's path as its instructions,
//! and every leaf of a request is read in one shared-prefix pass. Response: `accepted`,
//! `value` (the whole object, validated against the schema; null when a field misses
//! `min_confidence` or failed), `decisions` per field, `usage`, and with `return_prompt: true`
//! `prompts` by the fields' pointers (see [`super::prompts`]). Errors are Jev style: 422 with
//! a `detail` list naming the schema's JSON pointer, 400 for a mode this server has not.

pub mod compile;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::json as j;
use super::leaf::{self, Leaf};
use crate::error::{ApiError, Loc, LocPart, Wire};
use crate::loc;
use crate::pipeline::{Decided, DecisionRequest, Outcome};
use crate::state::SharedState;
use crate::tenancy::Caller;
use compile::{Compiled, SchemaLimits};

/// Request fields that ask for generated output: this server only classifies.
const OUTPUT_BUDGETS: &[&str] = &[
    "max_tokens",
    "max_new_tokens",
    "max_output_tokens",
    "max_completion_tokens",
    "output_token_budget",
];

/// The limits of this format in effect (all settings).
#[derive(Debug, Clone)]
pub struct ClassifyLimits {
    pub schema: SchemaLimits,
    /// Most characters of the state (`--schema-max-input-chars`).
    pub max_input_chars: usize,
    /// Most bytes of the schema as compact JSON (`--schema-max-bytes`).
    pub max_schema_bytes: usize,
}

impl ClassifyLimits {
    /// The server's limits for the structured formats.
    pub fn of(state: &SharedState) -> ClassifyLimits {
        let config = &state.config;
        ClassifyLimits {
            schema: SchemaLimits {
                max_fields: config.schema_max_fields,
                max_candidates: config.max_options,
                max_depth: config.schema_max_depth,
            },
            max_input_chars: config.schema_max_input_chars,
            max_schema_bytes: config.schema_max_bytes,
        }
    }
}

/// A parsed classification request.
pub(crate) struct Parsed {
    pub(crate) state: String,
    pub(crate) question: String,
    pub(crate) schema: Value,
    pub(crate) compiled: Compiled,
    pub(crate) min_confidence: f64,
    /// `timeout_ms`: the request's own deadline.
    pub(crate) timeout: Option<crate::cancel::Requested>,
    /// `return_prompt`: the response carries each asked field's prompts.
    pub(crate) return_prompt: bool,
}

/// `POST /v1/classify` and `POST /plugins/jev-decison/infer`.
#[utoipa::path(post, path = "/v1/classify", operation_id = "classify", tag = "structured",
    request_body = crate::openapi::structured::ClassifyRequest,
    responses(crate::openapi::structured::ClassifyResponses))]
pub async fn handle(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    let started = std::time::Instant::now();
    let mut response = match super::authenticated(&state, &headers, |caller| {
        run(&state, caller, &headers, body)
    })
    .await
    {
        Ok(response) => response,
        Err(error) => error.into_response_for(Wire::SystemOne),
    };
    super::add_server_time(&mut response, started);
    response
}

/// `GET /plugins/jev-decison/capabilities`: what this server classifies and its limits.
#[utoipa::path(get, path = "/plugins/jev-decison/capabilities", operation_id = "jev_decison_capabilities",
    tag = "structured", security(()), responses(crate::openapi::structured::CapabilitiesResponses))]
pub async fn capabilities(State(state): State<SharedState>) -> Response {
    use crate::openapi::structured::{Capabilities, CapabilityLimits};
    let limits = ClassifyLimits::of(&state);
    axum::Json(Capabilities {
        name: "jev-decison",
        model: state.served_model_name(),
        modes: vec!["classify"],
        schema_draft: compile::DRAFT_2020_12,
        supported: vec![
            "enum",
            "boolean",
            "integer with minimum and maximum",
            "const",
            "null",
            "anyOf/oneOf/type lists of these",
            "closed objects with every property required",
            "fixed-length arrays (prefixItems, items: false)",
        ],
        limits: CapabilityLimits {
            max_fields: limits.schema.max_fields,
            max_candidates_per_field: limits.schema.max_candidates,
            max_depth: limits.schema.max_depth,
            max_input_chars: limits.max_input_chars,
            max_schema_bytes: limits.max_schema_bytes,
        },
    })
    .into_response()
}

async fn run(
    state: &SharedState,
    caller: Caller,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let engine = state.engine()?;
    let value = super::read_json(state, headers, body, false).await?;
    let (body, decided) = answer(state, &caller, engine, &value).await?;
    let mut response = axum::Json(body).into_response();
    if let Some(decided) = &decided {
        super::add_step_times(&mut response, decided);
    }
    Ok(response)
}

/// Answers a classification body for `caller`: parses and compiles its schema, checks the
/// model it names, reads every field the model decides in one shared-prefix pass under the
/// caller's limits, and assembles the value. Returns the response body and how it was decided
/// (none when the schema fixes every field). The one path from a `/v1/classify` body to its
/// answer, for the HTTP endpoints and the MCP `classify` tool.
pub(crate) async fn answer(
    state: &SharedState,
    caller: &Caller,
    engine: std::sync::Arc<crate::pipeline::Engine>,
    value: &Value,
) -> Result<(Value, Option<Decided>), ApiError> {
    let parsed = parse(value, &ClassifyLimits::of(state))?;
    let model = super::check_model(
        state,
        Wire::SystemOne,
        value.get("model").and_then(Value::as_str),
    )?;
    // Validated before any model work: the whole answer is checked against it at the end.
    let validator = validator(&parsed.schema)?;
    let leaves = leaves(&parsed);
    let decided = if leaves.is_empty() {
        // Everything is fixed by the schema: nothing to ask.
        None
    } else {
        let request = DecisionRequest {
            state: parsed.state.clone(),
            questions: leaves.iter().map(Leaf::question).collect(),
            temperature: None,
            cache_salt: crate::frontends::cache_salt(&caller, None),
            readout: crate::readout::Options::default(),
            renderer: None,
            min_option_mass: None,
            timeout: parsed.timeout,
            return_prompt: parsed.return_prompt,
            scope: super::request_scope(caller),
        };
        Some(super::decide(state, caller, engine, request).await?.0)
    };
    let body = respond(&model, &parsed, &leaves, decided.as_ref(), &validator);
    Ok((body, decided))
}

pub(crate) fn parse(value: &Value, limits: &ClassifyLimits) -> Result<Parsed, ApiError> {
    let root = loc![];
    let body = j::object(value, &root)?;
    if let Some(field) = OUTPUT_BUDGETS.iter().find(|f| body.contains_key(**f)) {
        return Err(ApiError::BadRequest {
            loc: loc![*field],
            message: format!("{field}: this server classifies and generates no text, so output-token budgets do not apply; remove the field"),
        });
    }
    match body.get("mode") {
        None | Some(Value::Null) => {}
        Some(Value::String(mode)) if mode == "classify" => {}
        Some(other) => {
            return Err(ApiError::BadRequest {
                loc: loc!["mode"],
                message: format!(
                    "mode: {} is not available: this server only classifies (mode \"classify\"); generation is not offered",
                    j::compact(other)
                ),
            })
        }
    }
    j::only_fields(
        body,
        &[
            "state",
            "question",
            "schema",
            "mode",
            "min_confidence",
            "model",
            "timeout_ms",
            "return_prompt",
        ],
        &root,
    )?;
    let timeout = j::timeout_ms(body, "timeout_ms", &root, "timeout_ms of the request")?;
    let return_prompt = j::flag(body, "return_prompt", &root)?;
    let state = j::state_text(j::required(body, "state", &root)?, &loc!["state"])?;
    let chars = state.chars().count();
    if chars > limits.max_input_chars {
        return Err(ApiError::TooLarge {
            loc: loc!["state"],
            message: format!(
                "state: {chars} characters exceed the limit of {} (setting --schema-max-input-chars / DECIDE_SCHEMA_MAX_INPUT_CHARS)",
                limits.max_input_chars
            ),
        });
    }
    let question = j::string(j::required(body, "question", &root)?, &loc!["question"])?.to_string();
    let schema = j::required(body, "schema", &root)?.clone();
    let bytes = j::compact(&schema).len();
    if bytes > limits.max_schema_bytes {
        return Err(ApiError::TooLarge {
            loc: loc!["schema"],
            message: format!(
                "schema: {bytes} bytes exceed the limit of {} (setting --schema-max-bytes / DECIDE_SCHEMA_MAX_BYTES)",
                limits.max_schema_bytes
            ),
        });
    }
    let min_confidence = match body.get("min_confidence") {
        None | Some(Value::Null) => 0.0,
        Some(value) => match value.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => x,
            _ => {
                return Err(j::invalid(
                    &loc!["min_confidence"],
                    format!("expected a number from 0 to 1, got {}", j::compact(value)),
                ))
            }
        },
    };
    let compiled =
        compile::compile(&schema, &limits.schema).map_err(|error| schema_error(&schema, error))?;
    Ok(Parsed {
        state,
        question,
        schema,
        compiled,
        min_confidence,
        timeout,
        return_prompt,
    })
}

/// The Draft 2020-12 validator of the request's schema, or a 422 when it is not a valid
/// schema.
pub(crate) fn validator(schema: &Value) -> Result<jsonschema::Validator, ApiError> {
    jsonschema::draft202012::new(schema).map_err(|e| {
        j::invalid(
            &loc!["schema"],
            format!("not a valid Draft 2020-12 schema: {e}"),
        )
    })
}

/// A compile error as a 422 whose location is the schema's JSON pointer.
fn schema_error(schema: &Value, error: compile::SchemaError) -> ApiError {
    let loc = schema_loc(schema, &error.pointer);
    let pointer = if error.pointer.is_empty() {
        "/"
    } else {
        &error.pointer
    };
    ApiError::invalid(
        loc,
        format!(
            "schema at {pointer}: {} (nothing was asked of the model)",
            error.message
        ),
    )
}

/// The request location of a pointer into `schema`: `schema` and the pointer's segments,
/// each an index where it steps into an array and a field name otherwise (a property named
/// `0` is a field, as the body has it).
fn schema_loc(schema: &Value, pointer: &str) -> Loc {
    let mut loc: Loc = loc!["schema"];
    let mut at = Some(schema);
    for segment in compile::segments(pointer) {
        let (part, next) = match (at, segment.parse::<usize>()) {
            (Some(Value::Array(items)), Ok(index)) => (LocPart::Index(index), items.get(index)),
            (value, _) => {
                let next = value.and_then(|v| v.get(segment.as_str()));
                (LocPart::Field(segment), next)
            }
        };
        loc.push(part);
        at = next;
    }
    loc
}

/// Each leaf as the question the model is asked: the request's question, then the field's
/// path and its description.
pub(crate) fn leaves(parsed: &Parsed) -> Vec<Leaf> {
    parsed
        .compiled
        .leaves
        .iter()
        .map(|schema_leaf| {
            let mut instructions = parsed.question.clone();
            if !schema_leaf.path.is_empty() {
                instructions.push_str(&format!("\nField: {}", schema_leaf.path));
            }
            if let Some(description) = &schema_leaf.description {
                instructions.push_str(&format!("\n{description}"));
            }
            Leaf {
                loc: schema_loc(&parsed.schema, &schema_leaf.schema_pointer),
                instructions,
                values: schema_leaf.values.clone(),
            }
        })
        .collect()
}

fn respond(
    model: &str,
    parsed: &Parsed,
    leaves: &[Leaf],
    decided: Option<&Decided>,
    validator: &jsonschema::Validator,
) -> Value {
    let mut decisions = Vec::new();
    let mut chosen = Vec::with_capacity(leaves.len());
    let mut accepted = true;
    let outcomes = decided.map_or(&[][..], |d| d.outcomes.as_slice());
    for ((leaf, schema_leaf), outcome) in leaves.iter().zip(&parsed.compiled.leaves).zip(outcomes) {
        match outcome {
            Outcome::Answer(answer) => {
                let decision = leaf.decide(answer);
                let ok = decision.confidence >= parsed.min_confidence;
                accepted &= ok;
                let candidates: Vec<Value> = decision
                    .candidates
                    .iter()
                    .map(|c| json!({"value": c.value, "probability": leaf::number(c.probability)}))
                    .collect();
                decisions.push(json!({
                    "pointer": schema_leaf.pointer,
                    "value": decision.value,
                    "probability": leaf::number(decision.probability),
                    "confidence": leaf::number(decision.confidence),
                    "candidate_mass": leaf::number(decision.candidate_mass),
                    "accepted": ok,
                    "candidates": candidates,
                }));
                chosen.push(decision.value);
            }
            Outcome::Refusal(refusal) => {
                accepted = false;
                decisions.push(json!({
                    "pointer": schema_leaf.pointer,
                    "value": null,
                    "accepted": false,
                    "error": {"code": refusal.code, "message": refusal.message},
                }));
                chosen.push(Value::Null);
            }
        }
    }
    for (pointer, value) in parsed.compiled.shape.fixed() {
        decisions.push(json!({
            "pointer": pointer, "value": value, "probability": 1.0, "confidence": 1.0,
            "accepted": true, "fixed": true, "candidates": [{"value": value, "probability": 1.0}],
        }));
    }
    let value = parsed.compiled.shape.assemble(&chosen);
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    let mut response = json!({
        "id": super::request_id("cls"),
        "created": super::unix_now(),
        "model": model,
        "accepted": accepted && errors.is_empty(),
        "value": if accepted && errors.is_empty() { value } else { Value::Null },
        "decisions": decisions,
        "usage": usage(decided),
    });
    if accepted && !errors.is_empty() {
        // The assembled value should always satisfy the schema it was compiled from; if it
        // does not, say so rather than return it.
        response["validation_errors"] = json!(errors);
    }
    if let Some(decided) = decided {
        response["audit"] = audit(decided);
        let pointers = parsed.compiled.leaves.iter().map(|l| l.pointer.as_str());
        if let Some(prompts) = super::prompts::by_key(&decided.outcomes, pointers) {
            response["prompts"] = prompts;
        }
    }
    response
}

/// Token use: every prompt's tokens, those whose KV came from a cache, and what the model
/// computed (the shared input once plus each field's own tokens).
pub fn usage(decided: Option<&Decided>) -> Value {
    let (input, cached) = decided.map_or((0, 0), |d| (d.input_tokens, d.cached_tokens));
    json!({
        "input_tokens": input,
        "cached_input_tokens": cached,
        "computed_input_tokens": input - cached.min(input),
        "output_tokens": 0,
    })
}

/// How the request was read: model passes, scheduler jobs, the setup of its answers.
pub fn audit(decided: &Decided) -> Value {
    let first = decided.outcomes.iter().find_map(|o| match o {
        Outcome::Answer(answer) => Some(answer),
        Outcome::Refusal(_) => None,
    });
    let mut audit = Map::new();
    audit.insert("forward_passes".into(), json!(decided.forward_passes));
    audit.insert("backend_requests".into(), json!(decided.scheduler_jobs));
    if let Some(answer) = first {
        audit.insert("renderer".into(), json!(answer.rendering.renderer));
        audit.insert(
            "render_version".into(),
            json!(answer.rendering.render_version),
        );
        audit.insert(
            "label_scheme".into(),
            json!(answer.rendering.labels.as_str()),
        );
        audit.insert("readout".into(), json!(answer.readout.readout));
        audit.insert(
            "calibration_policy".into(),
            json!(answer.calibration_policy),
        );
        audit.insert(
            "temperature_source".into(),
            json!(answer.temperature_source.as_str()),
        );
    }
    Value::Object(audit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ClassifyLimits {
        ClassifyLimits {
            schema: SchemaLimits {
                max_fields: 64,
                max_candidates: 255,
                max_depth: 8,
            },
            max_input_chars: 100,
            max_schema_bytes: 200,
        }
    }

    fn error(body: Value) -> ApiError {
        match parse(&body, &limits()) {
            Err(error) => error,
            Ok(_) => panic!("{body} parsed"),
        }
    }

    #[test]
    fn modes_other_than_classify_and_output_budgets_are_400() {
        let base = json!({"state": "x", "question": "q?", "schema": {"type": "boolean"}});
        for (field, value) in [
            ("mode", json!("generate")),
            ("mode", json!("auto")),
            ("mode", json!(3)),
            ("max_tokens", json!(5)),
        ] {
            let mut body = base.clone();
            body[field] = value;
            let error = error(body);
            assert_eq!(
                error.status(Wire::SystemOne),
                axum::http::StatusCode::BAD_REQUEST,
                "{error}"
            );
            assert!(error.to_string().starts_with(field), "{error}");
        }
        let mut ok = base.clone();
        ok["mode"] = json!("classify");
        assert!(parse(&ok, &limits()).is_ok());
    }

    #[test]
    fn schema_errors_are_located_by_the_body_not_by_the_digits() {
        let body = json!({"state": "x", "question": "q?", "schema": {
            "type": "object", "additionalProperties": false, "required": ["0"],
            "properties": {"0": {"anyOf": [{"type": "string"}]}}}});
        let error = error(body);
        assert_eq!(
            error.loc(),
            [
                LocPart::Field("schema".into()),
                LocPart::Field("properties".into()),
                LocPart::Field("0".into()),
                LocPart::Field("anyOf".into()),
                LocPart::Index(0),
                LocPart::Field("type".into()),
            ]
        );
    }

    #[test]
    fn limits_name_their_settings() {
        let long = error(
            json!({"state": "x".repeat(101), "question": "q?", "schema": {"type": "boolean"}}),
        );
        assert!(
            long.to_string().contains("--schema-max-input-chars"),
            "{long}"
        );
        let big = error(
            json!({"state": "x", "question": "q?", "schema": {"enum": ["y".repeat(300), "z"]}}),
        );
        assert!(big.to_string().contains("--schema-max-bytes"), "{big}");
        let schema = error(json!({"state": "x", "question": "q?", "schema": {"type": "string"}}));
        assert_eq!(
            schema.status(Wire::SystemOne),
            axum::http::StatusCode::UNPROCESSABLE_ENTITY
        );
        assert!(
            schema.to_string().starts_with("schema at /type: free text"),
            "{schema}"
        );
        let confidence = error(
            json!({"state": "x", "question": "q?", "schema": {"type": "boolean"}, "min_confidence": 2}),
        );
        assert!(
            confidence.to_string().starts_with("min_confidence"),
            "{confidence}"
        );
        let flag = error(
            json!({"state": "x", "question": "q?", "schema": {"type": "boolean"}, "return_prompt": "on"}),
        );
        assert!(
            flag.to_string()
                .starts_with("return_prompt: expected true or false"),
            "{flag}"
        );
    }
}
