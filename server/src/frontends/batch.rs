//! Batches of inputs on the Jev format: `POST /v1/systemone/batch`.
//!
//! Request: `{model?, questions?, items: [{state, questions?}, ...]}`. Each item is a state
//! asked its own `questions` (which replace the shared ones for that item) or the shared
//! top-level `questions`; an item with neither is an error of that item. Response:
//! `{id, created, model, items: [...], usage}` with the items in request order, each what
//! `/v1/systemone` answers for `{state, questions}` (`answers`, `usage`, `partial_failures`,
//! and `prompts` when the batch has `return_prompt: true`) or `{"error": {status, code,
//! message, loc}}`; the top-level `usage` sums the answered items.
//!
//! The batch is answered as one request ([`crate::pipeline::Engine::decide_items`]): the
//! shared questions are compiled once, every item's reads go to the model worker together,
//! and one item's failure (an invalid question of its own, an empty state, a limit) fails
//! that item only. What fails the whole batch (422, or 413 for sizes): a malformed body, the
//! shared `questions` invalid, no items, more than `--batch-max-items` items, or more than
//! `--batch-max-input-bytes` of state over all items.

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::json::{self as j, at};
use super::systemone::{self, QuestionSet};
use crate::config::Config;
use crate::error::{jev_loc, ApiError, Wire};
use crate::loc;
use crate::pipeline::{Decided, Item, StepTimes};
use crate::state::SharedState;
use crate::tenancy::Caller;

/// What bounds a batch before anything is computed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchLimits {
    /// `--batch-max-items`.
    pub(crate) max_items: usize,
    /// `--batch-max-input-bytes`: state bytes (as rendered) over all items.
    pub(crate) max_input_bytes: usize,
    /// `--max-questions`, for the shared questions and each item's own.
    pub(crate) max_questions: usize,
}

impl BatchLimits {
    fn of(config: &Config) -> BatchLimits {
        BatchLimits {
            max_items: config.batch_max_items,
            max_input_bytes: config.batch_max_input_bytes,
            max_questions: config.max_questions,
        }
    }
}

/// A batch body, parsed.
#[derive(Debug)]
pub(crate) struct Parsed {
    /// The shared questions (none sent: empty).
    pub(crate) shared: QuestionSet,
    /// Each item, or the error that fails it alone.
    pub(crate) items: Vec<Result<ParsedItem, ApiError>>,
    /// `timeout_ms`: the batch's own deadline.
    pub(crate) timeout: Option<crate::cancel::Requested>,
    /// `return_prompt`: every answered item carries its questions' prompts.
    pub(crate) return_prompt: bool,
}

/// One item that parsed.
#[derive(Debug)]
pub(crate) struct ParsedItem {
    pub(crate) state: String,
    /// Its own questions; `None`: the shared ones.
    pub(crate) own: Option<QuestionSet>,
}

/// How an item's answers are keyed: question ids and types, in question order.
type Keys = (Vec<String>, Vec<String>);

/// `POST /v1/systemone/batch`.
#[utoipa::path(post, path = "/v1/systemone/batch", operation_id = "system_one_batch", tag = "decisions",
    request_body = crate::openapi::structured::BatchRequest,
    responses(crate::openapi::structured::BatchResponses))]
pub async fn handle(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    systemone::handle_jev(&state, &headers, |caller, request_id| {
        run(&state, caller, &headers, body, request_id)
    })
    .await
}

async fn run(
    state: &SharedState,
    caller: Caller,
    headers: &HeaderMap,
    body: Body,
    request_id: String,
) -> Result<Response, ApiError> {
    let engine = state.engine()?;
    let value = super::read_json(state, headers, body, false).await?;
    let Parsed {
        shared,
        items,
        timeout,
        return_prompt,
    } = parse(&value, BatchLimits::of(&state.config))?;
    let model = super::check_model(state, Wire::SystemOne, systemone::requested_model(&value)?)?;
    let count = items.len();
    let QuestionSet {
        questions,
        ids,
        types,
    } = shared;
    let mut request = systemone::decision_request(String::new(), questions);
    request.timeout = timeout;
    request.return_prompt = return_prompt;
    request.scope = super::request_scope(&caller);
    request.cache_salt = crate::frontends::cache_salt(&caller, None);
    let (ready, slots) = split(items);
    let decided = super::decide_items(state, &caller, engine, request, ready).await?;
    state.metrics.record_item_batch(count);
    // Items refused before the pipeline count as single requests refused for bad input would.
    let usage = state.usage.of(caller.label());
    for error in slots.iter().filter_map(|slot| slot.as_ref().err()) {
        super::record_failure(&usage, error);
    }
    let (body, timings) = respond(&model, &request_id, &(ids, types), slots, decided);
    let mut response = axum::Json(body).into_response();
    super::add_timings(&mut response, &timings);
    Ok(response)
}

