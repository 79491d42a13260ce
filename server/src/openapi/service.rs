//! The service endpoints: models, health, metrics, a tenant's plugins and calibration, and the
//! admin API. Their errors are OpenAI's shape ([`super::openai::OpenAiError`]).
//!
//! Most of these responses are serialized from the types here or from the records they wrap
//! (tenants, keys, usage, plugin versions, calibration progress and results, which derive
//! `ToSchema` where they are defined); `/health` is built with `json!` and checked by the
//! contract test.

use serde::{Deserialize, Serialize};
use utoipa::{IntoResponses, ToSchema};

use super::openai::OpenAiError;
use super::AnyJson;
use crate::plugins::PluginSummary;
use crate::tenancy::admin::NewKey;
use crate::tenancy::calibration::{Fitted, Progress};
use crate::tenancy::usage::UsageReport;
use crate::tenancy::{KeyRecord, PluginVersion, Tenant, TenantLimits, TenantSettings};

/// `GET /v1/models` in the shapes both SDKs read: OpenAI's `data` list and Jev's `models` list.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    pub data: Vec<ModelCard>,
    pub models: Vec<JevModel>,
}

/// The served model as OpenAI lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    /// `model`.
    pub object: &'static str,
    pub created: u64,
    /// `decide`.
    pub owned_by: &'static str,
}

/// The served model as Jev lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JevModel {
    pub name: String,
    pub description: String,
    pub release_date: &'static str,
}

/// `GET /health`: where the server is in its life. `ok` (200) carries what it serves;
/// `loading` (with its `step`), `failed` (with its `reason`) and `draining` are 503.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub status: HealthStatus,
    /// HTTP requests being answered.
    pub in_flight: u64,
    #[serde(default)]
    #[schema(required = false)]
    pub step: String,
    #[serde(default)]
    #[schema(required = false)]
    pub reason: String,
    #[serde(default)]
    #[schema(required = false)]
    pub model: String,
    #[serde(default)]
    #[schema(required = false)]
    pub arch: String,
    /// How the model computes: device, weights and the path that runs its layers (decide's
    /// fused CUDA kernels, or candle's ops and why), e.g. `cpu f32`.
    #[serde(default)]
    #[schema(required = false)]
    pub forward: String,
    #[serde(default)]
    #[schema(required = false)]
    pub device: String,
    /// Options each readout holds.
    #[serde(default)]
    #[schema(required = false)]
    pub readouts: Option<HealthReadouts>,
    /// The startup answer-slot self-check.
    #[serde(default)]
    #[schema(required = false)]
    pub self_check: Option<SelfCheck>,
    #[serde(default)]
    #[schema(required = false)]
    pub setup: Option<HealthSetup>,
    #[serde(default)]
    #[schema(required = false)]
    pub calibration: Option<HealthCalibration>,
    #[serde(default)]
    #[schema(required = false)]
    pub min_option_mass: f64,
    /// The model worker's queue: what a router reads to spread load.
    #[serde(default)]
    #[schema(required = false)]
    pub queue: Option<HealthQueue>,
    /// The prefix cache's use: what affinity routing keeps reusing.
    #[serde(default)]
    #[schema(required = false)]
    pub prefix_cache: Option<HealthPrefixCache>,
    /// Long work running now: startup steps while loading, tenants' calibrations once ready.
    pub progress: Vec<HealthTask>,
}

/// The prefix cache now: runs of blocks (`entries`) and blocks of 16 tokens held, KV bytes
/// held against `budget_bytes` (`--prefix-cache-mib`), and since the server started, lookups
/// that found something or nothing and the looked-up prompts' full blocks found or not.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthPrefixCache {
    pub entries: u64,
    pub blocks: u64,
    pub bytes: u64,
    pub budget_bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub block_hits: u64,
    pub block_misses: u64,
}

/// One piece of long work in progress.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthTask {
    /// What runs: `loading the model`, `answer-slot self-check`, `tuning`, `calibrating`,
    /// `tenant calibration`.
    pub task: String,
    /// What `done` and `total` count (`MiB`, `questions`, `reads`, `checks`).
    pub unit: String,
    pub done: u64,
    /// None while not known.
    pub total: Option<u64>,
    pub elapsed_s: f64,
    /// Units per second so far; none before the first.
    pub rate_per_s: Option<f64>,
    /// Seconds left at that rate; none before the first unit or without a total.
    pub eta_s: Option<f64>,
    /// The phase or candidate it is on.
    pub detail: Option<String>,
}

