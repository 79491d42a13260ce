//! The HTTP admin API under `/admin/v1/`: thin handlers over [`super::admin`].
//!
//! Every route is behind [`guard`]: `Authorization: Bearer <--admin-key>`, compared as hashes
//! in constant time. Without `--admin-key` the whole API answers 403 saying how to turn it on,
//! so an operator who never set one has no admin surface to attack. Errors use OpenAI's error
//! shape (`{"error": {...}}`), like the rest of the operator endpoints.
//!
//! Store calls run on the blocking pool (SQLite may wait on a lock the CLI holds), and after
//! every write the directory is reloaded, so a key created or revoked here authenticates, or
//! stops authenticating, on the very next request. Nothing here needs the model: the admin
//! API serves while the engine is still loading.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

use super::admin;
use super::directory::presented_key;
use super::keys;
use super::store::Store;
use crate::error::{ApiError, Wire};
use crate::frontends::json::only_fields;
use crate::state::SharedState;

/// The routes, guarded; the router (`api.rs`) merges them.
pub fn routes(state: SharedState) -> Router<SharedState> {
    Router::new()
        .route("/admin/v1/tenants", post(create_tenant).get(list_tenants))
        .route(
            "/admin/v1/tenants/{id}",
            get(get_tenant).patch(update_tenant).delete(delete_tenant),
        )
        .route(
            "/admin/v1/tenants/{id}/keys",
            post(create_key).get(list_keys),
        )
        .route(
            "/admin/v1/tenants/{id}/keys/{key_id}",
            axum::routing::delete(revoke_key),
        )
        .route("/admin/v1/tenants/{id}/usage", get(usage))
        .route_layer(middleware::from_fn_with_state(state, guard))
}

/// Lets through only requests bearing the admin key.
async fn guard(State(state): State<SharedState>, request: Request, next: Next) -> Response {
    let Some(expected) = state.config.admin_key.as_deref() else {
        return fail(ApiError::Forbidden {
            message: "the admin API is off: start the server with --admin-key KEY (or DECIDE_ADMIN_KEY=KEY) and send `Authorization: Bearer KEY`; operators without HTTP can use `decide tenants` on the same --data-dir".into(),
        });
    };
    let allowed = presented_key(request.headers())
        .is_some_and(|key| keys::hashes_equal(&keys::hash(key), &keys::hash(expected)));
    if !allowed {
        return fail(ApiError::Unauthorized {
            message: "the admin API needs `Authorization: Bearer <admin key>` with the key the server was started with (--admin-key)".into(),
        });
    }
    next.run(request).await
}

fn fail(error: ApiError) -> Response {
    error.into_response_for(Wire::OpenAi)
}

/// Runs a store operation on the blocking pool.
async fn on_store<T: Send + 'static>(
    state: &SharedState,
    operation: impl FnOnce(&dyn Store) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = state.directory.store().clone();
    tokio::task::spawn_blocking(move || operation(store.as_ref()))
        .await
        .map_err(|e| ApiError::Internal(format!("admin operation panicked: {e}")))?
}

/// Makes a write visible to the next request at once.
fn written(state: &SharedState) {
    if let Err(error) = state.directory.reload() {
        tracing::warn!(%error, "cannot reload the tenant directory after an admin write; it reloads on its next check");
    }
}

/// The body as JSON (within `--max-body-bytes`).
async fn body_json(
    state: &SharedState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    crate::frontends::read_json(state, headers, body, false).await
}

fn respond(result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(fail)
}

#[utoipa::path(post, path = "/admin/v1/tenants", operation_id = "create_tenant", tag = "admin", security(("bearer" = [])),
    request_body = crate::openapi::service::TenantCreate,
    responses(crate::openapi::service::CreateTenantResponses))]
async fn create_tenant(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    respond(
        async {
            let body = body_json(&state, &headers, body).await?;
            let tenant = on_store(&state, move |store| admin::create_tenant(store, &body)).await?;
            written(&state);
            Ok((StatusCode::CREATED, Json(tenant)).into_response())
        }
        .await,
    )
}

#[utoipa::path(get, path = "/admin/v1/tenants", operation_id = "list_tenants", tag = "admin", security(("bearer" = [])),
    responses(crate::openapi::service::ListTenantsResponses))]
async fn list_tenants(State(state): State<SharedState>) -> Response {
    respond(
        on_store(&state, admin::list_tenants)
            .await
            .map(|tenants| Json(crate::openapi::service::TenantList { tenants }).into_response()),
    )
}

