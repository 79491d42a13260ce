//! `/v1/plugins`: each tenant's own plugins over HTTP, uploaded while the server runs.
//!
//! - `GET /v1/plugins`: what the caller sees (built-ins, the operator's, its own, each with its
//!   source); the default tenant sees the operator's and the built-ins.
//! - `PUT /v1/plugins/{name}` (`content-type: application/wasm`, the component as the body):
//!   checked (size cap, kind, contract version, precompile, self-test) on a blocking thread,
//!   then written durably to the store (blob, then the version record), then swapped in for
//!   that tenant only. The order makes a crash at any point leave the previous version serving:
//!   until the record commits, a restart loads the previous active version, and the blob file
//!   is never seen half-written (temp file, fsync, rename, fsync of the directory).
//! - `DELETE /v1/plugins/{name}`: the operator's or built-in of that name serves again; with
//!   `?purge=true` the plugin's stored history goes too (every version, and every blob no
//!   version of any tenant refers to any more), freeing the tenant's storage.
//! - `GET /v1/plugins/{name}/versions`, `POST /v1/plugins/{name}/rollback {"version": N}`.
//!
//! Changes need a tenant's key: the default tenant's plugins are the operator's plugins
//! directory (`--plugins`). Limits: how many plugins (`max_plugins`, default
//! `--tenant-max-plugins`), how large (`max_plugin_bytes`, default
//! `--tenant-max-plugin-bytes`, never above [`MAX_COMPONENT_BYTES`]), how many stored
//! versions of one (`max_plugin_versions`, default `--tenant-max-plugin-versions`) and how
//! many bytes all its versions keep stored (`max_stored_bytes`, default
//! `--tenant-max-stored-bytes`): without the last two, uploads of one name fill the disk.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::Value;

use crate::error::{ApiError, Wire};
use crate::loc;
use crate::openapi::service::InstalledPlugin;
use crate::plugins::{Plugin, PluginRegistry, MAX_COMPONENT_BYTES};
use crate::state::{AppState, SharedState};
use crate::tenancy::{now_s, Caller, PluginVersion, Store, StoreError, Tenant};

/// Longest plugin name.
const MAX_NAME_LEN: usize = 64;
/// Largest rollback body.
const MAX_ROLLBACK_BODY: usize = 4096;

/// The routes of this module.
pub fn routes() -> Router<SharedState> {
    Router::new()
        .route("/v1/plugins", get(list))
        .route("/v1/plugins/{name}", put(upload).delete(remove))
        .route("/v1/plugins/{name}/versions", get(versions))
        .route("/v1/plugins/{name}/rollback", post(rollback))
}

/// Errors of this API render in the OpenAI format (`{"error": {...}}`).
fn fail(error: ApiError) -> Response {
    error.into_response_for(Wire::OpenAi)
}

fn internal(what: &str, error: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(format!("{what}: {error}"))
}

/// The caller's tenant; the default tenant may read but not change plugins.
fn tenant_of(caller: &Caller) -> Result<Arc<Tenant>, ApiError> {
    Ok(caller.require_tenant(
        "uploading or changing plugins",
        "the server's own plugins are the files of the plugins directory (setting --plugins)",
    )?)
}

/// A plugin name: 1 to 64 of `a-z 0-9 - _ .`, starting with a letter or digit.
fn check_name(name: &str) -> Result<(), ApiError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(
            loc!["name"],
            format!(
                "name: `{}` is not a plugin name: use 1 to {MAX_NAME_LEN} lowercase letters, digits, `-`, `_` or `.`, starting with a letter or digit (a question type `T` is `openai-T` on /v1/decisions, `systemone-T` on /v1/systemone)",
                // Escaped: a control or bidi character in a name is not sent back as such.
                crate::plugins::runtime::truncate(name, 80).escape_debug()
            ),
        ))
    }
}

/// The engine's registry, or 503 while the server loads.
fn registry(state: &AppState) -> Result<Arc<PluginRegistry>, ApiError> {
    Ok(state.engine()?.plugins().clone())
}

/// The largest component `tenant` may upload, and what sets it.
pub(crate) fn size_cap(state: &AppState, tenant: &Tenant) -> (u64, String) {
    let (cap, setting) = match tenant.limits.max_plugin_bytes {
        Some(bytes) => (bytes, "the tenant's limit max_plugin_bytes".to_string()),
        None => (
            state.config.tenant_max_plugin_bytes,
            "setting --tenant-max-plugin-bytes".to_string(),
        ),
    };
    if cap > MAX_COMPONENT_BYTES {
        (
            MAX_COMPONENT_BYTES,
            "the server's largest plugin component".into(),
        )
    } else {
        (cap, setting)
    }
}

