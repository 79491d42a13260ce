//! Wire formats: thin translations between an HTTP body and the one pipeline.
//!
//! Each frontend parses its format into a [`DecisionRequest`], and renders the pipeline's
//! outcomes back. What is common (reading the body within limits, checking the model name,
//! running the pipeline off the async runtime under the request's deadline and cancellation,
//! shedding it when the model worker's queue is full, failing a request whose every question
//! failed) lives here.

pub mod audit;
pub mod batch;
pub mod body;
pub mod classify;
pub mod fields;
pub mod json;
pub mod leaf;
pub mod openai;
pub mod prompts;
pub mod systemone;

use std::sync::Arc;

use axum::body::Body;
use axum::http::HeaderMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::cancel::{Cancel, Deadline, Requested};
use crate::error::{ApiError, Wire};
use crate::metrics::Metrics;
use crate::pipeline::{
    Decided, DecisionRequest, Engine, Item, Limits, Narrowed, Outcome, RequestScope,
};
use crate::state::AppState;
use crate::tenancy::usage::{Counters, Failure, RequestUse};
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
    let caller = caller_of(state, headers)?;
    let limiter = state.limits.of(&caller);
    let mut result = for_caller(state, caller, run).await;
    // OpenAI sends its rate-limit headers on every response, not only on a 429.
    if let Ok(response) = &mut result {
        add_headers(response, &limiter.headers());
    }
    result
}

/// The caller of a request, from its `Authorization: Bearer` key (401 when the key is missing
/// or not valid, counted as a rejected request).
pub fn caller_of(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    state
        .directory
        .authenticate(headers)
        .map_err(ApiError::from)
        .inspect_err(|_| {
            state.metrics.record_rejected();
        })
}

/// Runs `run` for an authenticated caller and counts a failure against its usage: what every
/// decision request does, whatever its transport (HTTP here, MCP in [`crate::mcp`]).
pub async fn for_caller<T, F, Fut>(state: &AppState, caller: Caller, run: F) -> Result<T, ApiError>
where
    F: FnOnce(Caller) -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    crate::telemetry::record(crate::telemetry::TENANT, caller.label());
    let usage = state.usage.of(caller.label());
    let result = run(caller).await;
    if let Err(error) = &result {
        state.metrics.record_rejected();
        record_failure(&usage, error);
    }
    result
}

/// Adds `(name, value)` headers to a response (names and values that are not valid HTTP
/// are skipped: they are ours, and always valid).
pub(crate) fn add_headers(response: &mut axum::response::Response, headers: &[(String, String)]) {
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            axum::http::HeaderValue::from_str(value),
        ) {
            response.headers_mut().insert(name, value);
        }
    }
}

/// How a caller's request is answered: the tenant's plugins first, its renderer and
/// calibration settings (the server's where it has none), its fair-share flow (a hash of
/// its id, its weight). Limits are added by [`decide`], which knows the server's.
pub fn request_scope(caller: &Caller) -> RequestScope {
    let Some(tenant) = caller.tenant() else {
        return RequestScope::default();
    };
    RequestScope {
        plugins: Some(tenant.id.clone()),
        renderer: tenant.settings.renderer.clone(),
        min_option_mass: tenant.settings.min_option_mass,
        calibration: tenant.settings.calibration.clone(),
        flow: crate::scheduler::Flow {
            id: crate::prefix_cache::tenant_salt(&["fair-share-flow", &tenant.id]),
            weight: tenant.settings.weight.unwrap_or(1).max(1),
        },
        ..RequestScope::default()
    }
}

/// The prefix- and token-cache salt of a caller's request: the tenant id plus an optional
/// cache key of the client's (`prompt_cache_key`). A tenant's keys share its cache; tenants
/// never share one.
pub fn cache_salt(caller: &Caller, cache_key: Option<&str>) -> u64 {
    crate::prefix_cache::tenant_salt(&[
        caller.tenant_id().unwrap_or("decide-default-tenant"),
        cache_key.unwrap_or(""),
    ])
}

/// Counts a request (or batch item) that failed as a whole in its caller's usage: a 429 as
/// rate-limited, anything else as rejected.
pub fn record_failure(usage: &Counters, error: &ApiError) {
    usage.record_failure(match error {
        ApiError::RateLimited { .. } => Failure::RateLimited,
        _ => Failure::Rejected,
    });
}

