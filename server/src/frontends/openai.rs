//! OpenAI's Decisions format: `POST /v1/decisions`.
//!
//! Request: `{model, input, questions: [{type, name?, instructions, ...}], prompt_cache_key?,
//! prompt_cache_options?, safety_identifier?, extra?}`; `input` is a string or a list of
//! messages and tool items, rendered to one text. Response: `{id, object, created, model,
//! answers: [...] in question order, usage}`; a failed question is a `refusal` answer with the
//! reason in `extra.error`. With `extra.return_prompt: true` every answer and refusal whose
//! prompts were rendered carries them in `extra.prompt` ([`super::prompts`]).

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::json::{self as j, at};
use crate::error::{ApiError, Loc, Wire};
use crate::loc;
use crate::pipeline::{Decided, DecisionRequest, Outcome, Question};
use crate::readout;
use crate::state::SharedState;
use crate::tenancy::Caller;

/// How much of the answer's `extra` block to return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detail {
    None,
    Basic,
    Full,
}

/// What the response needs besides the pipeline's outcomes.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) request: DecisionRequest,
    names: Vec<Option<String>>,
    types: Vec<String>,
    detail: Detail,
}

/// `POST /v1/decisions`: OpenAI's format, or the field-schema format when the body has
/// `context` and `schema` instead of `input` and `questions` (its errors then in its own
/// shape).
#[utoipa::path(post, path = "/v1/decisions", operation_id = "create_decision", tag = "decisions",
    request_body = crate::openapi::openai::DecisionsBody,
    responses(crate::openapi::openai::DecisionsResponses))]
pub async fn handle(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    let started = std::time::Instant::now();
    let is_fields = std::sync::atomic::AtomicBool::new(false);
    let mut response = match super::authenticated(&state, &headers, |caller| async {
        let value = super::read_json(&state, &headers, body, false).await?;
        if super::fields::is_fields_request(&value) {
            is_fields.store(true, std::sync::atomic::Ordering::Relaxed);
            return super::fields::run(&state, caller, value, started).await;
        }
        run(&state, caller, value).await
    })
    .await
    {
        Ok(response) => response,
        Err(error) if is_fields.into_inner() => error.into_response_for(Wire::SystemOne),
        Err(error) => error.into_response_for(Wire::OpenAi),
    };
    super::add_server_time(&mut response, started);
    response
}

async fn run(state: &SharedState, caller: Caller, value: Value) -> Result<Response, ApiError> {
    let engine = state.engine()?;
    let parsed = parse(&value, state.config.max_questions)?;
    let model = super::check_model(
        state,
        Wire::OpenAi,
        value.get("model").and_then(Value::as_str),
    )?;
    if let Some(id) = value.get("safety_identifier").and_then(Value::as_str) {
        tracing::info!(safety_identifier = id, "decision request");
    }
    let Parsed {
        mut request,
        names,
        types,
        detail,
    } = parsed;
    request.scope = super::request_scope(&caller);
    request.cache_salt = crate::frontends::cache_salt(
        &caller,
        value.get("prompt_cache_key").and_then(Value::as_str),
    );
    let (decided, request) = super::decide(state, &caller, engine, request).await?;
    let mut response =
        axum::Json(respond(&model, &request, &decided, &names, &types, detail)).into_response();
    super::add_step_times(&mut response, &decided);
    Ok(response)
}

