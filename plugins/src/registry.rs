//! The plugin registry: built-ins, the plugins directory, tenants' own plugins, hot
//! replacement.
//!
//! Plugins are keyed by name (the file name without `.wasm`). The built-ins are loaded first;
//! then every `*.wasm` of the plugins directory adds a plugin or replaces the one of that name.
//! A watcher thread polls the directory: a changed file (mtime and size, then content hash) is
//! validated, precompiled and self-tested, and only then swapped in by replacing an `Arc` under a
//! short write lock. A request that already took its `Arc` finishes on the old version. A file
//! that fails any step is logged and never replaces a working plugin; a removed file falls back
//! to the built-in of that name, if any.
//!
//! Above that shared map each tenant has a layer of its own plugins ([`super::tenants`]):
//! a request resolves a name in its tenant's layer first, then in the operator's and
//! built-in map. Tenants' plugins pass the same checks ([`super::check`]) and are swapped in
//! the same way; they are stored durably by the caller (the upload handler) before the swap,
//! and reloaded from the store at startup ([`PluginRegistry::load_tenant_plugins`]).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::builtin::BUILTIN_PLUGINS;
use super::check::{check_component, CheckOptions, CheckReport};
use super::plugin::Plugin;
use super::runtime::{sha256_hex, PluginRuntime, RuntimeConfig};
use super::tenants::{
    tenant_call_limits, LimitsLookup, TenantEntry, TenantLayers, TenantPluginLimits,
};
use super::{Calibration, PluginKind, QuestionType, Renderer};

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Embedded in the binary.
    Builtin,
    /// A file of the plugins directory: the operator's.
    File(PathBuf),
    /// Uploaded by the tenant asking, with the store's version number.
    Tenant { version: u32 },
}

impl Serialize for PluginSource {
    /// `"builtin"`, `"operator"` or `"tenant"` (the file and the version are fields of their own).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(match self {
            PluginSource::Builtin => "builtin",
            PluginSource::File(_) => "operator",
            PluginSource::Tenant { .. } => "tenant",
        })
    }
}

/// Where a plugin came from, as `/v1/plugins` names it (the OpenAPI schema of
/// [`PluginSource`], which serializes as one of these).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PluginSourceName {
    Builtin,
    Operator,
    Tenant,
}

/// A tenant's stored plugin version, as the registry reads it from the tenant store (which
/// keeps the whole record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPlugin {
    pub tenant_id: String,
    /// The name requests use.
    pub name: String,
    /// 1, 2, ... per (tenant, name).
    pub version: u32,
    /// Hex SHA-256 of the component: the blob's name.
    pub sha256: String,
}

/// The tenant store as the registry reads it: every tenant's active plugin versions and the
/// components they name. The tenant store implements it; the registry knows nothing else of
/// it.
pub trait ComponentStore {
    /// Every tenant's active plugin versions.
    fn active_plugins(&self) -> Result<Vec<StoredPlugin>, String>;
    /// A component's bytes by its hex SHA-256 (`None`: no such blob).
    fn component(&self, sha256: &str) -> Result<Option<Vec<u8>>, String>;
}

/// One line of `/v1/plugins`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PluginSummary {
    /// The name requests use.
    pub name: String,
    /// `question-type`, `renderer` or `calibration`.
    pub kind: PluginKind,
    /// The plugin's own version.
    pub version: String,
    /// The plugin's one-line description.
    pub description: String,
    /// `builtin`, `operator` (a file of the plugins directory) or `tenant` (the caller's own).
    #[schema(value_type = PluginSourceName)]
    pub source: PluginSource,
    /// Hex SHA-256 of the component bytes.
    pub sha256: String,
    /// The operator's file, for source `operator`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The store's version number, for source `tenant` (see `/v1/plugins/{name}/versions`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload_version: Option<u32>,
}