/// Refuses a new name once the tenant has its `max_plugins`.
fn check_count(
    state: &AppState,
    registry: &PluginRegistry,
    tenant: &Tenant,
    name: &str,
) -> Result<(), ApiError> {
    let names = registry.tenant_plugin_names(&tenant.id);
    if names.iter().any(|n| n == name) {
        return Ok(());
    }
    let (max, setting) = match tenant.limits.max_plugins {
        Some(max) => (max, "the tenant's limit max_plugins"),
        None => (
            state.config.tenant_max_plugins,
            "setting --tenant-max-plugins",
        ),
    };
    if names.len() >= max {
        return Err(ApiError::Conflict {
            message: format!(
                "plugin `{name}` refused: the tenant has {} plugins ({}), the most it may have is {max} ({setting}); delete one first (DELETE /v1/plugins/NAME)",
                names.len(),
                names.join(", ")
            ),
        });
    }
    Ok(())
}

/// Refuses an upload that would keep more than the tenant's `max_plugin_versions` of `name`
/// (409) or more than its `max_stored_bytes` (413). A component the tenant stores already
/// (the same SHA-256) adds no bytes.
fn check_storage(
    state: &AppState,
    tenant: &Tenant,
    name: &str,
    bytes: &[u8],
) -> Result<(), ApiError> {
    let stored = state
        .directory
        .store()
        .tenant_plugin_versions(&tenant.id)
        .map_err(|e| internal("reading the tenant's plugin versions", e))?;
    let how = |own: bool, flag: &str| {
        if own {
            format!(
                "the tenant's own limit; the operator changes it with PATCH /admin/v1/tenants/{}",
                tenant.id
            )
        } else {
            format!("the server-wide default, setting {flag}; the operator sets the tenant's own with PATCH /admin/v1/tenants/{}", tenant.id)
        }
    };
    let (max_versions, own) = match tenant.limits.max_plugin_versions {
        Some(max) => (max, true),
        None => (state.config.tenant_max_plugin_versions, false),
    };
    let versions = stored.iter().filter(|v| v.name == name).count();
    if versions >= max_versions {
        return Err(ApiError::Conflict {
            message: format!(
                "plugin `{name}` refused: the tenant keeps {versions} versions of it, and tenant limit max_plugin_versions = {max_versions} ({}); drop its history first with DELETE /v1/plugins/{name}?purge=true",
                how(own, "--tenant-max-plugin-versions / DECIDE_TENANT_MAX_PLUGIN_VERSIONS")
            ),
        });
    }
    let (max_bytes, own) = match tenant.limits.max_stored_bytes {
        Some(max) => (max, true),
        None => (state.config.tenant_max_stored_bytes, false),
    };
    let mut distinct: Vec<(&str, u64)> =
        stored.iter().map(|v| (v.sha256.as_str(), v.size)).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let used: u64 = distinct.iter().map(|(_, size)| size).sum();
    let sha256 = crate::plugins::runtime::sha256_hex(bytes);
    let adds = if distinct.iter().any(|(s, _)| *s == sha256) {
        0
    } else {
        bytes.len() as u64
    };
    if used + adds > max_bytes {
        return Err(ApiError::TooLarge {
            loc: vec![],
            message: format!(
                "plugin `{name}` refused: the tenant stores {used} bytes of plugin components and this one adds {adds}, over tenant limit max_stored_bytes = {max_bytes} ({}); free space with DELETE /v1/plugins/NAME?purge=true",
                how(own, "--tenant-max-stored-bytes / DECIDE_TENANT_MAX_STORED_BYTES")
            ),
        });
    }
    Ok(())
}

/// `GET /v1/plugins`.
#[utoipa::path(
    get,
    path = "/v1/plugins",
    operation_id = "list_plugins",
    tag = "plugins",
    responses(crate::openapi::service::PluginListResponses)
)]
async fn list(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    let result = (|| {
        let caller = state.directory.authenticate(&headers)?;
        let registry = registry(&state)?;
        Ok::<_, ApiError>(crate::openapi::service::PluginList {
            plugins: registry.list_for(caller.tenant_id()),
        })
    })();
    match result {
        Ok(body) => Json(body).into_response(),
        Err(error) => fail(error),
    }
}

