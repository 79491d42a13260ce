//! The small endpoints beside the decision formats: `/health` (readiness, the setup and
//! calibration in use, queue and cache figures, long work in progress), `/v1/models`,
//! `/metrics` (Prometheus text, behind `--metrics-key` / `--admin-key` when set), and the JSON
//! 404 and 405 every unknown path or method gets. `/health` takes no lock the model worker
//! holds while it runs passes (the queue depth it reports sits behind a lock held for a few
//! additions), so it answers at once on an overloaded server.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::{ApiError, Wire};
use crate::state::{AppState, Phase, SharedState};

#[utoipa::path(get, path = "/health", operation_id = "health", tag = "service", security(()),
    responses(crate::openapi::service::HealthResponses))]
pub(crate) async fn health(State(state): State<SharedState>) -> Response {
    let (status, mut body) = match &*state.phase.read().unwrap_or_else(|p| p.into_inner()) {
        Phase::Ready(engine, served) => {
            let info = engine.model().info();
            let self_check = engine.self_check().map(|report| {
                json!({
                    "option_mass": report.mass(),
                    "min_mass": report.min_mass,
                    "answer_suffix": engine.model().answer_suffix(),
                })
            });
            let sets = engine.label_sets();
            let setup = engine.setup();
            let tuned = state
                .tuned
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let tuning = tuned.map(|saved| {
                let chosen = saved.candidates.iter().find(|c| c.setup == saved.chosen);
                json!({
                    "reason": saved.reason, "baseline": saved.baseline,
                    "candidates": saved.candidates.len(), "questions": saved.questions,
                    "origin": saved.origin, "measured_on": saved.forward, "date": saved.date,
                    "accuracy": chosen.map(|c| c.accuracy),
                    "gain": chosen.and_then(|c| c.gain),
                })
            });
            let serving = state
                .serving
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .map(|s| {
                    json!({"setup": s.setup, "as_tuned": s.as_tuned, "reason": s.reason,
                                "forward": s.timing.forward, "single_ms": s.timing.single_ms,
                                "permuted_ms": s.timing.permuted_ms, "target_ms": s.target_ms})
                });
            let calibrated = engine.calibration();
            let (depth, bounds) = engine.queue();
            (
                StatusCode::OK,
                json!({
                    "status": "ok", "model": served, "arch": info.arch, "forward": info.forward,
                    "device": state.config.device,
                    "readouts": {"direct": sets.direct_capacity(), "wide-direct": sets.wide_capacity(),
                                 "numbers": sets.numbers.len(), "words": sets.yes_no},
                    "self_check": self_check,
                    "setup": {"renderer": setup.renderer, "labels": setup.labels.as_str(),
                              "readout": setup.readout.as_str(), "source": setup.source.as_str(),
                              "tuning": tuning, "serving": serving,
                              // Startup steps still measuring in the background (answers
                              // meanwhile get this setup and correction; see "progress").
                              "pending": state.pending.read().unwrap_or_else(|p| p.into_inner()).names()},
                    "calibration": {"policy": calibrated.policy, "params": calibrated.params,
                                    "temperature": calibrated.temperature,
                                    "source": calibrated.source.as_str()},
                    "min_option_mass": engine.min_option_mass(),
                    // For a router: what waits for the model worker, and where it sheds (0: no bound).
                    "queue": {"requests": depth.requests, "tokens": depth.tokens,
                              "max_requests": bounds.max_requests, "max_tokens": bounds.max_tokens},
                    // And what it has cached, which affinity routing keeps reusing.
                    "prefix_cache": prefix_cache_use(&state),
                }),
            )
        }
        // The step is the task started last (with its counts and ETA), else the phase's own.
        Phase::Loading(step) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "loading",
                   "step": state.progress.current_line().unwrap_or_else(|| step.clone())}),
        ),
        Phase::Failed(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "failed", "reason": reason}),
        ),
    };
    body["in_flight"] = json!(state.drain.in_flight());
    // Long work running now (startup steps, tenants' calibrations): done, total, rate, ETA.
    body["progress"] = json!(state.progress.snapshot());
    // Draining: a router takes the replica out while its last requests finish.
    if state.drain.is_draining() {
        body["status"] = json!("draining");
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    (status, Json(body)).into_response()
}

/// The prefix cache's use: runs and blocks held, KV bytes against the budget
/// (`--prefix-cache-mib`), and lookups and blocks that hit and missed since the start.
fn prefix_cache_use(state: &AppState) -> serde_json::Value {
    let c = state.metrics.prefix_cache_use();
    json!({"entries": c.entries, "blocks": c.blocks, "bytes": c.bytes,
           "budget_bytes": state.config.prefix_cache_mib.saturating_mul(1 << 20),
           "hits": c.hits, "misses": c.misses,
           "block_hits": c.block_hits, "block_misses": c.block_misses})
}

