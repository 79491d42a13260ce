//! What tenancy keeps across restarts, behind one trait.
//!
//! The trait speaks in whole records (a tenant, a key, a plugin version), not in SQL, so a
//! second implementation (Postgres for several replicas) changes nothing above it. Every
//! write is atomic: it happens whole or not at all. Blobs (plugin components, calibration
//! question files) are content-addressed: `put_blob` returns their SHA-256 only once the
//! bytes are durable, so a record that names a blob never points at a half-written file.

use serde::{Deserialize, Serialize};

/// A tenant's limits. `None` takes the server-wide default (the `--tenant-*` flags); a value
/// also never exceeds the server's own limit of the same name (`--max-questions`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Decision requests per minute (token bucket, bursts up to the whole minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u64>,
    /// Questions (decisions) per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decisions_per_minute: Option<u64>,
    /// Prompt tokens per minute (cached tokens count too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_minute: Option<u64>,
    /// Decision requests being answered at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_requests: Option<u64>,
    /// Decision requests waiting for one of the concurrent slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_requests: Option<u64>,
    /// Questions in one request (narrows `--max-questions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_questions: Option<usize>,
    /// Options of one question (narrows `--max-options`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_options: Option<usize>,
    /// Bytes of input text (narrows `--max-input-bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_input_bytes: Option<usize>,
    /// The tenant's own plugins (names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugins: Option<usize>,
    /// Bytes of one uploaded plugin component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugin_bytes: Option<u64>,
    /// Stored versions of one of the tenant's plugins (its history, for rollback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_plugin_versions: Option<usize>,
    /// Bytes of every plugin component the tenant's versions keep, together (a component
    /// kept by several versions counts once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stored_bytes: Option<u64>,
    /// Labelled questions in one calibration upload (`PUT /v1/calibration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calibration_questions: Option<usize>,
    /// Memory cap of one instance of the tenant's plugins, MiB (narrows `--plugin-memory-mib`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_memory_mib: Option<u64>,
    /// Deadline of one call of the tenant's plugins, ms (narrows `--plugin-timeout-ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_timeout_ms: Option<u64>,
}

/// A tenant's settings: what its requests get when they do not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantSettings {
    /// Renderer plugin (its own, the operator's or a built-in); default `--renderer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S", max_length = 128)]
    pub renderer: Option<String>,
    /// Calibration policy plugin; default `--calibration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S", max_length = 128)]
    pub calibration: Option<String>,
    /// Fair-share weight on the model worker (default 1): a tenant of weight 2 gets twice the
    /// tokens per round of one of weight 1 when both are waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub weight: Option<u32>,
    /// Least option mass an answer needs, else it is a refusal (default `--min-option-mass`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_option_mass: Option<f64>,
}

/// A tenant as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tenant {
    /// `tn_` and 16 hex digits.
    pub id: String,
    pub name: String,
    pub limits: TenantLimits,
    pub settings: TenantSettings,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
}

/// An API key as stored: never the key itself, only its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KeyRecord {
    /// `key_` and 12 hex digits; what the admin API revokes.
    pub id: String,
    pub tenant_id: String,
    /// The key's first characters (`dk_` and 8 more), enough to recognise it in a list.
    pub prefix: String,
    /// Hex SHA-256 of the whole key.
    #[serde(skip_serializing)]
    pub hash: String,
    pub created_at: u64,
    /// When it was revoked; a revoked key authenticates nothing.
    pub revoked_at: Option<u64>,
}

/// One uploaded version of one of a tenant's plugins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PluginVersion {
    pub tenant_id: String,
    /// The name requests use (`openai-T`, `systemone-T`, a renderer or policy name).
    pub name: String,
    /// 1, 2, ... per (tenant, name), in upload order.
    pub version: u32,
    /// `question-type`, `renderer` or `calibration`.
    pub kind: String,
    /// The plugin's own version string (from its `info`).
    pub plugin_version: String,
    /// Hex SHA-256 of the component: the blob's name.
    pub sha256: String,
    pub size: u64,
    pub created_at: u64,
    /// Whether this is the version the tenant's requests get (at most one per name).
    pub active: bool,
}