/// The items that go to the pipeline (those that parsed, located at `items[i]`), and per
/// item in request order its own answer keys (`None`: the shared ones) or its error.
fn split(
    items: Vec<Result<ParsedItem, ApiError>>,
) -> (Vec<Item>, Vec<Result<Option<Keys>, ApiError>>) {
    let mut ready = Vec::with_capacity(items.len());
    let mut slots = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let ParsedItem { state, own } = match item {
            Ok(item) => item,
            Err(error) => {
                slots.push(Err(error));
                continue;
            }
        };
        let (questions, keys) = match own {
            Some(set) => (Some(set.questions), Some((set.ids, set.types))),
            None => (None, None),
        };
        ready.push(Item {
            loc: loc!["items", index],
            state,
            questions,
        });
        slots.push(Ok(keys));
    }
    (ready, slots)
}

pub(crate) fn parse(value: &Value, limits: BatchLimits) -> Result<Parsed, ApiError> {
    let root = loc![];
    let body = j::object(value, &root)?;
    j::only_fields(
        body,
        &["model", "questions", "items", "timeout_ms", "return_prompt"],
        &root,
    )?;
    let timeout = j::timeout_ms(body, "timeout_ms", &root, systemone::TIMEOUT_FIELD)?;
    let return_prompt = j::flag(body, "return_prompt", &root)?;
    let shared = match body.get("questions") {
        None | Some(Value::Null) => None,
        Some(questions) => Some(systemone::parse_questions(
            questions,
            &loc!["questions"],
            limits.max_questions,
        )?),
    };
    let items_loc = loc!["items"];
    let list = j::array(j::required(body, "items", &root)?, &items_loc)?;
    check_count(list.len(), limits.max_items)?;
    let items: Vec<Result<ParsedItem, ApiError>> = list
        .iter()
        .enumerate()
        .map(|(index, item)| {
            parse_item(
                item,
                &at(&items_loc, index),
                shared.is_some(),
                limits.max_questions,
            )
        })
        .collect();
    let bytes = items
        .iter()
        .flatten()
        .map(|item| item.state.len())
        .sum::<usize>();
    check_bytes(bytes, limits.max_input_bytes)?;
    Ok(Parsed {
        shared: shared.unwrap_or_default(),
        items,
        timeout,
        return_prompt,
    })
}

/// At least one item, at most `--batch-max-items`.
fn check_count(count: usize, max: usize) -> Result<(), ApiError> {
    let loc = loc!["items"];
    if count == 0 {
        return Err(j::invalid(&loc, "at least one item is required"));
    }
    if count > max {
        return Err(j::invalid(
            &loc,
            format!("{count} items exceed the limit of {max} per batch (setting --batch-max-items / DECIDE_BATCH_MAX_ITEMS)"),
        ));
    }
    Ok(())
}

/// At most `--batch-max-input-bytes` of state over all items (each item is also held to
/// `--max-input-bytes` by the pipeline).
fn check_bytes(bytes: usize, max: usize) -> Result<(), ApiError> {
    if bytes <= max {
        return Ok(());
    }
    Err(ApiError::TooLarge {
        loc: loc!["items"],
        message: format!("items: {bytes} bytes of state over all items exceed the limit of {max} bytes per batch (setting --batch-max-input-bytes / DECIDE_BATCH_MAX_INPUT_BYTES)"),
    })
}

