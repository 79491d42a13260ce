//! Follows the tenant store: when anything in it changes (this replica, another one, the
//! `decide tenants` CLI), reloads the tenant directory and brings each tenant's served
//! plugins to the store's active versions.
//!
//! This is how a plugin uploaded through one replica answers on every other: the store
//! notifies the change (Postgres LISTEN/NOTIFY wakes [`Store::wait_for_change`] at once; the
//! embedded SQLite store is polled every `--plugin-poll-ms`), and each replica loads the new
//! version through the same checks and self-test as an upload to itself
//! ([`PluginRegistry::check_for_tenant`]: size cap, kind, contract version, precompile,
//! self-test, under the tenant's limits) before swapping it in. A version that fails them is
//! logged once and the one serving keeps serving. A rollback or removal reaches every
//! replica the same way.
//!
//! Each plugin's sync holds the tenant's plugin lock and re-reads that plugin's versions under
//! it, so a local upload racing the watcher is never undone by a stale read.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::plugins::{stored_component, PluginRegistry};
use crate::state::AppState;
use crate::tenancy::{Components, PluginVersion, Store};

/// Starts the thread that follows the store of `state`'s directory; it ends once the state
/// is dropped.
pub fn spawn(state: &Arc<AppState>) {
    let weak = Arc::downgrade(state);
    let poll = Duration::from_millis(state.config.plugin_poll_ms.max(10));
    let spawned = std::thread::Builder::new()
        .name("store-watch".into())
        .spawn(move || follow(weak, poll));
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the store watcher; changes made elsewhere reach this replica only through its directory's own checks");
    }
}

fn follow(weak: Weak<AppState>, poll: Duration) {
    let Some(store) = weak.upgrade().map(|state| state.directory.store().clone()) else {
        return;
    };
    let mut seen = store.generation().unwrap_or(0);
    let mut refused = HashSet::new();
    // The engine loads tenants' plugins itself; the first sync once it is ready catches
    // whatever changed while it loaded.
    let mut synced_engine = false;
    loop {
        let now = match store.wait_for_change(seen, poll) {
            Ok(now) => now,
            Err(error) => {
                tracing::warn!(%error, "cannot read the tenant store's generation; retrying");
                std::thread::sleep(poll);
                continue;
            }
        };
        let Some(state) = weak.upgrade() else {
            return;
        };
        let moved = now != seen;
        seen = now;
        if moved {
            if let Err(error) = state.directory.reload() {
                tracing::warn!(%error, "cannot reload the tenant store; serving the tenants loaded before");
            }
        }
        let Ok(engine) = state.engine() else {
            continue;
        };
        if moved || !synced_engine {
            synced_engine = true;
            sync_plugins(&state, engine.plugins(), &mut refused);
        }
    }
}

/// Brings every tenant's served plugins to the store's active versions; returns how many
/// plugins changed. `refused` remembers versions that failed their checks, so each is logged
/// once, not at every change.
pub fn sync_plugins(
    state: &AppState,
    registry: &PluginRegistry,
    refused: &mut HashSet<(String, String, u32)>,
) -> usize {
    let started = Instant::now();
    let store = state.directory.store();
    let active = match store.active_plugins() {
        Ok(active) => active,
        Err(error) => {
            tracing::warn!(%error, "cannot read tenants' plugins from the store; serving the ones loaded");
            return 0;
        }
    };
    let wanted: HashMap<(String, String), u32> = active
        .iter()
        .map(|r| ((r.tenant_id.clone(), r.name.clone()), r.version))
        .collect();
    let served: HashMap<(String, String), u32> = registry
        .tenant_plugin_versions()
        .into_iter()
        .map(|(tenant, name, version)| ((tenant, name), version))
        .collect();
    let mut differing: Vec<&(String, String)> = wanted
        .iter()
        .filter(|(key, version)| served.get(*key) != Some(version))
        .map(|(key, _)| key)
        .chain(served.keys().filter(|key| !wanted.contains_key(*key)))
        .collect();
    differing.sort();
    let mut changed = 0;
    for (tenant, name) in differing {
        if sync_one(state, registry, store.as_ref(), tenant, name, refused) {
            changed += 1;
        }
    }
    if changed > 0 {
        tracing::info!(
            changed,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "tenants' plugins brought up to the store"
        );
    }
    changed
}

/// Syncs one plugin under its tenant's lock, from a fresh read of its versions.
fn sync_one(
    state: &AppState,
    registry: &PluginRegistry,
    store: &dyn Store,
    tenant_id: &str,
    name: &str,
    refused: &mut HashSet<(String, String, u32)>,
) -> bool {
    let lock = registry.tenant_lock(tenant_id);
    let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
    let active: Option<PluginVersion> = match store.plugin_versions(tenant_id, name) {
        Ok(versions) => versions.into_iter().find(|v| v.active),
        Err(error) => {
            tracing::warn!(tenant = tenant_id, plugin = name, %error, "cannot read the plugin's versions; serving the one loaded");
            return false;
        }
    };
    let serving = registry.tenant_plugin_version(tenant_id, name);
    let Some(record) = active else {
        return serving.is_some() && registry.remove_for_tenant(tenant_id, name);
    };
    if serving == Some(record.version) {
        return false;
    }
    let key = (tenant_id.to_string(), name.to_string(), record.version);
    if refused.contains(&key) {
        return false;
    }
    // A tenant deleted meanwhile: the directory's removal listener drops its plugins.
    let Some(tenant) = state.directory.tenant(tenant_id) else {
        return false;
    };
    let Some(bytes) = stored_component(&Components(store), &record.stored()) else {
        refused.insert(key);
        return false;
    };
    let cap = crate::plugin_api::size_cap(state, &tenant);
    let (plugin, report) =
        registry.check_for_tenant(tenant_id, &tenant.limits.plugins(), name, &bytes, cap);
    match plugin {
        Some(plugin) => {
            registry.install_for_tenant(tenant_id, name, plugin, record.version);
            true
        }
        None => {
            tracing::error!(tenant = tenant_id, plugin = name, version = record.version, reasons = %report.reasons(), "a tenant plugin version from the store failed its checks; the one serving keeps serving");
            refused.insert(key);
            false
        }
    }
}
