//! Streamable HTTP at `/mcp` on the running server, behind the same keys, tenants and limits
//! as the HTTP API.
//!
//! A guard in front of rmcp's `StreamableHttpService` authenticates every request's
//! `Authorization: Bearer` key as the HTTP API does (a missing or wrong key: the same 401 and
//! message, before any MCP is spoken) and answers 503 with `Retry-After` while the server
//! loads, as decision requests get; the request's caller then travels in its extensions to
//! the handler ([`super::DecideMcp`]), whose calls take that caller's limits and count in its
//! usage.
//!
//! The service is stateless (no `Mcp-Session-Id`, JSON responses): every request stands
//! alone, as the 2026-07-28 protocol has it, so nothing is held per client and no standing
//! stream keeps a draining server waiting. Bodies are held to `--max-body-bytes`. `Host`
//! headers are checked against loopback names (rmcp's DNS-rebinding guard) when the server
//! listens on a loopback address; listening elsewhere, the operator chose who reaches it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::DecideMcp;
use crate::error::Wire;
use crate::state::SharedState;

/// The path of the MCP endpoint.
pub const PATH: &str = "/mcp";

/// The `/mcp` route with its guard.
pub fn routes(state: SharedState) -> Router<SharedState> {
    let config = &state.config;
    let mut transport = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(config.max_body_bytes);
    if !config.host.is_loopback() {
        transport = transport.disable_allowed_hosts();
    }
    let handler = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(DecideMcp::over_http(handler.clone())),
        Arc::new(NeverSessionManager::default()),
        transport,
    );
    Router::new()
        .route_service(PATH, service)
        .layer(axum::middleware::from_fn_with_state(state, guard))
}

/// Refuses a request the HTTP API would refuse before its work (a missing or wrong key, a
/// server still loading), in the Jev error shape; passes the caller on otherwise.
async fn guard(State(state): State<SharedState>, mut request: Request, next: Next) -> Response {
    let caller = match crate::frontends::caller_of(&state, request.headers()) {
        Ok(caller) => caller,
        Err(error) => return error.into_response_for(Wire::SystemOne),
    };
    if let Err(error) = state.engine() {
        return error.into_response_for(Wire::SystemOne);
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}