/// `GET /v1/models` in the shapes both SDKs read: OpenAI's `data` list and Jev's `models` list.
#[utoipa::path(get, path = "/v1/models", operation_id = "list_models", tag = "service", security(()),
    responses(crate::openapi::service::ModelsResponses))]
pub(crate) async fn models(State(state): State<SharedState>) -> Response {
    use crate::openapi::service::{JevModel, ModelCard, ModelList};
    if let Err(error) = state.engine() {
        return error.into_response_for(Wire::OpenAi);
    }
    let served = state.served_model_name();
    Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: served.clone(),
            object: "model",
            created: 0,
            owned_by: "decide",
        }],
        models: vec![JevModel {
            description: format!(
                "{served} served by decide: typed decisions read from next-token probabilities"
            ),
            name: served,
            release_date: "2026-11-29",
        }],
    })
    .into_response()
}

/// Whether a `/metrics` request may read it: with `--metrics-key` or `--admin-key` set, it
/// must bear one of them (the series name every tenant and its traffic); with neither,
/// `/metrics` is open, as it is for a server on loopback scraped by a local agent.
fn metrics_allowed(state: &AppState, headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let accepted: Vec<&str> = [
        state.config.metrics_key.as_deref(),
        state.config.admin_key.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    if accepted.is_empty() {
        return Ok(());
    }
    let presented =
        crate::tenancy::directory::presented_key(headers).map(crate::tenancy::keys::hash);
    let allowed = presented.is_some_and(|hash| {
        accepted
            .iter()
            .any(|key| crate::tenancy::keys::hashes_equal(&crate::tenancy::keys::hash(key), &hash))
    });
    if allowed {
        Ok(())
    } else {
        Err(ApiError::Unauthorized {
            message: "/metrics needs `Authorization: Bearer <key>` with the server's --metrics-key / DECIDE_METRICS_KEY or its --admin-key / DECIDE_ADMIN_KEY".into(),
        })
    }
}

/// Prometheus text: the server's counters and each tenant's.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "service", security((), ("bearer" = [])),
    responses((status = 200, description = "Prometheus text exposition (version 0.0.4).", body = String, content_type = "text/plain"),
              (status = 401, description = "The server has `--metrics-key` or `--admin-key` and the request bears neither.", body = crate::openapi::openai::OpenAiError)))]
pub(crate) async fn metrics(
    State(state): State<SharedState>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Err(error) = metrics_allowed(&state, &headers) {
        return error.into_response_for(Wire::OpenAi);
    }
    let mut text = state.metrics.render();
    // For a router: 1 when this replica answers decisions (what /health's 200 says).
    let ready = u8::from(state.engine().is_ok() && !state.drain.is_draining());
    text.push_str(&format!(
        "# HELP decide_ready 1 when the server answers decisions (loaded, not draining), else 0.\n# TYPE decide_ready gauge\ndecide_ready {ready}\n"
    ));
    if let Ok(engine) = state.engine() {
        let (depth, _) = engine.queue();
        for (name, help, value) in [
            (
                "decide_queued_requests",
                "Read jobs waiting for or being read by the model worker.",
                depth.requests,
            ),
            (
                "decide_queued_tokens",
                "Tokens those jobs hold for the model (shared inputs once).",
                depth.tokens,
            ),
        ] {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            ));
        }
    }
    (
        [("content-type", "text/plain; version=0.0.4")],
        text + &state.usage.render(),
    )
        .into_response()
}

/// A method a path does not have: 405 with a JSON error in the path's format (axum's own 405
/// has an empty body, which no client can show), naming the method; axum still sets `Allow`.
pub(crate) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    let path = uri.path();
    let message = format!(
        "{method} is not allowed on {path}; the Allow header lists the methods it has, /openapi.json every endpoint's"
    );
    let jev = [
        "/v1/systemone",
        "/v1/classify",
        "/v1/fields",
        "/plugins/jev-decison",
    ]
    .iter()
    .any(|prefix| path.starts_with(prefix));
    let body = if jev {
        json!({"detail": {"error_type": "invalid_request_error", "message": message}})
    } else {
        json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": "method_not_allowed"}})
    };
    (StatusCode::METHOD_NOT_ALLOWED, Json(body)).into_response()
}

pub(crate) async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"message": "no such endpoint; see /v1/decisions, /v1/systemone, /v1/systemone/batch, /v1/classify, /v1/fields, /v1/models, /mcp, /health, /console", "type": "invalid_request_error", "param": null, "code": "not_found"}})),
    )
        .into_response()
}
