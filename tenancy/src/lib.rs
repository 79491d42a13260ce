//! Tenancy: who is asking, and what they may do.
//!
//! A tenant is a team served by this server: an id, a name, API keys, limits, settings
//! (default renderer, calibration policy, fair-share weight) and its own plugins and
//! calibration. This crate owns that state and the questions the server asks of it:
//!
//! - [`store`]: the [`Store`] trait that keeps what must survive a restart (tenants, key
//!   hashes, plugin versions and their blobs, tenant calibrations), and [`sqlite`], the
//!   embedded default (SQLite plus content-addressed blob files in `--data-dir`). A shared
//!   store for several replicas is [`postgres`] (`--store postgres://...`), which also
//!   notifies every replica of each change.
//! - [`keys`]: API keys (long random tokens with the recognisable prefix `dk_`); only their
//!   SHA-256 is stored, and a presented key is compared with it in constant time.
//! - [`limits`]: per-tenant rates (token buckets), concurrent and queued requests, with the
//!   server-wide defaults of the `--tenant-*` flags; [`shared_rates`]: the request and
//!   decision rates kept in a shared store, so they hold across replicas.
//! - [`usage`]: per-tenant counters for the admin API and `/metrics`.
//! - [`directory`]: the in-memory view of the store that requests consult (key hash ->
//!   tenant), reloaded when the store changes, also when another process (the `decide
//!   tenants` CLI) wrote it.
//!
//! What it refuses it says with a [`Refused`] (no HTTP status: the server maps it to one).
//! Arrows point one way: the server consults tenancy and hands the engine only opaque values
//! (a cache salt, a fair-share flow, a plugin scope); tenancy knows nothing of the engine,
//! the wire formats or the model. It depends on `decide-plugins` only to keep plugin
//! versions and serve their blobs to the plugin registry ([`Components`]).

pub mod directory;
pub mod error;
pub mod keys;
pub mod limits;
pub mod postgres;
pub mod shared_rates;
pub mod sqlite;
pub mod store;
#[cfg(test)]
mod store_contract;
pub mod usage;

pub use directory::{Caller, Directory};
pub use error::Refused;
pub use store::{
    Components, KeyRecord, PluginVersion, Store, StoreError, Tenant, TenantLimits, TenantSettings,
};

/// Opens the store: Postgres when `url` is set (`--store`), else the embedded one in
/// `data_dir`. The error names the setting to change.
pub fn open_store(
    url: Option<&str>,
    data_dir: &std::path::Path,
) -> Result<std::sync::Arc<dyn Store>, String> {
    match url {
        Some(url) => postgres::PostgresStore::open(url)
            .map(|store| std::sync::Arc::new(store) as std::sync::Arc<dyn Store>)
            .map_err(|e| format!("cannot open the tenant store (setting --store): {e}")),
        None => sqlite::SqliteStore::open(data_dir)
            .map(|store| std::sync::Arc::new(store) as std::sync::Arc<dyn Store>)
            .map_err(|e| {
                format!(
                    "cannot open the tenant store in {} (setting --data-dir): {e}",
                    data_dir.display()
                )
            }),
    }
}

/// Seconds since the Unix epoch.
pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