pub(crate) fn parse(value: &Value, max_questions: usize) -> Result<Parsed, ApiError> {
    let root = loc![];
    let body = j::object(value, &root)?;
    j::only_fields(
        body,
        &[
            "model",
            "input",
            "questions",
            "prompt_cache_key",
            "prompt_cache_options",
            "safety_identifier",
            "extra",
        ],
        &root,
    )?;
    match j::required(body, "model", &root)? {
        Value::String(_) => {}
        other => {
            return Err(j::invalid(
                &loc!["model"],
                format!("expected a string, got {}", j::type_name(other)),
            ))
        }
    }
    for field in ["prompt_cache_key", "safety_identifier"] {
        if let Some(value) = body.get(field) {
            if !value.is_null() && !value.is_string() {
                return Err(j::invalid(
                    &loc![field],
                    format!("expected a string, got {}", j::type_name(value)),
                ));
            }
        }
    }
    if let Some(options) = body.get("prompt_cache_options").filter(|v| !v.is_null()) {
        let map = j::object(options, &loc!["prompt_cache_options"])?;
        j::only_fields(map, &["mode", "ttl"], &loc!["prompt_cache_options"])?;
    }
    let state = render_input(j::required(body, "input", &root)?, &loc!["input"])?;
    let Extra {
        temperature,
        detail,
        readout,
        renderer,
        min_option_mass,
        timeout,
        return_prompt,
    } = parse_extra(body.get("extra"))?;

    let questions_loc = loc!["questions"];
    let list = j::array(j::required(body, "questions", &root)?, &questions_loc)?;
    crate::pipeline::question_count(list.len(), max_questions, &questions_loc)?;
    let mut questions = Vec::with_capacity(list.len());
    let mut names: Vec<Option<String>> = Vec::with_capacity(list.len());
    let mut types = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let loc = at(&questions_loc, index);
        let map = j::object(item, &loc)?;
        let kind = j::string(j::required(map, "type", &loc)?, &at(&loc, "type"))?.to_string();
        let name = match map.get("name") {
            None => None,
            Some(Value::Null) => {
                return Err(j::invalid(
                    &at(&loc, "name"),
                    "must be a string when present; omit it for an unnamed question",
                ))
            }
            Some(value) => Some(j::name(value, &at(&loc, "name"))?.to_string()),
        };
        if let Some(name) = &name {
            if let Some(first) = names
                .iter()
                .position(|other| other.as_deref() == Some(name))
            {
                return Err(j::invalid(
                    &at(&loc, "name"),
                    format!("duplicate question name `{name}` (also questions[{first}].name); names must be unique"),
                ));
            }
        }
        let mut without_name: Map<String, Value> = map.clone();
        without_name.remove("name");
        questions.push(Question {
            loc: loc.clone(),
            plugin: format!("openai-{kind}"),
            json: j::compact(&Value::Object(without_name)),
        });
        names.push(name);
        types.push(kind);
    }
    Ok(Parsed {
        request: DecisionRequest {
            state,
            questions,
            temperature,
            cache_salt: 0,
            readout,
            renderer,
            min_option_mass,
            timeout,
            return_prompt,
            scope: Default::default(),
        },
        names,
        types,
        detail,
    })
}

/// `extra` of a request: decide's own options.
struct Extra {
    temperature: Option<f64>,
    detail: Detail,
    readout: readout::Options,
    renderer: Option<String>,
    min_option_mass: Option<f64>,
    /// `extra.timeout_ms`: the request's own deadline.
    timeout: Option<crate::cancel::Requested>,
    /// `extra.return_prompt`: every answer carries the prompts it was read with.
    return_prompt: bool,
}

/// Longest renderer name `extra.renderer` accepts (plugin names are file names).
const MAX_RENDERER_NAME: usize = 128;

/// `extra` of the request: decide's own options.
fn parse_extra(extra: Option<&Value>) -> Result<Extra, ApiError> {
    let Some(extra) = extra.filter(|v| !v.is_null()) else {
        return Ok(Extra {
            temperature: None,
            detail: Detail::Basic,
            readout: readout::Options::default(),
            renderer: None,
            min_option_mass: None,
            timeout: None,
            return_prompt: false,
        });
    };
    let loc = loc!["extra"];
    let map = j::object(extra, &loc)?;
    j::only_fields(
        map,
        &[
            "calibration_temperature",
            "backend_options",
            "seed",
            "detail",
            "renderer",
            "min_option_mass",
            "timeout_ms",
            "return_prompt",
        ],
        &loc,
    )?;
    let timeout = j::timeout_ms(map, "timeout_ms", &loc, "extra.timeout_ms of the request")?;
    let return_prompt = j::flag(map, "return_prompt", &loc)?;
    let renderer = match map.get("renderer").filter(|v| !v.is_null()) {
        None => None,
        Some(value) => {
            let loc = at(&loc, "renderer");
            let name = j::string(value, &loc)?;
            if name.is_empty() || name.len() > MAX_RENDERER_NAME {
                return Err(j::invalid(
                    &loc,
                    format!(
                        "a renderer plugin name of 1 to {MAX_RENDERER_NAME} bytes, got {} bytes",
                        name.len()
                    ),
                ));
            }
            Some(name.to_string())
        }
    };
    let min_option_mass = match map.get("min_option_mass").filter(|v| !v.is_null()) {
        None => None,
        Some(value) => {
            let loc = at(&loc, "min_option_mass");
            match value.as_f64() {
                Some(mass) if (0.0..=1.0).contains(&mass) => Some(mass),
                _ => {
                    return Err(j::invalid(
                        &loc,
                        format!("{value} is out of range; a probability mass from 0 to 1 (0: never abstain)"),
                    ))
                }
            }
        }
    };
    let temperature = match map.get("calibration_temperature") {
        None | Some(Value::Null) => None,
        Some(value) => {
            let loc = at(&loc, "calibration_temperature");
            let t = value.as_f64().ok_or_else(|| {
                j::invalid(
                    &loc,
                    format!("expected a number, got {}", j::type_name(value)),
                )
            })?;
            if !(t.is_finite() && t > 0.0 && t <= 100.0) {
                return Err(j::invalid(
                    &loc,
                    format!("{t} is out of range; a temperature is > 0 and <= 100"),
                ));
            }
            Some(t)
        }
    };
    if let Some(seed) = map.get("seed").filter(|v| !v.is_null()) {
        if !seed.is_i64() && !seed.is_u64() {
            return Err(j::invalid(
                &at(&loc, "seed"),
                "expected an integer (reads are deterministic; the seed is recorded only)",
            ));
        }
    }
    let readout = match map.get("backend_options").filter(|v| !v.is_null()) {
        Some(options) => parse_backend_options(options, &at(&loc, "backend_options"))?,
        None => readout::Options::default(),
    };
    let detail = match map.get("detail") {
        None | Some(Value::Null) => Detail::Basic,
        Some(Value::String(s)) if s == "none" => Detail::None,
        Some(Value::String(s)) if s == "basic" => Detail::Basic,
        Some(Value::String(s)) if s == "full" => Detail::Full,
        Some(other) => {
            return Err(j::invalid(
                &at(&loc, "detail"),
                format!("{other} is not one of none, basic, full"),
            ))
        }
    };
    Ok(Extra {
        temperature,
        detail,
        readout,
        renderer,
        min_option_mass,
        timeout,
        return_prompt,
    })
}

