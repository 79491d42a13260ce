//! `GET /v1/usage`: what the caller's own tenant has used since the server started and what
//! is left of each of its rates now, read with its own API key. The admin API reports any
//! tenant's totals (`/admin/v1/tenants/{id}/usage`); this lets a team (and the console's
//! tenant view) see its own without the operator's key. The rates are the figures of the
//! `x-ratelimit-*` headers every decision response carries, also sent as those headers here.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::error::Wire;
use crate::frontends::{add_headers, caller_of};
use crate::state::SharedState;

/// `GET /v1/usage`.
#[utoipa::path(
    get,
    path = "/v1/usage",
    operation_id = "own_usage",
    tag = "usage",
    responses(crate::openapi::service::OwnUsageResponses)
)]
pub async fn own_usage(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    let caller = match caller_of(&state, &headers) {
        Ok(caller) => caller,
        Err(error) => return error.into_response_for(Wire::OpenAi),
    };
    let tenant_id = caller.label().to_string();
    let limiter = state.limits.of(&caller);
    let rates = limiter.headers();
    let mut response = Json(crate::openapi::service::OwnUsage {
        usage: state.usage.report(&tenant_id),
        tenant_id,
        limits: caller.tenant().map(|t| t.limits.clone()),
        rate_limits: rates.iter().cloned().collect::<BTreeMap<_, _>>(),
    })
    .into_response();
    add_headers(&mut response, &rates);
    response
}
