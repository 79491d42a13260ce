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
use axum::http::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::AppState;
use crate::error::{ApiError, Wire};
use crate::pipeline::{Decided, DecisionRequest, Engine, Outcome, RequestScope};
use crate::tenancy::Caller;

/// Reads the body as JSON within `--max-body-bytes` (zstd and, where `multipart`, form-data).
pub async fn read_json(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    multipart: bool,
) -> Result<Value, ApiError> {
    body::read_json(headers, body, state.config.max_body_bytes, multipart).await
}

/// Runs a decision request for its caller: authenticates it (the tenant of its bearer key,
/// see [`crate::tenancy::Directory::authenticate`]; 401 when the key is missing or not
/// valid), then `run`, and counts a failure against the caller's usage.
pub async fn authenticated<F, Fut>(
    state: &AppState,
    headers: &HeaderMap,
    run: F,
) -> Result<axum::response::Response, ApiError>
where
    F: FnOnce(Caller) -> Fut,
    Fut: std::future::Future<Output = Result<axum::response::Response, ApiError>>,
{
    let caller = match state.directory.authenticate(headers) {
        Ok(caller) => caller,
        Err(error) => {
            state.metrics.record_rejected();
            return Err(error);
        }
    };
    let usage = state.usage.of(caller.label());
    let result = run(caller).await;
    if let Err(error) = &result {
        state.metrics.record_rejected();
        usage.record_error(error);
    }
    result
}

/// How a caller's request is answered: the tenant's plugins first, its renderer and
/// calibration settings (the server's where it has none).
pub fn request_scope(caller: &Caller) -> RequestScope {
    let Some(tenant) = caller.tenant() else {
        return RequestScope::default();
    };
    RequestScope {
        plugins: Some(tenant.id.clone()),
        renderer: tenant.settings.renderer.clone(),
        calibration: tenant.settings.calibration.clone(),
        ..RequestScope::default()
    }
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

/// Runs the pipeline on a blocking thread, counts the request against the caller's usage,
/// and fails the request when every question failed.
pub async fn decide(
    state: &AppState,
    caller: &Caller,
    engine: Arc<Engine>,
    mut request: DecisionRequest,
) -> Result<(Decided, DecisionRequest), ApiError> {
    if let Some(tenant) = caller.tenant_id() {
        request.scope.calibrated =
            state
                .calibrations
                .state_for(state.directory.store().as_ref(), &engine, tenant);
    }
    let (decided, request) = tokio::task::spawn_blocking(move || {
        let decided = engine.decide(&request);
        (decided, request)
    })
    .await
    .map_err(|error| ApiError::Internal(format!("the decision task failed: {error}")))?;
    let decided = decided?;
    state.usage.of(caller.label()).record_decided(&decided);
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