/// What an upload or a rollback answers.
fn installed_body(record: &PluginVersion, plugin: &Plugin) -> InstalledPlugin {
    InstalledPlugin {
        name: record.name.clone(),
        kind: record.kind.clone(),
        version: record.version,
        plugin_version: record.plugin_version.clone(),
        contract_version: plugin.contract_version().to_string(),
        sha256: record.sha256.clone(),
        size: record.size,
        source: "tenant",
    }
}

/// `PUT /v1/plugins/{name}`.
#[utoipa::path(put, path = "/v1/plugins/{name}", operation_id = "upload_plugin", tag = "plugins", params(("name" = String, Path, description = "A plugin name: 1 to 64 of `a-z 0-9 - _ .`, starting with a letter or digit.")),
    request_body(content = Vec<u8>, content_type = "application/wasm", description = "The component (a .wasm file built for wasm32-wasip2)."),
    responses(crate::openapi::service::UploadResponses))]
async fn upload(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut body = Some(body);
    match upload_inner(&state, name, &headers, &mut body).await {
        Ok(body) => Json(body).into_response(),
        Err(error) => {
            if let Some(body) = body {
                drain(body, &headers).await;
            }
            fail(error)
        }
    }
}

/// Most bytes of a refused upload read (and dropped) before answering.
const DRAIN_MAX: u64 = MAX_COMPONENT_BYTES + (1 << 20);
/// Longest wait for a refused upload's body.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads and drops the body of an upload refused before reading it (no key, wrong content
/// type, over the cap...), when it is of a bounded size. A server that answers and closes
/// while the client still sends makes the client's socket reset, and many clients then
/// report a broken connection instead of the 4xx that says what was wrong.
async fn drain(body: Body, headers: &HeaderMap) {
    use futures_util::StreamExt as _;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|size| size > DRAIN_MAX) {
        return;
    }
    let mut stream = body.into_data_stream();
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        let mut seen = 0u64;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len() as u64;
            if seen > DRAIN_MAX {
                break;
            }
        }
    })
    .await;
}

async fn upload_inner(
    state: &SharedState,
    name: String,
    headers: &HeaderMap,
    body: &mut Option<Body>,
) -> Result<InstalledPlugin, ApiError> {
    let caller = state.directory.authenticate(headers)?;
    let tenant = tenant_of(&caller)?;
    check_name(&name)?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/wasm") {
        return Err(ApiError::UnsupportedMedia {
            message: format!(
                "a plugin upload is the component itself with `content-type: application/wasm`, not `{}`",
                if content_type.is_empty() { "(none)" } else { content_type }
            ),
        });
    }
    let registry = registry(state)?;
    let (cap, setting) = size_cap(state, &tenant);
    let too_large = |size: Option<u64>| ApiError::TooLarge {
        loc: vec![],
        message: format!(
            "plugin `{name}`: the component{} exceeds the limit of {cap} bytes ({setting})",
            size.map(|s| format!(" of {s} bytes")).unwrap_or_default()
        ),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(size) = declared.filter(|size| *size > cap) {
        return Err(too_large(Some(size)));
    }
    let body = body.take().unwrap_or_default();
    let bytes = axum::body::to_bytes(body, cap as usize)
        .await
        .map_err(|_| too_large(None))?;
    if bytes.is_empty() {
        return Err(ApiError::invalid(
            vec![],
            format!("plugin `{name}`: the body is empty; send the component (a .wasm file built for wasm32-wasip2)"),
        ));
    }
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        install_upload(&state, &registry, &tenant, &name, &bytes, (cap, setting))
    })
    .await
    .map_err(|e| internal("the upload task", e))?
}