impl PluginSummary {
    fn of(name: &str, plugin: &Plugin, source: PluginSource) -> PluginSummary {
        let meta = plugin.meta();
        PluginSummary {
            name: name.to_string(),
            kind: plugin.kind(),
            version: meta.info.version.clone(),
            description: meta.info.description.clone(),
            file: match &source {
                PluginSource::File(path) => Some(path.display().to_string()),
                _ => None,
            },
            upload_version: match &source {
                PluginSource::Tenant { version } => Some(*version),
                _ => None,
            },
            source,
            sha256: meta.sha256.clone(),
        }
    }
}

/// What one [`PluginRegistry::poll_once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A file was installed under `name`.
    Installed { name: String, path: PathBuf },
    /// A file was refused; the plugin of that name (if any) is unchanged.
    Rejected {
        name: String,
        path: PathBuf,
        reason: String,
    },
    /// A file disappeared; `fallback` says whether the built-in of that name is back.
    Removed {
        name: String,
        path: PathBuf,
        fallback: bool,
    },
}

#[derive(Clone)]
struct Entry {
    plugin: Plugin,
    source: PluginSource,
}

/// What the watcher remembers about a file.
struct FileRecord {
    modified: Option<SystemTime>,
    len: u64,
    sha256: String,
}

/// Plugins by name, hot-replaceable.
pub struct PluginRegistry {
    runtime: Arc<PluginRuntime>,
    builtins: HashMap<String, Entry>,
    current: RwLock<HashMap<String, Entry>>,
    files: Mutex<HashMap<PathBuf, FileRecord>>,
    /// Whether an unreadable plugins directory was already reported (log once, not every poll).
    dir_error_logged: AtomicBool,
    /// Each tenant's own plugins.
    tenants: TenantLayers,
}

/// Largest plugin file read from the plugins directory.
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;

impl std::fmt::Debug for PluginRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRegistry")
            .field("plugins", &self.list())
            .finish_non_exhaustive()
    }
}

impl PluginRegistry {
    /// Builds the runtime, loads the built-ins and the plugins directory, and starts the
    /// watcher thread (when there is a directory). The watcher stops when the registry is dropped.
    pub fn start(config: RuntimeConfig) -> anyhow::Result<Arc<PluginRegistry>> {
        let runtime = PluginRuntime::new(config)?;
        let registry = PluginRegistry::with_builtins(runtime)?;
        if registry.runtime.config().plugins_dir.is_some() {
            registry.poll_once();
            registry.spawn_watcher();
        }
        Ok(registry)
    }

    /// A registry with the built-ins only: no directory scan, no watcher (call
    /// [`poll_once`](Self::poll_once) to scan). Fails if a built-in does not load or fails its
    /// self-test, which is a build defect.
    pub fn with_builtins(runtime: Arc<PluginRuntime>) -> anyhow::Result<Arc<PluginRegistry>> {
        let started = Instant::now();
        let mut builtins = HashMap::new();
        for (name, kind, bytes) in BUILTIN_PLUGINS {
            let (plugin, stats) = Plugin::load(&runtime, name, bytes)
                .map_err(|e| anyhow::anyhow!("built-in plugin {name}: {e:#}"))?;
            anyhow::ensure!(
                plugin.kind() == *kind,
                "built-in plugin {name} is a {}, expected a {kind}",
                plugin.kind()
            );
            plugin
                .self_test()
                .map_err(|e| anyhow::anyhow!("built-in plugin {name} failed its self-test: {e}"))?;
            tracing::debug!(plugin = name, cache = ?stats.cache, ms = stats.total.as_secs_f64() * 1e3, "loaded built-in plugin");
            builtins.insert(
                name.to_string(),
                Entry {
                    plugin,
                    source: PluginSource::Builtin,
                },
            );
        }
        tracing::info!(
            count = builtins.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "built-in plugins loaded"
        );
        Ok(Arc::new(PluginRegistry {
            runtime,
            current: RwLock::new(builtins.clone()),
            builtins,
            files: Mutex::new(HashMap::new()),
            dir_error_logged: AtomicBool::new(false),
            tenants: TenantLayers::default(),
        }))
    }

    /// The runtime (engine, limits, cache) shared by every plugin.
    pub fn runtime(&self) -> &Arc<PluginRuntime> {
        &self.runtime
    }