/// The model worker's queue now and its bounds (`--max-queued-requests`,
/// `--max-queued-tokens`): beyond them requests get 503 `overloaded`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthQueue {
    pub requests: u64,
    pub tokens: u64,
    pub max_requests: u64,
    pub max_tokens: u64,
}

/// `/health`'s status.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    Ok,
    Loading,
    Failed,
    Draining,
}

/// Options each readout holds with the served model.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthReadouts {
    pub direct: u64,
    #[serde(rename = "wide-direct")]
    pub wide_direct: u64,
    pub numbers: u64,
    pub words: bool,
}

/// The self-check's option mass against its threshold.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SelfCheck {
    pub option_mass: f64,
    pub min_mass: f64,
    /// The empty reasoning block added after the generation prompt, if one was needed.
    pub answer_suffix: Option<String>,
}

/// The prompt setup served and where it came from.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthSetup {
    pub renderer: String,
    pub labels: String,
    pub readout: String,
    pub source: String,
    /// What startup tuning measured (null when pinned, skipped or failed).
    #[schema(value_type = AnyJson, required = false)]
    pub tuning: Option<serde_json::Value>,
    /// Which tuned setup this device serves and why (`--latency-target-ms`): `setup`,
    /// `as_tuned`, `reason`, `forward`, `single_ms` and `permuted_ms` (one question over a new
    /// input read once and permuted, timed at startup), `target_ms`; null until measured or
    /// when not weighed.
    #[schema(value_type = AnyJson, required = false)]
    pub serving: Option<serde_json::Value>,
    /// Startup steps still measuring in the background (`tuning`, `latency`, `calibration`):
    /// the server answers meanwhile with the setup and correction shown, and swaps in their
    /// results.
    pub pending: Vec<String>,
}

/// The calibration served.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCalibration {
    pub policy: String,
    pub params: Vec<f64>,
    pub temperature: f64,
    pub source: String,
}

/// `GET /v1/plugins`: what the caller sees, each with its source.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PluginList {
    pub plugins: Vec<PluginSummary>,
}

/// Where a plugin came from: embedded, the plugins directory, or the caller's upload.
pub use decide_plugins::PluginSourceName;

/// What an upload or a rollback installed for the tenant.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct InstalledPlugin {
    pub name: String,
    /// `question-type`, `renderer` or `calibration`.
    pub kind: String,
    /// The store's version number (1, 2, ... per name).
    pub version: u32,
    /// The plugin's own version string.
    pub plugin_version: String,
    /// The `decide:plugin` contract version it was built against.
    pub contract_version: String,
    pub sha256: String,
    pub size: u64,
    /// `tenant`.
    pub source: &'static str,
}

/// `GET /v1/plugins/{name}/versions`: the tenant's versions, oldest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PluginVersions {
    pub name: String,
    pub versions: Vec<PluginVersion>,
}

/// `POST /v1/plugins/{name}/rollback`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct RollbackRequest {
    /// The version to make active (see `/versions`).
    #[schema(minimum = 1, maximum = 4294967295u64)]
    pub version: u64,
}

/// `PUT /v1/calibration` started a fit: poll `GET /v1/calibration`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CalibrationStarted {
    /// `running`.
    pub status: &'static str,
    pub progress: Progress,
    /// `/v1/calibration`.
    pub poll: &'static str,
}

/// `GET /v1/calibration`: the running or last fit, and the stored result.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CalibrationStatus {
    /// `running`, `done`, `failed`, `cancelled` (by `DELETE /v1/calibration`) or `none`.
    pub status: &'static str,
    pub progress: Option<Progress>,
    pub result: Option<Fitted>,
}

/// `GET /admin/v1/tenants`, oldest first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
}

/// `GET /admin/v1/tenants/{id}/keys`: revoked ones too, never the keys or their hashes.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyRecord>,
}

/// `GET /admin/v1/tenants/{id}/usage`: since the server started.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantUsage {
    /// The tenant, or `default` (requests without a tenant key).
    pub tenant_id: String,
    pub usage: UsageReport,
}