/// The blocking part of an upload: under the tenant's lock, check the count, run the checks,
/// store the blob durably, record the version, swap it in.
fn install_upload(
    state: &AppState,
    registry: &PluginRegistry,
    tenant: &Tenant,
    name: &str,
    bytes: &[u8],
    cap: (u64, String),
) -> Result<InstalledPlugin, ApiError> {
    let lock = registry.tenant_lock(&tenant.id);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    check_count(state, registry, tenant, name)?;
    check_storage(state, tenant, name, bytes)?;
    let (plugin, report) =
        registry.check_for_tenant(&tenant.id, &tenant.limits.plugins(), name, bytes, cap);
    let Some(plugin) = plugin else {
        tracing::info!(tenant = %tenant.id, plugin = name, reasons = %report.reasons(), "tenant plugin upload refused");
        return Err(ApiError::Invalid {
            loc: vec![],
            message: format!(
                "plugin `{name}` refused; the current one (if any) keeps serving: {}",
                report.reasons()
            ),
            kind: "invalid_plugin",
        });
    };
    let store = state.directory.store();
    let mut record = PluginVersion {
        tenant_id: tenant.id.clone(),
        name: name.to_string(),
        version: 0,
        kind: plugin.kind().to_string(),
        plugin_version: plugin.info().version.clone(),
        sha256: String::new(),
        size: bytes.len() as u64,
        created_at: now_s(),
        active: true,
    };
    // A purge (of another tenant's plugin with the same content) may remove the blob between
    // storing it and recording the version: the store then records nothing, and storing it
    // again makes the second try hold.
    let mut tries = 0;
    record.version = loop {
        tries += 1;
        record.sha256 = store
            .put_blob(bytes)
            .map_err(|e| internal("storing the plugin", e))?;
        match store.add_plugin_version(&record) {
            Ok(version) => break version,
            Err(StoreError::MissingBlob(_)) if tries < 3 => continue,
            Err(e) => return Err(internal("recording the plugin version", e)),
        }
    };
    let body = installed_body(&record, &plugin);
    registry.install_for_tenant(&tenant.id, name, plugin, record.version);
    Ok(body)
}

/// `DELETE /v1/plugins/{name}`.
#[utoipa::path(delete, path = "/v1/plugins/{name}", operation_id = "remove_plugin", tag = "plugins", params(("name" = String, Path, description = "A plugin name: 1 to 64 of `a-z 0-9 - _ .`, starting with a letter or digit."), RemoveQuery),
    responses(crate::openapi::service::RemoveResponses))]
async fn remove(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    // Read as pairs, not as [`RemoveQuery`]: axum's typed query answers a repeated or
    // malformed field with a plain-text 400, and this one names the field in JSON.
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let caller = state.directory.authenticate(&headers)?;
        let tenant = tenant_of(&caller)?;
        check_name(&name)?;
        let purges: Vec<&str> = query
            .iter()
            .filter(|(key, _)| key == "purge")
            .map(|(_, value)| value.as_str())
            .collect();
        if purges.len() > 1 {
            return Err(ApiError::invalid(
                loc!["purge"],
                "purge: given more than once; give it once, `true` or `false`".to_string(),
            ));
        }
        let purge = purge_flag(purges.first().copied())?;
        let registry = registry(&state)?;
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            let lock = registry.tenant_lock(&tenant.id);
            let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
            let store = state.directory.store();
            let stored = if purge {
                store.purge_plugin(&tenant.id, &name)
            } else {
                store.remove_plugin(&tenant.id, &name)
            }
            .map_err(|e| internal("removing the plugin", e))?;
            let served = registry.remove_for_tenant(&tenant.id, &name);
            if stored || served {
                Ok(())
            } else {
                Err(ApiError::NotFound {
                    message: format!("the tenant has no plugin `{name}` of its own (GET /v1/plugins lists them, source `tenant`)"),
                })
            }
        })
        .await
        .map_err(|e| internal("the removal task", e))?
    }
    .await;
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => fail(error),
    }
}

/// The query of `DELETE /v1/plugins/{name}`.
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // documents the query for the OpenAPI document; read as pairs
pub struct RemoveQuery {
    /// `true`: drop every stored version too (the plugin's history; rollback is then gone)
    /// and the components no version refers to any more. Default `false`: the versions are
    /// kept for rollback.
    #[param(value_type = Option<bool>)]
    purge: Option<String>,
}

/// `purge` as given: `true`/`false` (or `1`/`0`), else a 400 naming it.
fn purge_flag(value: Option<&str>) -> Result<bool, ApiError> {
    match value {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(ApiError::invalid(
            loc!["purge"],
            format!(
                "purge: must be `true` or `false`, got `{}`",
                crate::plugins::runtime::truncate(other, 40)
            ),
        )),
    }
}

/// The tenant's versions of `name`, oldest first; 404 when it never uploaded one.
fn stored_versions(
    store: &dyn Store,
    tenant: &Tenant,
    name: &str,
) -> Result<Vec<PluginVersion>, ApiError> {
    let versions = store
        .plugin_versions(&tenant.id, name)
        .map_err(|e| internal("reading plugin versions", e))?;
    if versions.is_empty() {
        return Err(ApiError::NotFound {
            message: format!("the tenant never uploaded a plugin `{name}`"),
        });
    }
    Ok(versions)
}