    fn get(&self, name: &str) -> Option<Plugin> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|e| e.plugin.clone())
    }

    /// The question type `name`, if loaded. Keep the `Arc` for the whole request.
    pub fn question_type(&self, name: &str) -> Option<Arc<QuestionType>> {
        match self.get(name)? {
            Plugin::QuestionType(p) => Some(p),
            _ => None,
        }
    }

    /// The renderer `name`, if loaded.
    pub fn renderer(&self, name: &str) -> Option<Arc<Renderer>> {
        match self.get(name)? {
            Plugin::Renderer(p) => Some(p),
            _ => None,
        }
    }

    /// The calibration policy `name`, if loaded.
    pub fn calibration(&self, name: &str) -> Option<Arc<Calibration>> {
        match self.get(name)? {
            Plugin::Calibration(p) => Some(p),
            _ => None,
        }
    }

    /// The plugin `name` as `scope` (a tenant id) sees it: the tenant's own, else the
    /// operator's, else the built-in.
    fn resolve(&self, scope: Option<&str>, name: &str) -> Option<Plugin> {
        if let Some(tenant) = scope {
            if let Some(plugin) = self.tenants.get(self.runtime.config(), tenant, name) {
                return Some(plugin);
            }
        }
        self.get(name)
    }

    /// The question type `name` as `scope` (a tenant id) sees it: the tenant's own plugin,
    /// else the operator's, else the built-in. Keep the `Arc` for the whole request.
    pub fn question_type_in(&self, scope: Option<&str>, name: &str) -> Option<Arc<QuestionType>> {
        match self.resolve(scope, name)? {
            Plugin::QuestionType(p) => Some(p),
            _ => None,
        }
    }

    /// [`Self::question_type_in`] pinned for a request: the first lookup of `name` in
    /// `session` resolves it, later ones get the same version, so a request whose questions
    /// share a type runs them all on one version even across a hot swap.
    pub fn question_type_for(
        &self,
        session: &super::Session,
        scope: Option<&str>,
        name: &str,
    ) -> Option<Arc<QuestionType>> {
        session.pin_question_type(name, || self.question_type_in(scope, name))
    }

    /// The renderer `name` as `scope` sees it (see [`Self::question_type_in`]).
    pub fn renderer_in(&self, scope: Option<&str>, name: &str) -> Option<Arc<Renderer>> {
        match self.resolve(scope, name)? {
            Plugin::Renderer(p) => Some(p),
            _ => None,
        }
    }

    /// The calibration policy `name` as `scope` sees it (see [`Self::question_type_in`]).
    pub fn calibration_in(&self, scope: Option<&str>, name: &str) -> Option<Arc<Calibration>> {
        match self.resolve(scope, name)? {
            Plugin::Calibration(p) => Some(p),
            _ => None,
        }
    }

    /// Every loaded plugin of the operator and the built-ins, by name.
    pub fn list(&self) -> Vec<PluginSummary> {
        self.list_for(None)
    }

    /// What `scope` (a tenant id) sees, by name: built-ins, the operator's and the tenant's
    /// own, each with its source; a name the tenant uploaded shows its own plugin. Never
    /// another tenant's plugins.
    pub fn list_for(&self, scope: Option<&str>) -> Vec<PluginSummary> {
        let mut by_name: HashMap<String, PluginSummary> = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, e)| {
                (
                    name.clone(),
                    PluginSummary::of(name, &e.plugin, e.source.clone()),
                )
            })
            .collect();
        if let Some(tenant) = scope {
            for (name, entry) in self.tenants.entries(tenant) {
                let source = PluginSource::Tenant {
                    version: entry.version,
                };
                let summary = PluginSummary::of(&name, &entry.plugin, source);
                by_name.insert(name, summary);
            }
        }
        let mut list: Vec<PluginSummary> = by_name.into_values().collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// Where current tenant limits are read from, so that a change of a tenant's
    /// `plugin_memory_mib` or `plugin_timeout_ms` reaches its loaded plugins' next calls.
    pub fn set_tenant_limits_lookup(&self, lookup: LimitsLookup) {
        self.tenants.set_lookup(lookup);
    }

    /// Names of the tenant's own plugins.
    pub fn tenant_plugin_names(&self, tenant: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .tenants
            .entries(tenant)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort();
        names
    }

    /// Every tenant's served plugins: (tenant, name, store version), in no order.
    pub fn tenant_plugin_versions(&self) -> Vec<(String, String, u32)> {
        self.tenants.all_versions()
    }

    /// The store version of the tenant's plugin `name` being served, if any.
    pub fn tenant_plugin_version(&self, tenant: &str, name: &str) -> Option<u32> {
        self.tenants
            .entries(tenant)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, entry)| entry.version)
    }

    /// The lock a change to `tenant`'s plugins (upload, rollback, removal) holds from its
    /// checks through the store writes to the swap.
    pub fn tenant_lock(&self, tenant: &str) -> Arc<Mutex<()>> {
        self.tenants.upload_lock(tenant)
    }

    /// Runs the checks of [`check_component`] on `bytes` as the tenant's plugin `name`:
    /// within `max_bytes` (and what sets it), the kind of what it would replace for this
    /// tenant (its own, the operator's or the built-in of that name) kept, the self-test run
    /// under the tenant's limits. Returns the plugin, ready for
    /// [`install_for_tenant`](Self::install_for_tenant), when every check passed.
    pub fn check_for_tenant(
        &self,
        tenant: &str,
        limits: &TenantPluginLimits,
        name: &str,
        bytes: &[u8],
        max_bytes: (u64, String),
    ) -> (Option<Plugin>, CheckReport) {
        let call_limits = tenant_call_limits(self.runtime.config(), limits);
        let options = CheckOptions {
            max_bytes: Some(max_bytes),
            replaces: self.resolve(Some(tenant), name).map(|p| p.kind()),
            limits: Some(self.tenants.limits_cell(tenant, call_limits)),
        };
        let (loaded, report) = check_component(&self.runtime, name, bytes, &options);
        (loaded.map(|(plugin, _)| plugin), report)
    }

    /// Swaps `plugin` (from [`check_for_tenant`](Self::check_for_tenant)) in as the tenant's
    /// `name`, store version `version`. Requests that took the previous one finish on it.
    pub fn install_for_tenant(&self, tenant: &str, name: &str, plugin: Plugin, version: u32) {
        let limits = crate::runtime::CallLimits::server(self.runtime.config());
        let sha256 = plugin.sha256().to_string();
        let replaced = self
            .tenants
            .install(tenant, name, TenantEntry { plugin, version }, limits);
        tracing::info!(
            tenant,
            plugin = name,
            version,
            sha256 = %sha256,
            replaced = replaced.map(|e| e.version),
            "tenant plugin installed"
        );
    }

    /// Drops the tenant's plugin `name`: the operator's or built-in of that name serves it
    /// again. False when the tenant had no such plugin.
    pub fn remove_for_tenant(&self, tenant: &str, name: &str) -> bool {
        let removed = self.tenants.remove(tenant, name);
        if removed {
            tracing::info!(tenant, plugin = name, "tenant plugin removed");
        }
        removed
    }

    /// Drops every plugin of a deleted tenant; returns how many it had.
    pub fn remove_tenant(&self, tenant: &str) -> usize {
        self.tenants.remove_tenant(tenant)
    }

    /// Loads every tenant's active plugin versions from `store` (after the built-ins and the
    /// plugins directory). `limits_of` gives a tenant's limits, `None` for a tenant that no
    /// longer exists (its plugins are skipped). A version whose blob is missing, corrupt or
    /// fails its checks is logged and skipped: it never blocks startup. Returns (loaded,
    /// skipped).
    pub fn load_tenant_plugins(
        &self,
        store: &dyn ComponentStore,
        limits_of: &dyn Fn(&str) -> Option<TenantPluginLimits>,
    ) -> (usize, usize) {
        let started = Instant::now();
        let active = match store.active_plugins() {
            Ok(active) => active,
            Err(error) => {
                tracing::error!(%error, "cannot read tenants' plugins from the store; none are served");
                return (0, 0);
            }
        };
        let (mut loaded, mut skipped) = (0, 0);
        for record in active {
            let (tenant, name) = (record.tenant_id.as_str(), record.name.as_str());
            let Some(limits) = limits_of(tenant) else {
                skipped += 1;
                continue;
            };
            let Some(bytes) = stored_component(store, &record) else {
                skipped += 1;
                continue;
            };
            let call_limits = tenant_call_limits(self.runtime.config(), &limits);
            let options = CheckOptions {
                max_bytes: None,
                replaces: None,
                limits: Some(self.tenants.limits_cell(tenant, call_limits)),
            };
            match check_component(&self.runtime, name, &bytes, &options) {
                (Some((plugin, _)), _) => {
                    self.tenants.install(
                        tenant,
                        name,
                        TenantEntry {
                            plugin,
                            version: record.version,
                        },
                        crate::runtime::CallLimits::server(self.runtime.config()),
                    );
                    loaded += 1;
                }
                (None, report) => {
                    tracing::error!(tenant, plugin = name, version = record.version, reasons = %report.reasons(), "a tenant plugin failed its checks; skipped");
                    skipped += 1;
                }
            }
        }
        tracing::info!(
            loaded,
            skipped,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "tenants' plugins loaded"
        );
        (loaded, skipped)
    }

    /// Starts the thread that calls [`poll_once`](Self::poll_once) every `poll_interval`; it
    /// holds only a weak reference and ends once the registry is dropped.
    pub fn spawn_watcher(self: &Arc<Self>) {
        let weak: Weak<PluginRegistry> = Arc::downgrade(self);
        let interval = self.runtime.config().poll_interval;
        let spawned = std::thread::Builder::new()
            .name("plugin-watcher".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                match weak.upgrade() {
                    Some(registry) => {
                        registry.poll_once();
                    }
                    None => break,
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the plugin watcher; plugin files will not be reloaded");
        }
    }

    /// Scans the plugins directory once: installs new and changed `*.wasm` files that pass
    /// validation and the self-test, and falls back to the built-in for removed ones.
    pub fn poll_once(&self) -> Vec<Change> {
        let Some(dir) = self.runtime.config().plugins_dir.clone() else {
            return Vec::new();
        };
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut changes = Vec::new();
        let mut seen = HashSet::new();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => {
                if self.dir_error_logged.swap(false, Ordering::Relaxed) {
                    tracing::info!(dir = %dir.display(), "the plugins directory is readable again");
                }
                Some(entries)
            }
            Err(e) => {
                if !self.dir_error_logged.swap(true, Ordering::Relaxed) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot read the plugins directory (setting --plugins); will keep trying");
                }
                // A directory that is gone has no files: its plugins fall back below. Any other
                // error (permissions, I/O) changes nothing.
                if e.kind() != std::io::ErrorKind::NotFound {
                    return changes;
                }
                None
            }
        };
        for entry in entries.into_iter().flatten().flatten() {
            let path = entry.path();
            let Some(name) = plugin_name(&path) else {
                continue;
            };
            // Follows symlinks: a deployment may link plugin files.
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            seen.insert(path.clone());
            let (modified, len) = (meta.modified().ok(), meta.len());
            if let Some(rec) = files.get(&path) {
                if rec.modified == modified && rec.len == len {
                    continue;
                }
            }
            if len > MAX_COMPONENT_BYTES {
                let reason = format!("the file is {len} bytes, over the limit of {MAX_COMPONENT_BYTES} bytes for a plugin");
                tracing::warn!(file = %path.display(), plugin = %name, %reason, "plugin file refused; the current plugin stays");
                files.insert(
                    path.clone(),
                    FileRecord {
                        modified,
                        len,
                        sha256: String::new(),
                    },
                );
                changes.push(Change::Rejected { name, path, reason });
                continue;
            }
            let bytes = match fs::read(&path) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "cannot read plugin file; will retry");
                    continue;
                }
            };
            let sha256 = sha256_hex(&bytes);
            if let Some(rec) = files.get_mut(&path) {
                if rec.sha256 == sha256 {
                    rec.modified = modified;
                    rec.len = len;
                    continue;
                }
            }
            files.insert(
                path.clone(),
                FileRecord {
                    modified,
                    len,
                    sha256,
                },
            );
            match self.install(&name, &bytes, &path) {
                Ok(()) => changes.push(Change::Installed { name, path }),
                Err(reason) => {
                    tracing::warn!(file = %path.display(), plugin = %name, %reason, "plugin file refused; the current plugin stays");
                    changes.push(Change::Rejected { name, path, reason });
                }
            }
        }
        let gone: Vec<PathBuf> = files
            .keys()
            .filter(|p| !seen.contains(*p))
            .cloned()
            .collect();
        for path in gone {
            files.remove(&path);
            let Some(name) = plugin_name(&path) else {
                continue;
            };
            let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
            let serving_this_file = matches!(current.get(&name), Some(Entry { source: PluginSource::File(p), .. }) if *p == path);
            if !serving_this_file {
                continue;
            }
            let fallback = match self.builtins.get(&name) {
                Some(builtin) => {
                    current.insert(name.clone(), builtin.clone());
                    true
                }
                None => {
                    current.remove(&name);
                    false
                }
            };
            drop(current);
            tracing::info!(file = %path.display(), plugin = %name, fallback_to_builtin = fallback, "plugin file removed");
            changes.push(Change::Removed {
                name,
                path,
                fallback,
            });
        }
        changes
    }

    /// Validate, precompile, self-test, then swap in. Errors say why the file was refused.
    fn install(&self, name: &str, bytes: &[u8], path: &Path) -> Result<(), String> {
        let options = CheckOptions {
            replaces: self.get(name).map(|p| p.kind()),
            ..CheckOptions::default()
        };
        let (plugin, stats) = match check_component(&self.runtime, name, bytes, &options) {
            (Some(loaded), _) => loaded,
            (None, report) => return Err(report.reasons()),
        };
        let entry = Entry {
            plugin,
            source: PluginSource::File(path.to_path_buf()),
        };
        let replaced = self
            .current
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), entry);
        tracing::info!(
            file = %path.display(),
            plugin = name,
            replaced = replaced.is_some(),
            cache = ?stats.cache,
            load_ms = stats.total.as_secs_f64() * 1e3,
            "plugin installed"
        );
        Ok(())
    }
}