/// What a decided request used, for its caller's usage.
fn request_use(decided: &Decided) -> RequestUse {
    let answers = decided
        .outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Answer(_)))
        .count() as u64;
    RequestUse {
        answers,
        refusals: decided.outcomes.len() as u64 - answers,
        input_tokens: decided.input_tokens as u64,
        cached_tokens: decided.cached_tokens as u64,
        model: decided.timings.model,
    }
}

/// The server's request limits narrowed by the tenant's own (each the smaller), or `None`
/// when the tenant narrows none. `max_prompt_tokens` stays the server's.
fn narrowed_limits(server: &Limits, caller: &Caller) -> Option<Limits> {
    let tenant = caller.tenant()?;
    let own = &tenant.limits;
    let narrow = |own: Option<usize>, server: usize| match own {
        Some(value) if value < server => (value, true),
        _ => (server, false),
    };
    let (max_questions, questions) = narrow(own.max_questions, server.max_questions);
    let (max_options, options) = narrow(own.max_options, server.max_options);
    let (max_input_bytes, input_bytes) = narrow(own.max_input_bytes, server.max_input_bytes);
    (questions || options || input_bytes).then(|| Limits {
        max_questions,
        max_options,
        max_input_bytes,
        max_prompt_tokens: server.max_prompt_tokens,
        narrowed: Some(Narrowed {
            tenant: tenant.id.clone(),
            max_questions: questions,
            max_options: options,
            max_input_bytes: input_bytes,
        }),
    })
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

/// Runs the pipeline on a blocking thread under the caller's limits, counts the request
/// against the caller's usage, and fails the request when every question failed.
///
/// Before any model work: the tenant's narrowed request limits, whether the model worker's
/// queue has room (503 at once when it has none), then the tenant's request and decision
/// rates, then one of its concurrent slots (waiting in its queue if need be). Its
/// input-token rate is taken by the pipeline as prompts go to the model.
///
/// The request runs under its [`Watch`]: past its deadline it gets 504 at once, and when its
/// client goes away (axum drops this future) its work is cancelled; either way its queued
/// model work is dropped.
pub async fn decide(
    state: &AppState,
    caller: &Caller,
    engine: Arc<Engine>,
    mut request: DecisionRequest,
) -> Result<(Decided, DecisionRequest), ApiError> {
    let mut watch = Watch::new(state, request.timeout);
    request.scope.cancel = watch.cancel.clone();
    request.scope.sheddable = true;
    watch
        .within(async move {
            scope_limits(state, caller, &engine, &mut request.scope)
                .check_request(request.questions.len(), request.state.len())?;
            engine.check_queue()?;
            let slot = admit(state, caller, &mut request.scope, request.questions.len()).await?;
            let nice = state.config.request_thread_nice;
            let (decided, request) = off_runtime(slot, nice, move || {
                let decided = engine.decide(&request);
                (decided, request)
            })
            .await?;
            let decided = decided?;
            // A question refused because the request was cancelled (its deadline passed
            // between the worker's passes) is the deadline's 504, not an engine failure.
            if let Some(cancelled) = request.scope.cancel.error() {
                if failed_server_side(&decided) {
                    return Err(cancelled.into());
                }
            }
            let decided = counted(state, caller, decided)?;
            Ok((decided, request))
        })
        .await
}

/// [`decide`] for a batch of items ([`Engine::decide_items`]): `request` carries the shared
/// questions and settings, each item its text and its own questions or none.
///
/// The batch is one request to the tenant's limits: the shared questions are checked against
/// its question limit (failing the batch), then it takes one request and every item's
/// questions from its rates, and one concurrent slot. Each item is counted in the caller's
/// usage as a single request would be, and an item whose every question failed becomes that
/// item's error; the others are answered. It has one deadline: past it the whole batch gets
/// 504. Items the model worker's queue has no room for fail alone (503 `overloaded`).
pub async fn decide_items(
    state: &AppState,
    caller: &Caller,
    engine: Arc<Engine>,
    mut request: DecisionRequest,
    items: Vec<Item>,
) -> Result<Vec<Result<Decided, ApiError>>, ApiError> {
    let mut watch = Watch::new(state, request.timeout);
    request.scope.cancel = watch.cancel.clone();
    request.scope.sheddable = true;
    watch
        .within(async move {
            let limits = scope_limits(state, caller, &engine, &mut request.scope);
            let shared = request.questions.len();
            if shared > 0 || items.iter().any(|item| item.questions.is_none()) {
                limits.check_questions(shared, &crate::loc!["questions"])?;
            }
            let questions = items
                .iter()
                .map(|item| item.questions.as_ref().map_or(shared, Vec::len))
                .sum();
            engine.check_queue()?;
            let slot = admit(state, caller, &mut request.scope, questions).await?;
            let nice = state.config.request_thread_nice;
            let cancel = request.scope.cancel.clone();
            let results =
                off_runtime(slot, nice, move || engine.decide_items(&request, items)).await??;
            let results: Vec<Result<Decided, ApiError>> = results
                .into_iter()
                .map(|result| result.map_err(ApiError::from))
                .collect();
            // Items that failed because the batch was cancelled (its deadline passed between
            // the worker's passes, or while its prompts were rendered) make the batch's 504, as
            // when the timer fires first. Such an item is an error (the worker dropped its
            // jobs) or an answer whose questions were refused (rendering stopped).
            if let Some(cancelled) = cancel.error() {
                if results.iter().any(|result| match result {
                    Ok(decided) => failed_server_side(decided),
                    Err(error) => is_server_side(error),
                }) {
                    return Err(cancelled.into());
                }
            }
            // The deadline is the batch's: past it, no item's answer is sent, as when the
            // timer fires first.
            if let Some(late) = results
                .iter()
                .find_map(|result| result.as_ref().err().filter(|e| is_timeout(e)))
            {
                return Err(late.clone());
            }
            if results
                .iter()
                .any(|result| matches!(result, Err(ApiError::Overloaded { .. })))
            {
                state.metrics.record_shed();
            }
            let usage = state.usage.of(caller.label());
            Ok(results
                .into_iter()
                .map(|result| {
                    let counted = result.and_then(|decided| counted(state, caller, decided));
                    if let Err(error) = &counted {
                        record_failure(&usage, error);
                    }
                    counted
                })
                .collect())
        })
        .await
}

/// Whether an error is the server's failure (5xx, whichever wire format), not the client's:
/// one that a cancellation can have caused, and that the cancellation's own error replaces.
fn is_server_side(error: &ApiError) -> bool {
    error.status(Wire::OpenAi).is_server_error() || matches!(error, ApiError::Cancelled { .. })
}

/// Whether any of a request's questions failed on the server's side (a cancellation can have
/// caused that, while it cannot cause a question the client got wrong).
fn failed_server_side(decided: &Decided) -> bool {
    decided.outcomes.iter().any(
        |outcome| matches!(outcome, Outcome::Refusal(refusal) if refusal.kind.is_server_side()),
    )
}

fn is_timeout(error: &ApiError) -> bool {
    matches!(error, ApiError::Timeout { .. })
}

/// A request's cancellation as its frontend holds it: the token the pipeline and the model
/// worker check, the deadline's timer, and a drop guard. axum drops a handler's future when
/// its client closes the connection; dropping the watch before the answer then cancels the
/// request's work, which would otherwise run to the end for nobody.
struct Watch<'a> {
    cancel: Cancel,
    metrics: &'a Metrics,
    answered: bool,
}