/// `GET /v1/plugins/{name}/versions`.
#[utoipa::path(get, path = "/v1/plugins/{name}/versions", operation_id = "plugin_versions", tag = "plugins", params(("name" = String, Path, description = "A plugin name: 1 to 64 of `a-z 0-9 - _ .`, starting with a letter or digit.")),
    responses(crate::openapi::service::VersionsResponses))]
async fn versions(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let result = (|| {
        let caller = state.directory.authenticate(&headers)?;
        let tenant = tenant_of(&caller)?;
        check_name(&name)?;
        let versions = stored_versions(state.directory.store().as_ref(), &tenant, &name)?;
        Ok::<_, ApiError>(crate::openapi::service::PluginVersions { name, versions })
    })();
    match result {
        Ok(body) => Json(body).into_response(),
        Err(error) => fail(error),
    }
}

/// `POST /v1/plugins/{name}/rollback {"version": N}`: makes an earlier (or any stored)
/// version the active one, after the same checks as an upload.
#[utoipa::path(post, path = "/v1/plugins/{name}/rollback", operation_id = "rollback_plugin", tag = "plugins", params(("name" = String, Path, description = "A plugin name: 1 to 64 of `a-z 0-9 - _ .`, starting with a letter or digit.")),
    request_body = crate::openapi::service::RollbackRequest,
    responses(crate::openapi::service::RollbackResponses))]
async fn rollback(
    State(state): State<SharedState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let caller = state.directory.authenticate(&headers)?;
        let tenant = tenant_of(&caller)?;
        check_name(&name)?;
        let request =
            crate::frontends::body::read_json(&headers, body, MAX_ROLLBACK_BODY, false).await?;
        let version = request
            .get("version")
            .and_then(Value::as_u64)
            .filter(|v| *v >= 1 && *v <= u32::MAX as u64)
            .ok_or_else(|| {
                ApiError::invalid(
                    loc!["version"],
                    "version: required, the version number to make active (a positive integer, see GET /v1/plugins/NAME/versions)",
                )
            })? as u32;
        let registry = registry(&state)?;
        let state = state.clone();
        tokio::task::spawn_blocking(move || rollback_to(&state, &registry, &tenant, &name, version))
            .await
            .map_err(|e| internal("the rollback task", e))?
    }
    .await;
    match result {
        Ok(body) => Json(body).into_response(),
        Err(error) => fail(error),
    }
}

fn rollback_to(
    state: &AppState,
    registry: &PluginRegistry,
    tenant: &Tenant,
    name: &str,
    version: u32,
) -> Result<InstalledPlugin, ApiError> {
    let lock = registry.tenant_lock(&tenant.id);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    let store = state.directory.store();
    let versions = stored_versions(store.as_ref(), tenant, name)?;
    let Some(mut record) = versions.into_iter().find(|v| v.version == version) else {
        return Err(ApiError::NotFound {
            message: format!("plugin `{name}` has no version {version} (GET /v1/plugins/{name}/versions lists them)"),
        });
    };
    check_count(state, registry, tenant, name)?;
    let bytes = match store.blob(&record.sha256) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(internal(
                "rollback",
                format!("the component of version {version} is missing from the store"),
            ))
        }
        Err(e) => return Err(internal("reading the plugin", e)),
    };
    // Sized when it was uploaded; the cap is not applied again to what the tenant already had.
    let cap = (
        MAX_COMPONENT_BYTES,
        "the server's largest plugin component".into(),
    );
    let (plugin, report) =
        registry.check_for_tenant(&tenant.id, &tenant.limits.plugins(), name, &bytes, cap);
    let Some(plugin) = plugin else {
        return Err(ApiError::Invalid {
            loc: loc!["version"],
            message: format!(
                "version {version} of plugin `{name}` cannot serve; the current one (if any) keeps serving: {}",
                report.reasons()
            ),
            kind: "invalid_plugin",
        });
    };
    if !store
        .activate_plugin_version(&tenant.id, name, version)
        .map_err(|e| internal("activating the version", e))?
    {
        return Err(ApiError::NotFound {
            message: format!("plugin `{name}` has no version {version}"),
        });
    }
    record.active = true;
    let body = installed_body(&record, &plugin);
    registry.install_for_tenant(&tenant.id, name, plugin, version);
    Ok(body)
}
