//! The HTTP surface: the router of every endpoint, built by [`router`] so tests can drive it
//! in-process. The server listens before the model is loaded: `/health` reports progress and
//! decision requests get 503 with Retry-After until the engine is ready (or the reason it
//! failed to load). What the handlers share is in [`crate::state`]; the small endpoints in
//! [`crate::endpoints`].

use axum::routing::{get, post};
use axum::Router;

use crate::endpoints::{health, method_not_allowed, metrics, models, not_found};
use crate::frontends::{batch, classify, fields, openai, systemone};
use crate::state::SharedState;
use crate::tenancy::calibration_http as tenant_calibration;

/// The whole HTTP API.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/v1/decisions", post(openai::handle))
        .route("/v1/systemone", post(systemone::handle))
        .route("/v1/classify", post(classify::handle))
        .route("/v1/fields", post(fields::handle))
        .route("/plugins/jev-decison/infer", post(classify::handle))
        .route(
            "/plugins/jev-decison/capabilities",
            get(classify::capabilities),
        )
        .route("/v1/systemone/batch", post(batch::handle))
        .route("/v1/models", get(models))
        .merge(crate::plugin_api::routes())
        .route(
            "/v1/calibration",
            get(tenant_calibration::status)
                .put(tenant_calibration::upload)
                .delete(tenant_calibration::remove),
        )
        .route("/v1/usage", get(crate::tenancy::usage_http::own_usage))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(crate::openapi::openapi_json))
        .merge(crate::tenancy::admin_http::routes(state.clone()))
        .merge(crate::mcp::http::routes(state.clone()))
        // Static, keyless, and not in /openapi.json (see `console.rs` for why).
        .merge(crate::console::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.drain.clone(),
            crate::drain::track,
        ))
        .layer(axum::middleware::from_fn(crate::telemetry::trace_requests))
        // Bodies are read with our own limit so the 413 names the setting.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}