impl<'a> Watch<'a> {
    /// The watch of a request starting now, its deadline the shorter of the server's
    /// `--request-timeout-ms` and the request's own timeout.
    fn new(state: &'a AppState, requested: Option<Requested>) -> Watch<'a> {
        let deadline = Deadline::of(
            state.config.request_timeout_ms,
            requested,
            std::time::Instant::now(),
        );
        Watch {
            cancel: state.drain.request_token(deadline),
            metrics: &state.metrics,
            answered: false,
        }
    }

    /// Runs `work` until it ends or the deadline passes (504 at once, the work cancelled: the
    /// blocking thread and the model worker stop at their next step). Counts timeouts and
    /// requests shed for a full queue.
    async fn within<T>(
        &mut self,
        work: impl std::future::Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let result = match self.cancel.deadline().map(|d| (d.at, d.clone())) {
            None => work.await,
            Some((at, deadline)) => {
                match tokio::time::timeout_at(tokio::time::Instant::from_std(at), work).await {
                    Ok(result) => result,
                    Err(_) => {
                        self.cancel.expire();
                        Err(deadline.error().into())
                    }
                }
            }
        };
        // Work that failed after the request was cancelled failed because of it (the worker
        // dropped its jobs past the deadline, before the timer here fired): the request gets
        // its cancellation's error (504 past the deadline, 503 when the server stops), not
        // whatever the dropped work reported.
        let result = match result {
            Err(error) if is_server_side(&error) => {
                Err(self.cancel.error().map(ApiError::from).unwrap_or(error))
            }
            result => result,
        };
        self.answered = true;
        match &result {
            Err(ApiError::Timeout { message }) => {
                self.metrics.record_timed_out();
                tracing::warn!(%message, "request timed out");
            }
            Err(ApiError::Overloaded { .. }) => self.metrics.record_shed(),
            _ => {}
        }
        result
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.cancel.disconnect();
            self.metrics.record_disconnected();
            tracing::debug!("client went away; its request's work is cancelled");
        }
    }
}