/// `NAME` for `<dir>/NAME.wasm`; other files (e.g. `NAME.wasm.tmp` while being written) are ignored.
/// The component a version record names, read from the store and checked against its
/// digest; `None` (logged, naming the tenant, plugin and version) when it is missing, corrupt
/// or cannot be read.
pub fn stored_component(store: &dyn ComponentStore, record: &StoredPlugin) -> Option<Vec<u8>> {
    let (tenant, name) = (record.tenant_id.as_str(), record.name.as_str());
    match store.component(&record.sha256) {
        Ok(Some(bytes)) if sha256_hex(&bytes) == record.sha256 => Some(bytes),
        Ok(Some(_)) => {
            tracing::error!(tenant, plugin = name, version = record.version, sha256 = %record.sha256, "a tenant plugin's blob does not match its digest; skipped");
            None
        }
        Ok(None) => {
            tracing::error!(tenant, plugin = name, version = record.version, sha256 = %record.sha256, "a tenant plugin's blob is missing; skipped");
            None
        }
        Err(error) => {
            tracing::error!(tenant, plugin = name, version = record.version, %error, "cannot read a tenant plugin's blob; skipped");
            None
        }
    }
}

fn plugin_name(path: &Path) -> Option<String> {
    if path.extension()? != "wasm" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    if stem.is_empty() || stem.starts_with('.') {
        return None;
    }
    Some(stem.to_string())
}