/// The columns of each table, in the order both stores read and write them.
pub(super) const TENANT_COLUMNS: &str = "id, name, limits, settings, created_at";
pub(super) const KEY_COLUMNS: &str = "id, tenant_id, prefix, hash, created_at, revoked_at";
pub(super) const VERSION_COLUMNS: &str =
    "tenant_id, name, version, kind, plugin_version, sha256, size, created_at, active";

/// A record's limits or settings as the stores keep them (JSON text).
pub(super) fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".into())
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed.
    #[error("tenant store: {0}")]
    Database(String),
    /// Reading or writing a blob file failed.
    #[error("tenant store blob: {0}")]
    Io(String),
    /// The record conflicts with one that exists (a duplicate name).
    #[error("{0}")]
    Conflict(String),
    /// A version names a blob that is not stored (any more): a purge removed it between
    /// `put_blob` and the record; putting the blob again and retrying succeeds.
    #[error("tenant store: blob {0} is not stored")]
    MissingBlob(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::Database(error.to_string())
    }
}

impl From<std::io::Error> for StoreError {
    fn from(error: std::io::Error) -> Self {
        StoreError::Io(error.to_string())
    }
}

impl TenantLimits {
    /// The limits a tenant's plugin calls run under (the plugins crate needs no others).
    pub fn plugins(&self) -> decide_plugins::TenantPluginLimits {
        decide_plugins::TenantPluginLimits {
            plugin_memory_mib: self.plugin_memory_mib,
            plugin_timeout_ms: self.plugin_timeout_ms,
        }
    }
}

impl PluginVersion {
    /// What the plugin registry reads of this record.
    pub fn stored(&self) -> decide_plugins::StoredPlugin {
        decide_plugins::StoredPlugin {
            tenant_id: self.tenant_id.clone(),
            name: self.name.clone(),
            version: self.version,
            sha256: self.sha256.clone(),
        }
    }
}

/// A store as the plugin registry reads it: its tenants' active plugin versions and their
/// components ([`decide_plugins::ComponentStore`]).
pub struct Components<'a>(pub &'a dyn Store);

impl decide_plugins::ComponentStore for Components<'_> {
    fn active_plugins(&self) -> Result<Vec<decide_plugins::StoredPlugin>, String> {
        let active = self.0.active_plugins().map_err(|e| e.to_string())?;
        Ok(active.iter().map(PluginVersion::stored).collect())
    }

    fn component(&self, sha256: &str) -> Result<Option<Vec<u8>>, String> {
        self.0.blob(sha256).map_err(|e| e.to_string())
    }
}

/// Durable tenancy state. Implementations are shared by every request (`Send + Sync`) and
/// safe against other processes writing the same store (the CLI, other replicas).
pub trait Store: Send + Sync {
    /// A number that changes whenever anything in the store changed, by this process or
    /// another: the directory reloads when it moves.
    fn generation(&self) -> Result<u64, StoreError>;

    /// Waits until the generation differs from `seen`, at most `timeout`, and returns it.
    /// The default sleeps `timeout` and reads it (SQLite has no change notification);
    /// Postgres wakes as soon as a change is notified.
    fn wait_for_change(&self, seen: u64, timeout: std::time::Duration) -> Result<u64, StoreError> {
        let _ = seen;
        std::thread::sleep(timeout);
        self.generation()
    }

    /// The rate buckets this store shares between replicas, if it does (Postgres); `None`
    /// keeps every bucket in this process (the embedded store serves one node).
    fn shared_rates(
        self: std::sync::Arc<Self>,
    ) -> Option<std::sync::Arc<dyn crate::shared_rates::SharedRates>> {
        None
    }