/// `GET /v1/usage`: the caller's own tenant.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OwnUsage {
    /// The caller's tenant, or `default` (a server without tenants, or the operator's
    /// `--api-key`).
    pub tenant_id: String,
    /// Since the server started (this replica's own counts).
    pub usage: UsageReport,
    /// The tenant's own limits as the admin API set them (`null`: the default tenant, which
    /// has the server's flags); a limit left out has the server's default.
    pub limits: Option<crate::tenancy::store::TenantLimits>,
    /// What each of the tenant's rates allows, has left now and when it is full again: the
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens,decisions}` headers every
    /// decision response carries (also sent as headers here); empty when it has no rate.
    pub rate_limits: std::collections::BTreeMap<String, String>,
}

/// `POST /admin/v1/tenants`. Unknown fields are refused (400).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantCreate {
    /// 1 to 128 characters, not blank, no control characters; unique (else 409).
    #[schema(
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*\S[^\x00-\x1f\x7f-\x9f]*$",
        max_length = 128
    )]
    pub name: String,
    /// Limits not set take the server-wide `--tenant-*` defaults.
    pub limits: Option<TenantLimits>,
    pub settings: Option<TenantSettings>,
}

/// `PATCH /admin/v1/tenants/{id}`: a field given replaces, one left out is kept, `null`
/// clears a limit or setting (`"limits": null` clears them all). Unknown fields are refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantUpdate {
    #[schema(
        pattern = r"^[^\x00-\x1f\x7f-\x9f]*\S[^\x00-\x1f\x7f-\x9f]*$",
        max_length = 128
    )]
    pub name: Option<String>,
    pub limits: Option<TenantLimits>,
    pub settings: Option<TenantSettings>,
}

/// `POST /admin/v1/tenants/{id}/keys`: no fields yet (an empty body or `{}`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyCreate {}

/// The statuses of `GET /v1/models`.
#[derive(IntoResponses)]
pub enum ModelsResponses {
    /// The served model.
    #[response(status = 200)]
    Ok(ModelList),
    /// The server is loading or cannot serve.
    #[response(status = 503)]
    NotReady(OpenAiError),
}

/// The statuses of `GET /health`.
#[derive(IntoResponses)]
pub enum HealthResponses {
    /// Ready: the model, its readouts, setup and calibration.
    #[response(status = 200)]
    Ok(Health),
    /// Loading, failed (with the reason) or draining.
    #[response(status = 503)]
    NotServing(Health),
}

/// The statuses of `GET /v1/plugins`.
#[derive(IntoResponses)]
pub enum PluginListResponses {
    #[response(
        status = 200,
        description = "Built-ins, the operator's and the caller's own."
    )]
    Ok(PluginList),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(status = 503, description = "The server is loading.")]
    NotReady(OpenAiError),
}

/// The statuses of `PUT /v1/plugins/{name}`.
#[derive(IntoResponses)]
pub enum UploadResponses {
    #[response(
        status = 200,
        description = "Checked, stored and swapped in for the tenant."
    )]
    Ok(InstalledPlugin),
    /// Not a plugin name, an empty body, or a component that fails its checks (the current one
    /// keeps serving).
    #[response(status = 400)]
    Invalid(OpenAiError),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(
        status = 403,
        description = "Not a tenant's key: the server's own plugins are the --plugins directory."
    )]
    Forbidden(OpenAiError),
    #[response(
        status = 409,
        description = "The tenant has its `max_plugins`, or keeps `max_plugin_versions` of this plugin (drop them with `DELETE ?purge=true`)."
    )]
    Conflict(OpenAiError),
    #[response(
        status = 413,
        description = "Over the tenant's `max_plugin_bytes`, or its stored components would exceed `max_stored_bytes`."
    )]
    TooLarge(OpenAiError),
    #[response(status = 415, description = "Not `content-type: application/wasm`.")]
    UnsupportedMedia(OpenAiError),
    #[response(status = 503, description = "The server is loading.")]
    NotReady(OpenAiError),
}

/// The statuses of `DELETE /v1/plugins/{name}`.
#[derive(IntoResponses)]
pub enum RemoveResponses {
    #[response(
        status = 204,
        description = "Removed: the operator's or built-in plugin of that name serves again; with `purge=true` its stored versions and unreferenced components are gone too."
    )]
    Removed,
    #[response(
        status = 400,
        description = "Not a plugin name, or `purge` is not `true` or `false`."
    )]
    Invalid(OpenAiError),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "Not a tenant's key.")]
    Forbidden(OpenAiError),
    #[response(status = 404, description = "The tenant has no plugin of that name.")]
    NotFound(OpenAiError),
    #[response(status = 503, description = "The server is loading.")]
    NotReady(OpenAiError),
}

/// The statuses of `GET /v1/plugins/{name}/versions`.
#[derive(IntoResponses)]
pub enum VersionsResponses {
    #[response(status = 200, description = "The tenant's versions, oldest first.")]
    Ok(PluginVersions),
    #[response(status = 400, description = "Not a plugin name.")]
    Invalid(OpenAiError),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "Not a tenant's key.")]
    Forbidden(OpenAiError),
    #[response(
        status = 404,
        description = "The tenant never uploaded a plugin of that name."
    )]
    NotFound(OpenAiError),
}

/// The statuses of `POST /v1/plugins/{name}/rollback`.
#[derive(IntoResponses)]
pub enum RollbackResponses {
    #[response(status = 200, description = "The version is active again.")]
    Ok(InstalledPlugin),
    /// Not a plugin name, no valid `version`, a body that is not JSON, or a version that
    /// cannot serve.
    #[response(status = 400)]
    Invalid(OpenAiError),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "Not a tenant's key.")]
    Forbidden(OpenAiError),
    #[response(status = 404, description = "No such plugin or version.")]
    NotFound(OpenAiError),
    #[response(status = 409, description = "The tenant has its `max_plugins`.")]
    Conflict(OpenAiError),
    #[response(status = 413, description = "The body is over 4 KiB.")]
    TooLarge(OpenAiError),
    #[response(
        status = 415,
        description = "`multipart/form-data` or an unknown `Content-Encoding`."
    )]
    UnsupportedMedia(OpenAiError),
    #[response(status = 503, description = "The server is loading.")]
    NotReady(OpenAiError),
}

/// The statuses of `GET /v1/calibration`.
#[derive(IntoResponses)]
pub enum CalibrationStatusResponses {
    #[response(
        status = 200,
        description = "The running or last fit and the stored result."
    )]
    Ok(CalibrationStatus),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(
        status = 403,
        description = "Not a tenant's key: the server's own calibration is the operator's."
    )]
    Forbidden(OpenAiError),
}

/// The statuses of `GET /v1/usage`.
#[derive(IntoResponses)]
pub enum OwnUsageResponses {
    #[response(
        status = 200,
        description = "The caller's usage since the server started and its rate limits now."
    )]
    Ok(OwnUsage),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
}

/// The statuses of `PUT /v1/calibration`.
#[derive(IntoResponses)]
pub enum CalibrationUploadResponses {
    #[response(status = 202, description = "The fit started in the background.")]
    Started(CalibrationStarted),
    /// Not UTF-8, a malformed line, or fewer than 50 questions.
    #[response(status = 400)]
    Invalid(OpenAiError),
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "Not a tenant's key.")]
    Forbidden(OpenAiError),
    #[response(status = 409, description = "A fit of this tenant is running.")]
    Conflict(OpenAiError),
    #[response(
        status = 413,
        description = "Over `--max-body-bytes`, or more questions than the tenant's `max_calibration_questions`."
    )]
    TooLarge(OpenAiError),
    #[response(status = 503, description = "The server is loading.")]
    NotReady(OpenAiError),
}

/// The statuses of `DELETE /v1/calibration`.
#[derive(IntoResponses)]
pub enum CalibrationRemoveResponses {
    #[response(
        status = 204,
        description = "Removed: a running fit is cancelled (its reads stop), and the tenant's answers use the server's calibration again."
    )]
    Removed,
    #[response(status = 401, description = "The key is missing or not valid.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "Not a tenant's key.")]
    Forbidden(OpenAiError),
    #[response(
        status = 404,
        description = "The tenant has no calibration of its own and no fit running."
    )]
    NotFound(OpenAiError),
}

/// The statuses of `POST /admin/v1/tenants`.
#[derive(IntoResponses)]
pub enum CreateTenantResponses {
    #[response(status = 201, description = "The tenant as stored.")]
    Created(Tenant),
    /// An invalid body, naming the field.
    #[response(status = 400)]
    Invalid(OpenAiError),
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
    #[response(status = 409, description = "The name is taken.")]
    Conflict(OpenAiError),
    #[response(status = 413, description = "Over `--max-body-bytes`.")]
    TooLarge(OpenAiError),
    #[response(
        status = 415,
        description = "`multipart/form-data` or an unknown `Content-Encoding`."
    )]
    UnsupportedMedia(OpenAiError),
}

/// The statuses of `GET /admin/v1/tenants`.
#[derive(IntoResponses)]
pub enum ListTenantsResponses {
    #[response(status = 200, description = "Every tenant, oldest first.")]
    Ok(TenantList),
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
}

/// The statuses of `GET /admin/v1/tenants/{id}`.
#[derive(IntoResponses)]
pub enum GetTenantResponses {
    #[response(status = 200, description = "The tenant.")]
    Ok(Tenant),
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
    #[response(status = 404, description = "No tenant has that id.")]
    NotFound(OpenAiError),
}

/// The statuses of `PATCH /admin/v1/tenants/{id}`.
#[derive(IntoResponses)]
pub enum UpdateTenantResponses {
    #[response(status = 200, description = "The tenant as stored now.")]
    Ok(Tenant),
    /// An invalid body, naming the field.
    #[response(status = 400)]
    Invalid(OpenAiError),
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
    #[response(status = 404, description = "No tenant has that id.")]
    NotFound(OpenAiError),
    #[response(status = 409, description = "The name is taken.")]
    Conflict(OpenAiError),
    #[response(status = 413, description = "Over `--max-body-bytes`.")]
    TooLarge(OpenAiError),
    #[response(
        status = 415,
        description = "`multipart/form-data` or an unknown `Content-Encoding`."
    )]
    UnsupportedMedia(OpenAiError),
}

/// The statuses of deleting a tenant or revoking a key.
#[derive(IntoResponses)]
pub enum AdminDeleteResponses {
    #[response(
        status = 204,
        description = "Deleted (a tenant with its keys, plugins and calibration) or revoked."
    )]
    Deleted,
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
    #[response(
        status = 404,
        description = "No such tenant, or no active key of that id."
    )]
    NotFound(OpenAiError),
}

/// The statuses of `POST /admin/v1/tenants/{id}/keys`.
#[derive(IntoResponses)]
pub enum CreateKeyResponses {
    #[response(
        status = 201,
        description = "The key, shown this once; only its hash is stored."
    )]
    Created(NewKey),
    #[response(
        status = 400,
        description = "A body with fields (none are accepted yet), or not JSON."
    )]
    Invalid(OpenAiError),
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
    #[response(status = 404, description = "No tenant has that id.")]
    NotFound(OpenAiError),
    #[response(status = 413, description = "Over `--max-body-bytes`.")]
    TooLarge(OpenAiError),
    #[response(
        status = 415,
        description = "`multipart/form-data` or an unknown `Content-Encoding`."
    )]
    UnsupportedMedia(OpenAiError),
}

/// The statuses of `GET /admin/v1/tenants/{id}/keys`.
#[derive(IntoResponses)]
pub enum ListKeysResponses {
    #[response(status = 200, description = "The tenant's keys.")]
    Ok(KeyList),
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
    #[response(status = 404, description = "No tenant has that id.")]
    NotFound(OpenAiError),
}

/// The statuses of `GET /admin/v1/tenants/{id}/usage`.
#[derive(IntoResponses)]
pub enum UsageResponses {
    #[response(
        status = 200,
        description = "What the tenant used since the server started."
    )]
    Ok(TenantUsage),
    #[response(status = 401, description = "Not the --admin-key.")]
    Unauthorized(OpenAiError),
    #[response(status = 403, description = "The admin API is off (no --admin-key).")]
    Forbidden(OpenAiError),
    #[response(status = 404, description = "No tenant has that id.")]
    NotFound(OpenAiError),
}