/// Sets the tenant's parts of a request's scope (its own calibration, its narrowed limits,
/// unless the frontend set them) and returns the limits that apply.
fn scope_limits<'a>(
    state: &AppState,
    caller: &Caller,
    engine: &'a Engine,
    scope: &'a mut RequestScope,
) -> &'a Limits {
    if let Some(tenant) = caller.tenant_id() {
        scope.calibrated =
            state
                .calibrations
                .state_for(state.directory.store().as_ref(), engine, tenant);
    }
    if scope.limits.is_none() {
        scope.limits = narrowed_limits(engine.limits(), caller);
    }
    scope.limits.as_ref().unwrap_or(engine.limits())
}

/// Takes one request and `questions` decisions from the caller's rates, installs its
/// input-token rate for the pipeline, and waits for one of its concurrent slots (held until
/// the returned permit drops).
async fn admit(
    state: &AppState,
    caller: &Caller,
    scope: &mut RequestScope,
    questions: usize,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, ApiError> {
    let limiter = state.limits.of(caller);
    state.limits.check_request(&limiter, questions).await?;
    if limiter.limits_tokens() {
        let limiter = limiter.clone();
        scope.admit_tokens = Some(Arc::new(move |tokens| {
            limiter
                .admit_tokens(tokens)
                .map_err(crate::error::refused_in_engine)
        }));
    }
    Ok(limiter.enter().await?)
}

/// Runs `work` (the pipeline, which blocks) on a blocking thread at nice value `nice`
/// (`--request-thread-nice`, [`crate::priority`]), holding the caller's concurrent slot until
/// it is done, even if its client went away (the work then stops at its next step: its
/// request's token is cancelled).
async fn off_runtime<R: Send + 'static>(
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    nice: i32,
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, ApiError> {
    // The request's span goes along: the pipeline's spans are its children.
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        crate::priority::lower_this_thread(nice);
        let _slot = slot;
        span.in_scope(work)
    })
    .await
    .map_err(|error| ApiError::Internal(format!("the decision task failed: {error}")))
}

/// Counts a decided request (or batch item) in the caller's usage; fails it with the first
/// failure when every question failed.
fn counted(state: &AppState, caller: &Caller, decided: Decided) -> Result<Decided, ApiError> {
    state
        .usage
        .of(caller.label())
        .record_decided(&request_use(&decided));
    match all_refused(&decided) {
        Some(error) => Err(error),
        None => Ok(decided),
    }
}

/// The error of a request whose every question failed: the first failure's.
fn all_refused(decided: &Decided) -> Option<ApiError> {
    if !decided
        .outcomes
        .iter()
        .all(|outcome| matches!(outcome, Outcome::Refusal(_)))
    {
        return None;
    }
    match decided.outcomes.first() {
        Some(Outcome::Refusal(first)) => Some(ApiError::QuestionFailed {
            status: crate::error::refusal_status(first.kind),
            loc: first.loc.clone(),
            message: first.message.clone(),
            code: first.code,
        }),
        _ => None,
    }
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
    let id = format!("{prefix}_{}", &hex::encode(digest)[..24]);
    // The id the client sees is an attribute of the request's span.
    crate::telemetry::record(crate::telemetry::REQUEST_ID, &id);
    id
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
    add_timings(response, &decided.timings);
}

/// [`add_step_times`] with step times of its own (a batch's, summed over its items).
pub fn add_timings(response: &mut axum::response::Response, t: &crate::pipeline::StepTimes) {
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
