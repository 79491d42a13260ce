//! The plugin registry: built-ins, the plugins directory, hot replacement.
//!
//! Plugins are keyed by name (the file name without `.wasm`). The built-ins are loaded first;
//! then every `*.wasm` of the plugins directory adds a plugin or replaces the one of that name.
//! A watcher thread polls the directory: a changed file (mtime and size, then content hash) is
//! validated, precompiled and self-tested, and only then swapped in by replacing an `Arc` under a
//! short write lock. A request that already took its `Arc` finishes on the old version. A file
//! that fails any step is logged and never replaces a working plugin; a removed file falls back
//! to the built-in of that name, if any.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Instant, SystemTime};

use serde::Serialize;

use super::builtin::BUILTIN_PLUGINS;
use super::plugin::Plugin;
use super::runtime::{sha256_hex, PluginRuntime, RuntimeConfig};
use super::{Calibration, PluginKind, QuestionType, Renderer};

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Embedded in the binary.
    Builtin,
    /// A file of the plugins directory.
    File(PathBuf),
}

impl Serialize for PluginSource {
    /// `"builtin"` or the file path.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            PluginSource::Builtin => serializer.serialize_str("builtin"),
            PluginSource::File(path) => serializer.serialize_str(&path.display().to_string()),
        }
    }
}

/// One line of `/v1/plugins`.
#[derive(Debug, Clone, Serialize)]
pub struct PluginSummary {
    /// The name requests use.
    pub name: String,
    /// `question-type`, `renderer` or `calibration`.
    pub kind: PluginKind,
    /// The plugin's own version.
    pub version: String,
    /// The plugin's one-line description.
    pub description: String,
    /// `builtin` or the file path.
    pub source: PluginSource,
    /// Hex SHA-256 of the component bytes.
    pub sha256: String,
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

    /// The question type `name` as `scope` (a tenant id) sees it: the tenant's own plugin,
    /// else the operator's, else the built-in.
    pub fn question_type_in(&self, scope: Option<&str>, name: &str) -> Option<Arc<QuestionType>> {
        let _ = scope;
        self.question_type(name)
    }

    /// The renderer `name` as `scope` sees it (see [`Self::question_type_in`]).
    pub fn renderer_in(&self, scope: Option<&str>, name: &str) -> Option<Arc<Renderer>> {
        let _ = scope;
        self.renderer(name)
    }

    /// The calibration policy `name` as `scope` sees it (see [`Self::question_type_in`]).
    pub fn calibration_in(&self, scope: Option<&str>, name: &str) -> Option<Arc<Calibration>> {
        let _ = scope;
        self.calibration(name)
    }

    /// Every loaded plugin, by name.
    pub fn list(&self) -> Vec<PluginSummary> {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<PluginSummary> = current
            .iter()
            .map(|(name, e)| {
                let meta = e.plugin.meta();
                PluginSummary {
                    name: name.clone(),
                    kind: e.plugin.kind(),
                    version: meta.info.version.clone(),
                    description: meta.info.description.clone(),
                    source: e.source.clone(),
                    sha256: meta.sha256.clone(),
                }
            })
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
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
        let (plugin, stats) =
            Plugin::load(&self.runtime, name, bytes).map_err(|e| format!("{e:#}"))?;
        if let Some(existing) = self.get(name) {
            if existing.kind() != plugin.kind() {
                return Err(format!(
                    "it is a {} plugin but `{name}` is a {} plugin; a replacement must be of the same kind",
                    plugin.kind(),
                    existing.kind()
                ));
            }
        }
        plugin
            .self_test()
            .map_err(|e| format!("self-test failed: {e}"))?;
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
