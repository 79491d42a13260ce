//! Each tenant's own plugins: one layer per tenant above the operator's and the built-ins.
//!
//! A layer maps names to the tenant's active version of each of its plugins, and holds the
//! limits its plugins' calls run under ([`SharedLimits`], one cell per tenant, so a change of
//! the tenant's limits reaches plugins already loaded). Layers are only ever read through the
//! tenant's own id, so no lookup can reach another tenant's plugin. Swapping a version
//! replaces an `Arc` under a short write lock; requests that took the old one finish on it.
//! What is durable (blobs and version records) lives in the tenant store; this is the
//! in-memory view of its active versions, rebuilt from the store at startup.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use super::plugin::Plugin;
use super::runtime::{CallLimits, RuntimeConfig, SharedLimits};

/// A tenant's own bounds on its plugins' calls: its limits `plugin_memory_mib` and
/// `plugin_timeout_ms` as the tenant directory holds them (unset: the server's). The tenant
/// store owns the rest of a tenant's limits; this is all of them a plugin call needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantPluginLimits {
    /// The tenant's memory cap per plugin call, MiB.
    pub plugin_memory_mib: Option<u64>,
    /// The tenant's deadline per plugin call, ms.
    pub plugin_timeout_ms: Option<u64>,
}

/// Reads a tenant's current limits (from the tenant directory), `None` for an unknown tenant.
pub type LimitsLookup = Arc<dyn Fn(&str) -> Option<TenantPluginLimits> + Send + Sync>;

/// One of a tenant's plugins as served.
#[derive(Clone)]
pub(super) struct TenantEntry {
    pub plugin: Plugin,
    /// The store's version number (1, 2, ... per tenant and name).
    pub version: u32,
}

struct Layer {
    plugins: HashMap<String, TenantEntry>,
    limits: Arc<SharedLimits>,
}

/// Every tenant's layer.
#[derive(Default)]
pub(super) struct TenantLayers {
    layers: RwLock<HashMap<String, Layer>>,
    lookup: RwLock<Option<LimitsLookup>>,
    /// One lock per tenant, held across an upload's check, store writes and swap, so that
    /// concurrent uploads of one tenant land in the registry in the order the store numbered
    /// them. Other tenants' uploads do not wait.
    upload_locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

/// The limits a tenant's plugin calls run under: the tenant's own where set, never above the
/// server's (`--plugin-memory-mib`, `--plugin-timeout-ms`), each naming what sets it.
pub fn tenant_call_limits(server: &RuntimeConfig, tenant: &TenantPluginLimits) -> CallLimits {
    let mut limits = CallLimits::server(server);
    if let Some(mib) = tenant.plugin_memory_mib {
        let bytes = (mib as usize).saturating_mul(1 << 20);
        if bytes < limits.memory_limit_bytes {
            limits.memory_limit_bytes = bytes;
            limits.memory_setting = "the tenant's limit plugin_memory_mib".into();
        }
    }
    if let Some(ms) = tenant.plugin_timeout_ms {
        let timeout = std::time::Duration::from_millis(ms);
        if timeout < limits.call_timeout {
            limits.call_timeout = timeout;
            limits.timeout_setting = "the tenant's limit plugin_timeout_ms".into();
        }
    }
    limits
}

impl TenantLayers {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Layer>> {
        self.layers.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Layer>> {
        self.layers.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets where current tenant limits are read from on lookups.
    pub fn set_lookup(&self, lookup: LimitsLookup) {
        *self.lookup.write().unwrap_or_else(|p| p.into_inner()) = Some(lookup);
    }

    /// The tenant's plugin `name`, with its limits brought up to the tenant's current ones.
    pub fn get(&self, server: &RuntimeConfig, tenant: &str, name: &str) -> Option<Plugin> {
        let (plugin, cell) = {
            let layers = self.read();
            let layer = layers.get(tenant)?;
            let entry = layer.plugins.get(name)?;
            (entry.plugin.clone(), layer.limits.clone())
        };
        let lookup = self
            .lookup
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(limits) = lookup.and_then(|lookup| lookup(tenant)) {
            cell.set(tenant_call_limits(server, &limits));
        }
        Some(plugin)
    }

    /// The tenant's entries, by name.
    pub fn entries(&self, tenant: &str) -> Vec<(String, TenantEntry)> {
        self.read()
            .get(tenant)
            .map(|layer| {
                layer
                    .plugins
                    .iter()
                    .map(|(name, entry)| (name.clone(), entry.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every tenant's served plugins: (tenant, name, store version).
    pub fn all_versions(&self) -> Vec<(String, String, u32)> {
        self.read()
            .iter()
            .flat_map(|(tenant, layer)| {
                layer
                    .plugins
                    .iter()
                    .map(|(name, entry)| (tenant.clone(), name.clone(), entry.version))
            })
            .collect()
    }

    /// The limits cell of `tenant` (made when it has none), set to `limits`.
    pub fn limits_cell(&self, tenant: &str, limits: CallLimits) -> Arc<SharedLimits> {
        if let Some(layer) = self.read().get(tenant) {
            layer.limits.set(limits);
            return layer.limits.clone();
        }
        self.write()
            .entry(tenant.to_string())
            .or_insert_with(|| Layer {
                plugins: HashMap::new(),
                limits: SharedLimits::new(limits.clone()),
            })
            .limits
            .clone()
    }

    /// Swaps in `entry` as the tenant's plugin `name`; returns the one it replaced.
    pub fn install(
        &self,
        tenant: &str,
        name: &str,
        entry: TenantEntry,
        limits: CallLimits,
    ) -> Option<TenantEntry> {
        let mut layers = self.write();
        let layer = layers.entry(tenant.to_string()).or_insert_with(|| Layer {
            plugins: HashMap::new(),
            limits: SharedLimits::new(limits),
        });
        layer.plugins.insert(name.to_string(), entry)
    }

    /// Drops the tenant's plugin `name`; false when it had none.
    pub fn remove(&self, tenant: &str, name: &str) -> bool {
        self.write()
            .get_mut(tenant)
            .is_some_and(|layer| layer.plugins.remove(name).is_some())
    }

    /// Drops every plugin of the tenant; returns how many it had.
    pub fn remove_tenant(&self, tenant: &str) -> usize {
        self.upload_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant);
        self.write()
            .remove(tenant)
            .map(|layer| layer.plugins.len())
            .unwrap_or(0)
    }

    /// The lock an upload (or rollback, or removal) of `tenant` holds while it runs.
    pub fn upload_lock(&self, tenant: &str) -> Arc<Mutex<()>> {
        self.upload_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tenant.to_string())
            .or_default()
            .clone()
    }
}