#[utoipa::path(get, path = "/admin/v1/tenants/{id}", operation_id = "get_tenant", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tenant id (`tn_...`).")), responses(crate::openapi::service::GetTenantResponses))]
async fn get_tenant(State(state): State<SharedState>, Path(id): Path<String>) -> Response {
    respond(
        on_store(&state, move |store| admin::get_tenant(store, &id))
            .await
            .map(|tenant| Json(tenant).into_response()),
    )
}

#[utoipa::path(patch, path = "/admin/v1/tenants/{id}", operation_id = "update_tenant", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tenant id (`tn_...`).")), request_body = crate::openapi::service::TenantUpdate,
    responses(crate::openapi::service::UpdateTenantResponses))]
async fn update_tenant(
    State(state): State<SharedState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    respond(
        async {
            let body = body_json(&state, &headers, body).await?;
            let tenant =
                on_store(&state, move |store| admin::update_tenant(store, &id, &body)).await?;
            written(&state);
            Ok(Json(tenant).into_response())
        }
        .await,
    )
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}", operation_id = "delete_tenant", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tenant id (`tn_...`).")), responses(crate::openapi::service::AdminDeleteResponses))]
async fn delete_tenant(State(state): State<SharedState>, Path(id): Path<String>) -> Response {
    respond(
        async {
            let deleted = id.clone();
            on_store(&state, move |store| admin::delete_tenant(store, &deleted)).await?;
            written(&state);
            state.forget_tenant(&id);
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        .await,
    )
}

#[utoipa::path(post, path = "/admin/v1/tenants/{id}/keys", operation_id = "create_key", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tenant id (`tn_...`).")), request_body(content = Option<crate::openapi::service::KeyCreate>, description = "Empty, or `{}`."),
    responses(crate::openapi::service::CreateKeyResponses))]
async fn create_key(
    State(state): State<SharedState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    respond(
        async {
            // No fields are accepted yet; an empty body or `{}` is fine, anything else is named.
            let limit = state.config.max_body_bytes;
            let bytes =
                axum::body::to_bytes(body, limit)
                    .await
                    .map_err(|_| ApiError::TooLarge {
                        loc: vec![],
                        message: format!(
                            "the request body is over {limit} bytes (setting --max-body-bytes)"
                        ),
                    })?;
            if !bytes.iter().all(u8::is_ascii_whitespace) {
                let value =
                    crate::frontends::body::read_json(&headers, Body::from(bytes), limit, false)
                        .await?;
                only_fields(
                    crate::frontends::json::object(&value, &vec![])?,
                    &[],
                    &vec![],
                )?;
            }
            let key = on_store(&state, move |store| admin::create_key(store, &id)).await?;
            written(&state);
            Ok((StatusCode::CREATED, Json(key)).into_response())
        }
        .await,
    )
}

#[utoipa::path(get, path = "/admin/v1/tenants/{id}/keys", operation_id = "list_keys", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tenant id (`tn_...`).")), responses(crate::openapi::service::ListKeysResponses))]
async fn list_keys(State(state): State<SharedState>, Path(id): Path<String>) -> Response {
    respond(
        on_store(&state, move |store| admin::list_keys(store, &id))
            .await
            .map(|keys| Json(crate::openapi::service::KeyList { keys }).into_response()),
    )
}

#[utoipa::path(delete, path = "/admin/v1/tenants/{id}/keys/{key_id}", operation_id = "revoke_key", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tenant id (`tn_...`)."), ("key_id" = String, Path, description = "The key id (`key_...`).")),
    responses(crate::openapi::service::AdminDeleteResponses))]
async fn revoke_key(
    State(state): State<SharedState>,
    Path((id, key_id)): Path<(String, String)>,
) -> Response {
    respond(
        async {
            on_store(&state, move |store| admin::revoke_key(store, &id, &key_id)).await?;
            written(&state);
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        .await,
    )
}

/// `{tenant_id, usage}` since the server started; `default` is the implicit tenant (requests
/// without a tenant key).
#[utoipa::path(get, path = "/admin/v1/tenants/{id}/usage", operation_id = "tenant_usage", tag = "admin", security(("bearer" = [])),
    params(("id" = String, Path, description = "The tenant id (`tn_...`), or `default`.")),
    responses(crate::openapi::service::UsageResponses))]
async fn usage(State(state): State<SharedState>, Path(id): Path<String>) -> Response {
    respond(
        async {
            if id != "default" {
                let known = id.clone();
                on_store(&state, move |store| admin::get_tenant(store, &known)).await?;
            }
            let report = state.usage.report(&id);
            Ok(Json(crate::openapi::service::TenantUsage {
                tenant_id: id,
                usage: report,
            })
            .into_response())
        }
        .await,
    )
}
