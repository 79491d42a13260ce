//! Wire formats: thin translations between an HTTP body and the one pipeline.
//!
//! Each frontend parses its format into a [`DecisionRequest`], and renders the pipeline's
//! outcomes back. What is common (reading the body within limits, checking the model name,
//! running the pipeline off the async runtime, failing a request whose every question failed)
//! lives here.

pub mod body;
pub mod json;
pub mod openai;
pub mod systemone;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::AppState;
use crate::error::{ApiError, Wire};
use crate::pipeline::{Decided, DecisionRequest, Engine, Outcome};

/// Reads the body as JSON within `--max-body-bytes` (zstd and, where `multipart`, form-data).
pub async fn read_json(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    multipart: bool,
) -> Result<Value, ApiError> {
    body::read_json(headers, body, state.config.max_body_bytes, multipart).await
}

/// With `--api-key` set, requires `Authorization: Bearer <key>` (both SDKs send it).
pub fn check_auth(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = state.config.api_key.as_deref() else {
        return Ok(());
    };
    match presented_key(headers) {
        Some(key) if constant_time_eq(key.as_bytes(), expected.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::Unauthorized { message: "the API key is not valid for this server".into() }),
        None => Err(ApiError::Unauthorized {
            message: "missing `Authorization: Bearer <key>` header (this server is started with --api-key)".into(),
        }),
    }
}

/// The bearer token of the request, if any.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

/// The prefix-cache salt of a request: its tenant is its credentials (the bearer token) plus
/// an optional cache key of the client's (`prompt_cache_key`). Requests with different
/// salts never share cached KV, so one tenant's prompts cannot be timed or served to another.
pub fn cache_salt(headers: &HeaderMap, cache_key: Option<&str>) -> u64 {
    crate::prefix_cache::tenant_salt(&[
        presented_key(headers).unwrap_or(""),
        cache_key.unwrap_or(""),
    ])
}

/// Compares without an early exit, so the time taken does not reveal a matching prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Accepts the served model under its names, or refuses naming what is served.
pub fn check_model(
    state: &AppState,
    wire: Wire,
    requested: Option<&str>,
) -> Result<String, ApiError> {
    let served = state.served_model_name();
    let Some(requested) = requested else {
        return Ok(served);
    };
    let accepted = state.model_aliases(wire);
    if accepted.iter().any(|name| name == requested) {
        Ok(served)
    } else {
        Err(ApiError::UnknownModel {
            message: format!(
                "model `{requested}` is not served here; use one of: {}",
                accepted.join(", ")
            ),
        })
    }
}

/// Runs the pipeline on a blocking thread, and fails the request when every question failed.
pub async fn decide(
    engine: Arc<Engine>,
    request: DecisionRequest,
) -> Result<(Decided, DecisionRequest), ApiError> {
    let (decided, request) = tokio::task::spawn_blocking(move || {
        let decided = engine.decide(&request);
        (decided, request)
    })
    .await
    .map_err(|error| ApiError::Internal(format!("the decision task failed: {error}")))?;
    let decided = decided?;
    if decided
        .outcomes
        .iter()
        .all(|outcome| matches!(outcome, Outcome::Refusal(_)))
    {
        if let Some(Outcome::Refusal(first)) = decided.outcomes.first() {
            return Err(ApiError::QuestionFailed {
                status: first.status,
                loc: first.loc.clone(),
                message: first.message.clone(),
                code: first.code,
            });
        }
    }
    Ok((decided, request))
}

/// Hex sha256 of the state, so an audit can prove which input was read without echoing it.
pub fn state_sha256(state: &str) -> String {
    hex::encode(Sha256::digest(state.as_bytes()))
}

/// A short random-enough request id (time + counter), for `id` fields and request-id headers.
pub fn request_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let digest = Sha256::digest(format!("{nanos}-{count}-{}", std::process::id()).as_bytes());
    format!("{prefix}_{}", &hex::encode(digest)[..24])
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The standard `Server-Timing` header for a decided request: compile, prepare, model and
/// answer steps in milliseconds (see [`crate::pipeline::StepTimes`]).
pub fn add_step_times(response: &mut axum::response::Response, decided: &Decided) {
    let t = &decided.timings;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let value = format!(
        "compile;dur={:.3}, prepare;dur={:.3}, model;dur={:.3}, answer;dur={:.3}",
        ms(t.compile),
        ms(t.prepare),
        ms(t.model),
        ms(t.answer)
    );
    if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
        response.headers_mut().insert("server-timing", value);
    }
}

/// Header with the server's own time for a request, in milliseconds: benchmarks compare it
/// with client wall time to separate server work from HTTP and client overhead.
pub const SERVER_TIME_HEADER: &str = "x-decide-server-ms";

/// Adds [`SERVER_TIME_HEADER`] measured from `started`.
pub fn add_server_time(response: &mut axum::response::Response, started: std::time::Instant) {
    let ms = format!("{:.3}", started.elapsed().as_secs_f64() * 1e3);
    if let Ok(value) = axum::http::HeaderValue::from_str(&ms) {
        response.headers_mut().insert(SERVER_TIME_HEADER, value);
    }
}