/// Most finalists `two-stage` reads directly (the single-letter labels).
const MAX_SHORTLIST: usize = 26;
/// Most label shifts `permutation` reads (each is one more read of the question).
const MAX_PERMUTATIONS: usize = 16;

/// `extra.backend_options`: `{readout?, shortlist?, permutations?, labels?}`. A
/// `permutations` count without a readout (or with `auto`) selects `permutation`.
fn parse_backend_options(value: &Value, loc: &Loc) -> Result<readout::Options, ApiError> {
    let map = j::object(value, loc)?;
    j::only_fields(
        map,
        &["readout", "shortlist", "permutations", "labels"],
        loc,
    )?;
    let mut options = readout::Options::default();
    if let Some(value) = map.get("labels").filter(|v| !v.is_null()) {
        let loc = at(loc, "labels");
        let name = j::string(value, &loc)?;
        options.labels = Some(readout::Scheme::parse(name).ok_or_else(|| {
            j::invalid(
                &loc,
                format!(
                    "`{name}` is not a label scheme; use one of {}",
                    readout::Scheme::NAMES.join(", ")
                ),
            )
        })?);
    }
    let mut named = false;
    if let Some(value) = map.get("readout").filter(|v| !v.is_null()) {
        let loc = at(loc, "readout");
        let name = value.as_str().ok_or_else(|| {
            j::invalid(
                &loc,
                format!("expected a string, got {}", j::type_name(value)),
            )
        })?;
        options.choice = readout::Choice::parse(name).ok_or_else(|| {
            j::invalid(
                &loc,
                format!(
                    "`{name}` is not a readout; use one of {}",
                    readout::Choice::NAMES.join(", ")
                ),
            )
        })?;
        named = options.choice != readout::Choice::Auto;
    }
    let count = |field: &str, min: usize, max: usize| -> Result<Option<usize>, ApiError> {
        let Some(value) = map.get(field).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let loc = at(loc, field);
        match value.as_u64() {
            Some(n) if (min as u64..=max as u64).contains(&n) => Ok(Some(n as usize)),
            _ => Err(j::invalid(
                &loc,
                format!("{value} is out of range; expected an integer from {min} to {max}"),
            )),
        }
    };
    if let Some(shortlist) = count(
        "shortlist",
        readout::two_stage::MIN_SHORTLIST,
        MAX_SHORTLIST,
    )? {
        options.shortlist = shortlist;
    }
    if let Some(permutations) = count("permutations", 1, MAX_PERMUTATIONS)? {
        match options.choice {
            readout::Choice::Auto | readout::Choice::Permutation => {
                options.choice = readout::Choice::Permutation;
                options.permutations = permutations;
            }
            other if named => {
                return Err(j::invalid(
                    &at(loc, "permutations"),
                    format!(
                        "applies to readout `permutation`, but readout is `{}`; drop one of them",
                        other.as_str()
                    ),
                ))
            }
            _ => unreachable!("a non-auto choice is always named"),
        }
    }
    Ok(options)
}