/// One item at `loc`: `{state, questions?}` (and `assets`, refused as on `/v1/systemone`).
/// Its errors name it (`items[3].state`) and fail it alone.
fn parse_item(
    value: &Value,
    loc: &crate::error::Loc,
    shared: bool,
    max_questions: usize,
) -> Result<ParsedItem, ApiError> {
    let object = j::object(value, loc)?;
    j::only_fields(object, &["state", "questions", "assets"], loc)?;
    let state = systemone::parse_state(object, loc)?;
    let questions_loc = at(loc, "questions");
    let own = match object.get("questions") {
        None | Some(Value::Null) => None,
        Some(questions) => Some(systemone::parse_questions(
            questions,
            &questions_loc,
            max_questions,
        )?),
    };
    if own.is_none() && !shared {
        return Err(ApiError::Invalid {
            message: format!(
                "{}: field required: the batch has no shared `questions` for this item",
                crate::error::dotted(&questions_loc)
            ),
            loc: questions_loc,
            kind: "missing",
        });
    }
    Ok(ParsedItem { state, own })
}

/// The batch's response, and its step times summed over the answered items.
fn respond(
    model: &str,
    request_id: &str,
    shared: &Keys,
    slots: Vec<Result<Option<Keys>, ApiError>>,
    decided: Vec<Result<Decided, ApiError>>,
) -> (Value, StepTimes) {
    let mut decided = decided.into_iter();
    let (mut input_tokens, mut cached_tokens) = (0, 0);
    let mut timings = StepTimes::default();
    let items: Vec<Value> = slots
        .into_iter()
        .map(|slot| {
            // One result per item sent to the pipeline, in order.
            let keys = match slot {
                Ok(keys) => keys,
                Err(error) => return item_error(&error),
            };
            let decided = decided.next().unwrap_or_else(|| {
                Err(ApiError::Internal(
                    "the pipeline answered fewer items than it was given".into(),
                ))
            });
            match decided {
                Ok(decided) => {
                    input_tokens += decided.input_tokens;
                    cached_tokens += decided.cached_tokens;
                    timings.add(&decided.timings);
                    let (ids, types) = keys.as_ref().unwrap_or(shared);
                    Value::Object(systemone::answered(&decided, ids, types))
                }
                Err(error) => item_error(&error),
            }
        })
        .collect();
    let mut body = Map::new();
    body.insert("id".into(), json!(request_id));
    body.insert("created".into(), json!(super::unix_now()));
    body.insert("model".into(), json!(model));
    body.insert("items".into(), Value::Array(items));
    body.insert(
        "usage".into(),
        systemone::usage(input_tokens, cached_tokens),
    );
    (Value::Object(body), timings)
}