    /// Adds a tenant; a duplicate id or name is a [`StoreError::Conflict`].
    fn create_tenant(&self, tenant: &Tenant) -> Result<(), StoreError>;
    /// Every tenant, oldest first.
    fn tenants(&self) -> Result<Vec<Tenant>, StoreError>;
    fn tenant(&self, id: &str) -> Result<Option<Tenant>, StoreError>;
    /// Replaces name, limits and settings; false when there is no such tenant.
    fn update_tenant(&self, tenant: &Tenant) -> Result<bool, StoreError>;
    /// Removes a tenant with its keys, plugin versions and calibration, then the blobs no
    /// version (of any tenant) refers to any more; false when unknown.
    fn delete_tenant(&self, id: &str) -> Result<bool, StoreError>;
    /// Whether a tenant was ever created in this store, even if none is left. A server that
    /// had tenants never serves without a key again (it would be open to anyone once the
    /// last tenant is deleted), and this must hold across restarts.
    fn had_tenants(&self) -> Result<bool, StoreError>;

    fn add_key(&self, key: &KeyRecord) -> Result<(), StoreError>;
    /// A tenant's keys, revoked ones included.
    fn keys(&self, tenant_id: &str) -> Result<Vec<KeyRecord>, StoreError>;
    /// Every key that is not revoked, of every tenant.
    fn active_keys(&self) -> Result<Vec<KeyRecord>, StoreError>;
    /// Marks a key revoked; false when the tenant has no such key (or it was revoked already).
    fn revoke_key(&self, tenant_id: &str, key_id: &str, at: u64) -> Result<bool, StoreError>;

    /// Writes `bytes` durably under their SHA-256 (temp file, fsync, rename, fsync of the
    /// directory) and returns the hex digest; writing existing content is a no-op.
    fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError>;
    /// The blob of that digest, if stored.
    fn blob(&self, sha256: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Records a new version (numbered after the last of its name) and makes it the active
    /// one, in one transaction; returns the version number. The blob must be stored first:
    /// when it is not (a purge removed it meanwhile), nothing is recorded and the error is
    /// [`StoreError::MissingBlob`].
    fn add_plugin_version(&self, version: &PluginVersion) -> Result<u32, StoreError>;
    /// Every version of a tenant's plugin, oldest first.
    fn plugin_versions(
        &self,
        tenant_id: &str,
        name: &str,
    ) -> Result<Vec<PluginVersion>, StoreError>;
    /// Makes `version` the active one (rollback); false when there is no such version.
    fn activate_plugin_version(
        &self,
        tenant_id: &str,
        name: &str,
        version: u32,
    ) -> Result<bool, StoreError>;
    /// Deactivates every version of a tenant's plugin (history is kept, for rollback);
    /// false when none was active.
    fn remove_plugin(&self, tenant_id: &str, name: &str) -> Result<bool, StoreError>;
    /// The active version of every tenant's every plugin.
    fn active_plugins(&self) -> Result<Vec<PluginVersion>, StoreError>;
    /// Every version of every one of a tenant's plugins (what its storage limits count).
    fn tenant_plugin_versions(&self, tenant_id: &str) -> Result<Vec<PluginVersion>, StoreError>;
    /// Drops every version of a tenant's plugin (its whole history), then the blobs no
    /// version of any tenant refers to any more; false when it had no version.
    fn purge_plugin(&self, tenant_id: &str, name: &str) -> Result<bool, StoreError>;

    /// Stores a tenant's calibration result (JSON), replacing the previous one.
    fn save_calibration(&self, tenant_id: &str, json: &str) -> Result<(), StoreError>;
    fn calibration(&self, tenant_id: &str) -> Result<Option<String>, StoreError>;
    /// Removes a tenant's calibration result; false when it had none.
    fn delete_calibration(&self, tenant_id: &str) -> Result<bool, StoreError>;
}