/// Renders `input` to the state text. A string (or a lone user message) is the text itself;
/// a conversation becomes one block per item, labelled by role.
pub(crate) fn render_input(input: &Value, loc: &Loc) -> Result<String, ApiError> {
    match input {
        Value::String(_) => Ok(j::string(input, loc)?.to_string()),
        Value::Array(items) => {
            if items.is_empty() {
                return Err(j::invalid(loc, "must not be an empty list"));
            }
            let mut blocks = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                blocks.push(render_item(item, &at(loc, index))?);
            }
            if let [(role, text)] = blocks.as_slice() {
                if role == "user" {
                    return Ok(text.clone());
                }
            }
            Ok(blocks
                .iter()
                .map(|(role, text)| format!("{}: {text}", title(role)))
                .collect::<Vec<_>>()
                .join("\n\n"))
        }
        other => Err(j::invalid(
            loc,
            format!(
                "expected a string or a list of messages, got {}",
                j::type_name(other)
            ),
        )),
    }
}

fn title(role: &str) -> String {
    let mut chars = role.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars)
            .collect::<String>()
            .replace('_', " "),
        None => String::new(),
    }
}

/// One input item as (role, text).
fn render_item(item: &Value, loc: &Loc) -> Result<(String, String), ApiError> {
    let map = j::object(item, loc)?;
    let kind = match map.get("type") {
        None => "message",
        Some(value) => j::string(value, &at(loc, "type"))?,
    };
    match kind {
        "message" => {
            j::only_fields(map, &["type", "role", "content", "phase"], loc)?;
            let role = j::string(j::required(map, "role", loc)?, &at(loc, "role"))?;
            let allowed: &[&str] = match role {
                "user" => &["input_text", "input_json", "input_image"],
                "developer" | "system" => &["input_text"],
                "assistant" => &["output_text", "refusal"],
                other => {
                    return Err(j::invalid(
                        &at(loc, "role"),
                        format!("`{other}` is not one of user, developer, system, assistant"),
                    ))
                }
            };
            let text = render_content(j::required(map, "content", loc)?, allowed, &at(loc, "content"))?;
            Ok((role.to_string(), text))
        }
        "function_call" | "custom_tool_call" => {
            let input_field = if kind == "function_call" { "arguments" } else { "input" };
            j::only_fields(map, &["type", "call_id", "name", input_field, "id", "namespace", "status"], loc)?;
            let name = j::string(j::required(map, "name", loc)?, &at(loc, "name"))?;
            let call_id = j::string(j::required(map, "call_id", loc)?, &at(loc, "call_id"))?;
            let input = match j::required(map, input_field, loc)? {
                Value::String(text) => text.clone(),
                other => {
                    return Err(j::invalid(&at(loc, input_field), format!("expected a string, got {}", j::type_name(other))))
                }
            };
            Ok(("tool_call".to_string(), format!("{name}({input}) [call {call_id}]")))
        }
        "function_call_output" | "custom_tool_call_output" => {
            j::only_fields(map, &["type", "call_id", "output", "id", "status"], loc)?;
            let call_id = j::string(j::required(map, "call_id", loc)?, &at(loc, "call_id"))?;
            let output = render_content(
                j::required(map, "output", loc)?,
                &["input_text", "input_image"],
                &at(loc, "output"),
            )?;
            Ok(("tool_output".to_string(), format!("[call {call_id}] {output}")))
        }
        other => Err(j::invalid(
            &at(loc, "type"),
            format!("`{other}` is not one of message, function_call, function_call_output, custom_tool_call, custom_tool_call_output"),
        )),
    }
}