/// A failed item: `{"error": {status, code, message, loc}}`, `loc` as in Jev's `detail`.
fn item_error(error: &ApiError) -> Value {
    if let ApiError::Internal(message) = error {
        tracing::error!(%message, "a batch item failed");
    }
    json!({"error": {
        "status": error.status(Wire::SystemOne).as_u16(),
        "code": error.code(),
        "message": error.to_string(),
        "loc": jev_loc(error.loc()),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: BatchLimits = BatchLimits {
        max_items: 3,
        max_input_bytes: 100,
        max_questions: 4,
    };

    fn noul() -> Value {
        json!({"q": {"type": "noul", "instructions": "Is this about billing?"}})
    }

    fn message(error: &ApiError) -> String {
        error.to_string()
    }

    #[test]
    fn items_take_their_own_questions_or_the_shared_ones() {
        let own = json!({"a": {"type": "choice", "instructions": "?", "criteria": ["x", "y"]}});
        let parsed = parse(
            &json!({"questions": noul(), "items": [{"state": "one"}, {"state": {"k": 1}, "questions": own}]}),
            LIMITS,
        )
        .unwrap();
        assert_eq!(parsed.shared.ids, ["q"]);
        let first = parsed.items[0].as_ref().unwrap();
        assert!(first.own.is_none());
        let second = parsed.items[1].as_ref().unwrap();
        assert_eq!(second.state, r#"{"k":1}"#);
        let set = second.own.as_ref().unwrap();
        assert_eq!(set.types, ["choice"]);
        assert_eq!(
            crate::error::dotted(&set.questions[0].loc),
            "items[1].questions.a"
        );
        assert_eq!(set.questions[0].plugin, "systemone-choice");
        let (ready, slots) = split(parsed.items);
        assert_eq!(crate::error::dotted(&ready[1].loc), "items[1]");
        assert!(matches!(slots[0], Ok(None)));
    }

    #[test]
    fn an_item_error_names_the_item_and_fails_it_alone() {
        let parsed = parse(
            &json!({"items": [
                {"state": "fine", "questions": noul()},
                {"state": "", "questions": noul()},
                {"state": "no questions"}
            ]}),
            LIMITS,
        )
        .unwrap();
        assert!(parsed.items[0].is_ok());
        let empty = parsed.items[1].as_ref().unwrap_err();
        assert!(
            message(empty).starts_with("items[1].state: must not be empty"),
            "{empty}"
        );
        let missing = parsed.items[2].as_ref().unwrap_err();
        assert!(
            message(missing).starts_with("items[2].questions: field required"),
            "{missing}"
        );
        let shown = item_error(missing);
        assert_eq!(shown["error"]["status"], 422);
        assert_eq!(shown["error"]["code"], "missing");
        assert_eq!(
            shown["error"]["loc"],
            json!(["body", "items", 2, "questions"])
        );
        let bad = parse(
            &json!({"questions": noul(), "items": [7, {"state": "x", "questions": {"q": {}}}, {"state": "x", "extra": 1}]}),
            LIMITS,
        )
        .unwrap();
        let texts: Vec<String> = bad
            .items
            .iter()
            .map(|i| message(i.as_ref().unwrap_err()))
            .collect();
        assert!(
            texts[0].starts_with("items[0]: expected an object"),
            "{texts:?}"
        );
        assert!(
            texts[1].starts_with("items[1].questions.q.type: field required"),
            "{texts:?}"
        );
        assert!(
            texts[2].starts_with("items[2].extra: unknown field"),
            "{texts:?}"
        );
    }

    #[test]
    fn the_batch_fails_as_a_whole_on_its_own_fields_and_limits() {
        let fail = |body: Value| parse(&body, LIMITS).unwrap_err();
        let none = fail(json!({"questions": noul(), "items": []}));
        assert!(
            message(&none).starts_with("items: at least one item"),
            "{none}"
        );
        let items = vec![json!({"state": "x"}); 4];
        let many = fail(json!({"questions": noul(), "items": items}));
        assert!(
            message(&many).contains("--batch-max-items / DECIDE_BATCH_MAX_ITEMS"),
            "{many}"
        );
        assert_eq!(many.status(Wire::SystemOne), 422);
        let big = fail(
            json!({"questions": noul(), "items": [{"state": "x".repeat(60)}, {"state": "y".repeat(41)}]}),
        );
        assert!(message(&big).contains("101 bytes"), "{big}");
        assert!(message(&big).contains("--batch-max-input-bytes"), "{big}");
        assert_eq!(big.status(Wire::SystemOne), 413);
        let shared =
            fail(json!({"questions": {"q": {"instructions": "?"}}, "items": [{"state": "x"}]}));
        assert!(
            message(&shared).starts_with("questions.q.type: field required"),
            "{shared}"
        );
        let too_many = fail(
            json!({"questions": {"a": {"type": "noul"}, "b": {"type": "noul"}, "c": {"type": "noul"}, "d": {"type": "noul"}, "e": {"type": "noul"}}, "items": [{"state": "x"}]}),
        );
        assert!(message(&too_many).contains("--max-questions"), "{too_many}");
        let unknown = fail(json!({"items": [{"state": "x"}], "state": "y"}));
        assert!(
            message(&unknown).starts_with("state: unknown field"),
            "{unknown}"
        );
        let flag =
            fail(json!({"questions": noul(), "items": [{"state": "x"}], "return_prompt": "yes"}));
        assert!(
            message(&flag).starts_with("return_prompt: expected true or false"),
            "{flag}"
        );
        let missing = fail(json!({"questions": noul()}));
        assert!(
            message(&missing).starts_with("items: field required"),
            "{missing}"
        );
    }
}
