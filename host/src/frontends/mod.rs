//! Wire formats: thin translations between an HTTP body and the one pipeline.
//!
//! Each frontend parses its format into a [`DecisionRequest`], and renders the pipeline's
//! outcomes back. What is common (reading the body within limits, checking the model name,
//! running the pipeline off the async runtime, failing a request whose every question failed)
//! lives here.

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

/// The engine, or 503 with Retry-After while loading (and the reason when loading failed).
pub fn ready_engine(state: &AppState) -> Result<Arc<Engine>, ApiError> {
    state.engine()
}

/// Reads the body as JSON within `--max-body-bytes`, refusing encodings we do not decode.
pub async fn read_json(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Value, ApiError> {
    if let Some(encoding) = headers.get(header::CONTENT_ENCODING) {
        let encoding = encoding.to_str().unwrap_or("?").trim().to_ascii_lowercase();
        if !encoding.is_empty() && encoding != "identity" {
            return Err(ApiError::UnsupportedMedia {
                message: format!("Content-Encoding `{encoding}` is not supported; send the body uncompressed"),
            });
        }
    }
    let limit = state.config.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| ApiError::TooLarge {
        loc: vec![],
        message: format!(
            "the request body exceeds the limit of {limit} bytes (setting --max-body-bytes / DECIDE_MAX_BODY_BYTES)"
        ),
    })?;
    if bytes.is_empty() {
        return Err(ApiError::invalid(vec![], "the request body is empty; send a JSON object"));
    }
    serde_json::from_slice(&bytes).map_err(|error| ApiError::Invalid {
        loc: vec![],
        message: format!("the request body is not valid JSON: {error}"),
        kind: "json_invalid",
    })
}

/// Accepts the served model under its names, or refuses naming what is served.
pub fn check_model(state: &AppState, wire: Wire, requested: Option<&str>) -> Result<String, ApiError> {
    let served = state.served_model_name();
    let Some(requested) = requested else { return Ok(served) };
    let accepted = state.model_aliases(wire);
    if accepted.iter().any(|name| name == requested) {
        Ok(served)
    } else {
        Err(ApiError::UnknownModel {
            message: format!("model `{requested}` is not served here; use one of: {}", accepted.join(", ")),
        })
    }
}

/// Runs the pipeline on a blocking thread, and fails the request when every question failed.
pub async fn decide(engine: Arc<Engine>, request: DecisionRequest) -> Result<(Decided, DecisionRequest), ApiError> {
    let (decided, request) = tokio::task::spawn_blocking(move || {
        let decided = engine.decide(&request);
        (decided, request)
    })
    .await
    .map_err(|error| ApiError::Internal(format!("the decision task failed: {error}")))?;
    let decided = decided?;
    if decided.outcomes.iter().all(|outcome| matches!(outcome, Outcome::Refusal(_))) {
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