/// Message content: a string, or a list of parts of the `allowed` types joined by newlines.
fn render_content(content: &Value, allowed: &[&str], loc: &Loc) -> Result<String, ApiError> {
    let parts = match content {
        Value::String(_) => return Ok(j::string(content, loc)?.to_string()),
        Value::Array(parts) if parts.is_empty() => {
            return Err(j::invalid(loc, "must not be an empty list"))
        }
        Value::Array(parts) => parts,
        other => {
            return Err(j::invalid(
                loc,
                format!(
                    "expected a string or a list of parts, got {}",
                    j::type_name(other)
                ),
            ))
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        let loc = at(loc, index);
        let map = j::object(part, &loc)?;
        let kind = j::string(j::required(map, "type", &loc)?, &at(&loc, "type"))?;
        if !allowed.contains(&kind) {
            return Err(j::invalid(
                &at(&loc, "type"),
                format!(
                    "`{kind}` is not allowed here; use one of {}",
                    allowed.join(", ")
                ),
            ));
        }
        let text = match kind {
            "input_text" | "output_text" => {
                j::only_fields(map, &["type", "text", "prompt_cache_breakpoint"], &loc)?;
                j::string(j::required(map, "text", &loc)?, &at(&loc, "text"))?.to_string()
            }
            "refusal" => {
                j::only_fields(map, &["type", "refusal"], &loc)?;
                j::string(j::required(map, "refusal", &loc)?, &at(&loc, "refusal"))?.to_string()
            }
            "input_json" => {
                j::only_fields(map, &["type", "data", "prompt_cache_breakpoint"], &loc)?;
                let data = j::required(map, "data", &loc)?;
                let data_loc = at(&loc, "data");
                match data {
                    Value::Object(_) => {}
                    Value::Array(items) if items.iter().all(Value::is_object) => {}
                    other => {
                        return Err(j::invalid(
                            &data_loc,
                            format!(
                                "expected an object or an array of objects, got {}",
                                j::type_name(other)
                            ),
                        ))
                    }
                }
                j::check_json_limits(data, &j::INPUT_JSON_LIMITS, &data_loc)?;
                j::compact(data)
            }
            _ => return Err(j::invalid(
                &at(&loc, "type"),
                "input_image is not supported: this server has no vision model; send text or JSON",
            )),
        };
        texts.push(text);
    }
    Ok(texts.join("\n"))
}

fn respond(
    model: &str,
    request: &DecisionRequest,
    decided: &Decided,
    names: &[Option<String>],
    types: &[String],
    detail: Detail,
) -> Value {
    let state_sha = super::state_sha256(&request.state);
    let answers: Vec<Value> = decided
        .outcomes
        .iter()
        .enumerate()
        .map(|(index, outcome)| {
            let name = names[index]
                .clone()
                .map(Value::String)
                .unwrap_or(Value::Null);
            match outcome {
                Outcome::Answer(answer) => {
                    let mut object = Map::new();
                    object.insert("type".into(), json!(types[index]));
                    object.insert("name".into(), name);
                    for (key, value) in &answer.fields {
                        object.insert(key.clone(), value.clone());
                    }
                    if detail != Detail::None {
                        let mut audit =
                            Value::Object(super::audit::of_answer(answer, detail == Detail::Full));
                        let mut extra = Map::new();
                        if detail == Detail::Full {
                            let logits: Map<String, Value> = answer
                                .option_keys
                                .iter()
                                .zip(&answer.logprobs)
                                .map(|(key, logprob)| {
                                    (super::audit::option_id(key), json!(logprob))
                                })
                                .collect();
                            extra.insert(
                                "backend".into(),
                                json!({"name": "decide", "option_logits": logits}),
                            );
                            let audit = audit.as_object_mut().expect("audit is an object");
                            audit.insert("served_model".into(), json!(model));
                            audit.insert("state_sha256".into(), json!(state_sha));
                            audit.insert("confidence_formula".into(), json!("(k*max-1)/(k-1)"));
                            audit.insert(
                                "render_version".into(),
                                json!(answer.rendering.render_version),
                            );
                            audit.insert(
                                "calibration_policy".into(),
                                json!(answer.calibration_policy),
                            );
                            audit.insert(
                                "calibration_params".into(),
                                json!(answer.calibration_params),
                            );
                            audit.insert("forward_passes".into(), json!(decided.forward_passes));
                            audit.insert("label_layout".into(), json!(answer.readout.labels));
                        }
                        extra.insert("audit".into(), audit);
                        object.insert("extra".into(), Value::Object(extra));
                    }
                    // Asked for explicitly, so returned whatever `detail` says.
                    if let Some(prompt) = &answer.prompt {
                        let extra = object
                            .entry("extra")
                            .or_insert_with(|| Value::Object(Map::new()));
                        extra["prompt"] = super::prompts::to_json(prompt);
                    }
                    Value::Object(object)
                }
                Outcome::Refusal(refusal) => {
                    let mut extra =
                        json!({"error": {"message": refusal.message, "code": refusal.code}});
                    if let Some(abstained) = &refusal.abstained {
                        extra["audit"] = json!({
                            "option_mass": abstained.option_mass,
                            "min_option_mass": abstained.min_option_mass,
                        });
                    }
                    if let Some(prompt) = &refusal.prompt {
                        extra["prompt"] = super::prompts::to_json(prompt);
                    }
                    json!({"type": "refusal", "name": name, "extra": extra})
                }
            }
        })
        .collect();
    json!({
        "id": super::request_id("dec"),
        "object": "decision",
        "created": super::unix_now(),
        "model": model,
        "answers": answers,
        "usage": {
            "input_tokens": decided.input_tokens,
            "input_tokens_details": {"cached_tokens": decided.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": decided.input_tokens,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_body(body: Value) -> Result<Parsed, ApiError> {
        parse(&body, 400)
    }

    #[test]
    fn a_lone_user_message_renders_as_its_text() {
        let plain = render_input(&json!("The printer is on fire."), &loc!["input"]).unwrap();
        let message = render_input(
            &json!([{"role": "user", "content": "The printer is on fire."}]),
            &loc!["input"],
        )
        .unwrap();
        let parts = render_input(
            &json!([{"role": "user", "content": [{"type": "input_text", "text": "The printer is on fire."}]}]),
            &loc!["input"],
        )
        .unwrap();
        assert_eq!(plain, message);
        assert_eq!(plain, parts);
    }

    #[test]
    fn conversations_keep_roles_and_tool_items() {
        let text = render_input(
            &json!([
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "input_json", "data": {"order": 42}}]},
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"id\":42}"},
                {"type": "function_call_output", "call_id": "c1", "output": "shipped"}
            ]),
            &loc!["input"],
        )
        .unwrap();
        assert_eq!(
            text,
            "System: Be brief.\n\nUser: {\"order\":42}\n\nTool call: lookup({\"id\":42}) [call c1]\n\nTool output: [call c1] shipped"
        );
    }

    #[test]
    fn images_are_refused_with_a_reason() {
        let error = render_input(
            &json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
            &loc!["input"],
        )
        .unwrap_err();
        assert!(error.to_string().contains("no vision model"), "{error}");
        assert_eq!(
            crate::error::dotted(match &error {
                ApiError::Invalid { loc, .. } => loc,
                _ => panic!(),
            }),
            "input[0].content[0].type"
        );
    }

    #[test]
    fn names_are_stripped_and_checked() {
        let parsed = parse_body(json!({
            "model": "m", "input": "x",
            "questions": [{"type": "predicate", "name": "urgent", "instructions": "Is it urgent?"}]
        }))
        .unwrap();
        assert_eq!(parsed.names, vec![Some("urgent".to_string())]);
        assert_eq!(parsed.request.questions[0].plugin, "openai-predicate");
        assert!(
            !parsed.request.questions[0].json.contains("urgent\""),
            "{}",
            parsed.request.questions[0].json
        );

        let null_name = parse_body(
            json!({"model": "m", "input": "x", "questions": [{"type": "predicate", "name": null, "instructions": "?"}]}),
        );
        assert!(null_name
            .unwrap_err()
            .to_string()
            .starts_with("questions[0].name"));
        let duplicate = parse_body(json!({"model": "m", "input": "x", "questions": [
            {"type": "predicate", "name": "a", "instructions": "?"}, {"type": "predicate", "name": "a", "instructions": "?"}]}));
        assert!(duplicate.unwrap_err().to_string().contains("duplicate"));
    }

    #[test]
    fn extra_options_are_validated() {
        let base = |extra: Value| {
            parse_body(
                json!({"model": "m", "input": "x", "questions": [{"type": "predicate", "instructions": "?"}], "extra": extra}),
            )
        };
        assert_eq!(
            base(json!({"calibration_temperature": 2.0}))
                .unwrap()
                .request
                .temperature,
            Some(2.0)
        );
        assert!(base(json!({"calibration_temperature": 0})).is_err());
        assert!(base(json!({"detail": "everything"})).is_err());
        assert!(
            base(json!({"return_prompt": true}))
                .unwrap()
                .request
                .return_prompt
        );
        assert!(!base(json!({})).unwrap().request.return_prompt);
        assert!(base(json!({"return_prompt": "yes"}))
            .unwrap_err()
            .to_string()
            .starts_with("extra.return_prompt: expected true or false"));
        assert!(base(json!({"surprise": 1}))
            .unwrap_err()
            .to_string()
            .contains("unknown field"));
    }
}
