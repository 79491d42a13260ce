//! The wasmtime side: one [`Engine`] with epoch interruption, a WASI linker with no
//! capabilities, an on-disk cache of precompiled components, the sandbox of an instance (a
//! [`Store`] with a memory cap, and a deadline per call), and the [`Session`] that keeps a
//! request's instances between its calls.

use std::any::Any;
use std::fs;
use std::hash::Hasher;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store,
    Trap,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{
    Deterministic, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView,
    WasiView,
};

use super::slots::{self, Slot};
use super::PluginCallError;

/// The memory cap and deadline of one plugin's calls, with what sets each (named in the
/// failure message, so whoever hits a limit learns which knob to turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLimits {
    /// Memory cap of one instance (all its linear memories together), in bytes.
    pub memory_limit_bytes: usize,
    /// Wall-clock deadline of one call (instantiation included).
    pub call_timeout: Duration,
    /// What sets the memory cap, e.g. `setting --plugin-memory-mib`.
    pub memory_setting: String,
    /// What sets the deadline, e.g. `setting --plugin-timeout-ms`.
    pub timeout_setting: String,
}

impl CallLimits {
    /// The server's own limits (`--plugin-memory-mib`, `--plugin-timeout-ms`).
    pub fn server(config: &RuntimeConfig) -> CallLimits {
        CallLimits {
            memory_limit_bytes: config.memory_limit_bytes,
            call_timeout: config.call_timeout,
            memory_setting: "setting --plugin-memory-mib".into(),
            timeout_setting: "setting --plugin-timeout-ms".into(),
        }
    }
}

/// Limits shared by a group of loaded plugins (a tenant's) and changeable while they serve:
/// when a tenant's limits change, its plugins' next calls run under the new ones without a
/// reload. A call reads them once, when it starts.
#[derive(Debug)]
pub struct SharedLimits(std::sync::RwLock<Arc<CallLimits>>);

impl SharedLimits {
    /// A cell holding `limits`.
    pub fn new(limits: CallLimits) -> Arc<SharedLimits> {
        Arc::new(SharedLimits(std::sync::RwLock::new(Arc::new(limits))))
    }

    /// The limits now.
    pub fn get(&self) -> Arc<CallLimits> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the limits when they differ (calls already running keep theirs).
    pub fn set(&self, limits: CallLimits) {
        if *self.get() != limits {
            *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(limits);
        }
    }
}

/// Settings of the plugin runtime; the server maps its flags onto this.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Memory cap of one plugin instance (all its linear memories together), in bytes.
    /// Flag `--plugin-memory-mib`.
    pub memory_limit_bytes: usize,
    /// Wall-clock deadline of one plugin call (instantiation included). Flag `--plugin-timeout-ms`.
    pub call_timeout: Duration,
    /// Where precompiled components are cached; `None` compiles at every load.
    pub cache_dir: Option<PathBuf>,
    /// Directory of extra plugins (`NAME.wasm`) that add to or replace the built-ins.
    pub plugins_dir: Option<PathBuf>,
    /// How often the plugins directory is checked for changes.
    pub poll_interval: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            memory_limit_bytes: 64 << 20,
            call_timeout: Duration::from_millis(1000),
            cache_dir: Some(default_cache_dir()),
            plugins_dir: None,
            poll_interval: Duration::from_millis(500),
        }
    }
}

/// `$XDG_CACHE_HOME/decide/wasm`, else `~/.cache/decide/wasm`, else under the temp dir.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("decide").join("wasm")
}

/// Caps on what crosses the plugin boundary, checked by the host.
pub mod limits {
    /// Largest question JSON, render state or other text handed to a plugin.
    pub const MAX_INPUT_BYTES: usize = 1 << 20;
    /// Most options a compiled question may have.
    pub const MAX_OPTIONS: usize = 1024;
    /// Largest option key/text/description, instructions, or plugin-info field.
    pub const MAX_STRING_BYTES: usize = 256 << 10;
    /// Largest answer JSON.
    pub const MAX_ANSWER_BYTES: usize = 1 << 20;
    /// Most chat messages a renderer may return.
    pub const MAX_MESSAGES: usize = 64;
    /// Largest total content of a renderer's messages (the state is in there).
    pub const MAX_MESSAGES_BYTES: usize = 4 << 20;
    /// Most calibration parameters.
    pub const MAX_PARAMS: usize = 1024;
    /// Most scores handed to a calibration `fit`, all samples together.
    pub const MAX_FIT_SCORES: usize = 1 << 21;
    /// Largest error message kept from a plugin.
    pub const MAX_ERROR_BYTES: usize = 4 << 10;
}

/// Epoch tick: the granularity of call deadlines.
const TICK: Duration = Duration::from_millis(10);
/// How much of a plugin's stderr is kept per call (for failure messages and debug logs).
const STDERR_CAPTURE: usize = 16 << 10;

/// Instance slots (memories, tables) allocated once and reused: a plugin call on a fresh
/// instance instantiates its component in a fresh store, and with wasmtime's on-demand allocator each call mapped
/// and unmapped its linear memory, costing more than the call itself for small plugins
/// (`compile`, `apply`, `answer`) and contending for the process's memory map when every core
/// renders prompts at once. A slot is reset between instances, so calls still share nothing;
/// the memory cap stays with [`MemoryCap`]. How many: [`slots`] (1000 component instances
/// alive at once, each holding a [`Slot`]; a call waits for a free one).
///
/// Resetting a slot: by default wasmtime gives a used slot's pages back with `madvise`, and the
/// next instance faults them in again; that, and the TLB shootdowns `madvise` sends to the
/// other cores, was half of a small call's time (openai-choice `compile`: 52 µs per call, 50%
/// of it in the kernel). Where Linux has the `PAGEMAP_SCAN` ioctl (6.7+), the slot's dirty
/// pages are found and written back to the component's initial memory image in place (up to
/// [`KEEP_RESIDENT`] bytes per memory or table, the rest still with `madvise`): the next
/// instance sees exactly the memory a fresh one sees, without page faults (the same call:
/// 25 µs). Without the ioctl, keeping pages resident would mean resetting all of those bytes
/// on every call, so the default stays.
fn instance_pool() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    slots::size(&mut pool);
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(wasmtime::Enabled::Yes);
        pool.linear_memory_keep_resident(KEEP_RESIDENT);
        pool.table_keep_resident(KEEP_RESIDENT);
    }
    pool
}

/// Bytes of a slot's memory (and of its table) reset in place rather than given back: more
/// than a built-in plugin dirties in a call over a long input (its stack, data and heap).
const KEEP_RESIDENT: usize = 4 << 20;

/// A wall clock and a monotonic clock that never move.
///
/// Plugins are pure functions of their input: none needs the time, and a frozen clock keeps
/// their output deterministic (the same question gives the same answer on every call and
/// replica) and gives them no timing side channel. Components built for `wasm32-wasip2` import
/// the clock interfaces through `std`, so they must be linked; these are what they see.
struct FrozenClock;

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Fixed bytes for the plugins' "random" sources: determinism (e.g. `HashMap` iteration order
/// inside a guest) matters more than unpredictability, since plugins hold no secrets.
const RANDOM_BYTES: [u8; 32] = *b"decide-plugins-are-deterministic";

/// A memory cap over all of an instance's linear memories together, which remembers it was
/// hit so the failure can be named precisely.
pub(crate) struct MemoryCap {
    limit: usize,
    /// Bytes of linear memory granted so far in this store.
    used: usize,
    hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.used.saturating_sub(current).saturating_add(desired);
        if total > self.limit {
            self.hit = true;
            // An error (rather than `Ok(false)`, which makes `memory.grow` return -1) traps at
            // once: most guests would abort on an allocation failure anyway, less clearly.
            return Err(wasmtime::format_err!(
                "memory cap of {} bytes reached",
                self.limit
            ));
        }
        self.used = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// What one call's [`Store`] holds.
pub(crate) struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    cap: MemoryCap,
    stderr: MemoryOutputPipe,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// How a component was obtained by [`PluginRuntime::component`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a precompiled artifact on disk.
    Hit,
    /// Compiled now (and written to the cache if there is one).
    Compiled,
}

/// The engine, linker and cache shared by every plugin.
pub struct PluginRuntime {
    engine: Engine,
    linker: Linker<PluginState>,
    config: RuntimeConfig,
    /// Hex digest of the engine's precompile-compatibility hash: part of cache file names.
    engine_key: String,
    ticker_stop: Arc<AtomicBool>,
    /// The server's limits, for plugins without limits of their own.
    server_limits: Arc<CallLimits>,
}

impl std::fmt::Debug for PluginRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRuntime")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A [`Hasher`] that feeds SHA-256, so that `precompile_compatibility_hash` (a `Hash` value) gives a
/// stable key across processes and Rust versions (std's `DefaultHasher` promises neither).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        unreachable!("only the digest is used")
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl PluginRuntime {
    /// Builds the engine (component model, epoch interruption), links WASI with no capabilities,
    /// and starts the epoch ticker (a thread that ends when the runtime is dropped).
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Arc<PluginRuntime>> {
        let mut wasm = Config::new();
        wasm.wasm_component_model(true);
        wasm.epoch_interruption(true);
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(instance_pool()));
        let engine =
            Engine::new(&wasm).map_err(|e| anyhow::anyhow!("creating the wasm engine: {e}"))?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| anyhow::anyhow!("linking WASI: {e}"))?;

        let mut hasher = Sha256Hasher(Sha256::new());
        std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (weak, stop) = (engine.weak(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            })
            .map_err(|e| anyhow::anyhow!("starting the epoch ticker thread: {e}"))?;

        if let Some(dir) = &config.cache_dir {
            if let Err(e) = create_private_dir(dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot create the plugin cache dir; compiling without a cache");
            }
        }
        Ok(Arc::new(PluginRuntime {
            engine,
            linker,
            server_limits: Arc::new(CallLimits::server(&config)),
            config,
            engine_key,
            ticker_stop,
        }))
    }

    /// The settings this runtime was built with.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(crate) fn linker(&self) -> &Linker<PluginState> {
        &self.linker
    }

    /// The cache file for a component with SHA-256 `sha256`.
    fn cache_path(&self, sha256: &str) -> Option<PathBuf> {
        self.config
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(format!("{sha256}-{}.cwasm", self.engine_key)))
    }

    /// A compiled component for `bytes` (whose SHA-256 is `sha256`): from the on-disk cache when
    /// present, else compiled and cached.
    pub fn component(
        &self,
        bytes: &[u8],
        sha256: &str,
    ) -> anyhow::Result<(Component, CacheOutcome)> {
        let path = self.cache_path(sha256);
        if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
            // SAFETY: `deserialize_file` trusts the file to be a compiled artifact of this engine
            // and maps it as executable code. The file is one we wrote ourselves
            // (`precompile_component` output, written to a temp file then renamed, so never seen
            // half-written) into a cache dir created private (0700) to this user; its name is the
            // SHA-256 of the exact wasm bytes being loaded plus a digest of the engine's
            // compatibility hash, so it is the compilation of these bytes by an engine with this
            // configuration. Wasmtime additionally checks the artifact's header against the
            // engine (version, target, tunables) and refuses a mismatch; a corrupt or
            // incompatible file falls through to a fresh compile below.
            match unsafe { Component::deserialize_file(&self.engine, path) } {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "unusable cached plugin artifact; recompiling");
                    let _ = fs::remove_file(path);
                }
            }
        }
        let artifact = self
            .engine
            .precompile_component(bytes)
            .map_err(|e| anyhow::anyhow!("not a valid WebAssembly component: {e:#}"))?;
        if let Some(path) = &path {
            if let Err(e) = write_atomically(path, &artifact) {
                tracing::warn!(file = %path.display(), error = %e, "cannot write the plugin cache");
            }
        }
        // SAFETY: `artifact` was produced just now by `precompile_component` of this very engine.
        let component = unsafe { Component::deserialize(&self.engine, &artifact) }
            .map_err(|e| anyhow::anyhow!("loading the compiled component: {e:#}"))?;
        Ok((component, CacheOutcome::Compiled))
    }

    /// The limits a call of `plugin` runs under: its own, else the server's.
    fn limits_of(&self, plugin: &PluginId) -> Arc<CallLimits> {
        match &plugin.limits {
            Some(limits) => limits.get(),
            None => self.server_limits.clone(),
        }
    }

    /// A fresh store for one call: no WASI capabilities, frozen clocks, fixed randomness, stderr
    /// captured, the memory cap and the call deadline of `limits` armed.
    pub(crate) fn new_store(&self, limits: &CallLimits) -> Store<PluginState> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .wall_clock(FrozenClock)
            .monotonic_clock(FrozenClock)
            .secure_random(Deterministic::new(RANDOM_BYTES.to_vec()))
            .insecure_random(Deterministic::new(RANDOM_BYTES.to_vec()))
            .insecure_random_seed(0)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let state = PluginState {
            wasi,
            table: ResourceTable::new(),
            cap: MemoryCap {
                limit: limits.memory_limit_bytes,
                used: 0,
                hit: false,
            },
            stderr,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.cap);
        store.set_epoch_deadline(deadline_ticks(limits.call_timeout));
        store.epoch_deadline_trap();
        store
    }

    /// Runs `f` on an instance of a plugin: one the `session` kept from an earlier call of
    /// the same plugin, else a fresh one made by `instantiate` in a fresh store (kept in the
    /// session afterwards). A trap, the deadline or the memory cap becomes
    /// [`PluginCallError::Failed`] with a message that names `plugin` and the cause.
    ///
    /// A call that fails on a kept instance is run again on a fresh one, and only that
    /// outcome counts: what a kept instance carries over from earlier calls (a grown heap,
    /// captured stderr, anything a plugin keeps between calls) can make a call fail, never
    /// change which calls fail. An instance that failed is dropped, never kept.
    pub(crate) fn call<T: Send + 'static, R>(
        &self,
        plugin: &PluginId,
        session: Option<&Session>,
        instantiate: impl Fn(&mut Store<PluginState>) -> wasmtime::Result<T>,
        f: impl Fn(&mut Store<PluginState>, &T) -> wasmtime::Result<R>,
    ) -> Result<R, PluginCallError> {
        let name = plugin.name.as_str();
        let limits = self.limits_of(plugin);
        let stop = session.and_then(|s| s.stop.clone());
        if stop.as_ref().is_some_and(|stop| stop()) {
            return Err(PluginCallError::Failed {
                plugin: name.to_string(),
                message: format!("plugin {name} was not called: {STOPPED}"),
            });
        }
        if let Some((mut store, instance, slot)) = session.and_then(|s| s.take::<T>(plugin.id)) {
            arm_deadline(&mut store, limits.call_timeout, stop.clone());
            let stderr_from = store.data().stderr.contents().len();
            match outside_async(|| f(&mut store, &instance)) {
                Ok(value) => {
                    log_stderr(name, &store.data().stderr.contents()[stderr_from..]);
                    if let Some(session) = session {
                        session.put(plugin.id, store, instance, slot);
                    }
                    return Ok(value);
                }
                Err(error) => {
                    tracing::debug!(plugin = name, error = %error, "call failed on a kept instance; running it again on a fresh one");
                    // The store first, then its slot, for the fresh instance below.
                    drop(store);
                    drop(slot);
                }
            }
        }
        let started = Instant::now();
        // Declared before the store, so dropped after it: the pool's slot is free by then.
        let Some(slot) = Slot::take(limits.call_timeout) else {
            return Err(PluginCallError::Failed {
                plugin: name.to_string(),
                message: format!(
                    "plugin {name} found no free instance slot within {} ms: all {} are in use by calls in flight ({})",
                    limits.call_timeout.as_millis(),
                    slots::COMPONENT_INSTANCES,
                    limits.timeout_setting
                ),
            });
        };
        let mut store = self.new_store(&limits);
        arm_deadline(&mut store, limits.call_timeout, stop);
        let result = outside_async(|| -> wasmtime::Result<(T, R)> {
            let instance = instantiate(&mut store)?;
            let value = f(&mut store, &instance)?;
            Ok((instance, value))
        });
        let state = store.data();
        let stderr = state.stderr.contents();
        match result {
            Ok((instance, value)) => {
                log_stderr(name, &stderr);
                if let Some(session) = session {
                    session.put(plugin.id, store, Box::new(instance), slot);
                }
                Ok(value)
            }
            Err(error) => {
                let cause = if state.cap.hit {
                    format!(
                        "exceeded its memory cap of {} ({})",
                        human_bytes(limits.memory_limit_bytes),
                        limits.memory_setting
                    )
                } else if error.downcast_ref::<Stopped>().is_some() {
                    format!("was interrupted: {STOPPED}")
                } else if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
                    format!(
                        "exceeded its {} ms deadline ({})",
                        limits.call_timeout.as_millis(),
                        limits.timeout_setting
                    )
                } else if let Some(trap) = error.downcast_ref::<Trap>() {
                    format!("trapped: {trap}")
                } else {
                    format!("failed: {error}")
                };
                let mut message = format!("plugin {name} {cause}");
                let stderr = String::from_utf8_lossy(&stderr);
                let stderr = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
                if !stderr.is_empty() {
                    message.push_str(" (stderr: ");
                    message.push_str(truncate(&stderr, 512));
                    message.push(')');
                }
                tracing::warn!(
                    plugin = name,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "{message}"
                );
                tracing::debug!(plugin = name, error = %format!("{error:?}"), "plugin failure with its wasm backtrace");
                Err(PluginCallError::Failed {
                    plugin: name.to_string(),
                    message,
                })
            }
        }
    }
}

/// Why a call in a stopped session ends (its request was cancelled).
const STOPPED: &str = "its request was cancelled (deadline passed, client gone or server stopping)";

/// The error an epoch callback ends a call of a stopped session with.
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(STOPPED)
    }
}

impl std::error::Error for Stopped {}

/// Arms a call's deadline on `store`: `timeout` from now, and, with a stop check, an
/// interruption at the first epoch tick after the check turns true. Without one, the plain
/// epoch deadline traps (no callback per tick); with one, a callback runs every tick (10 ms),
/// costing nothing measurable against a call that lasts that long.
fn arm_deadline(store: &mut Store<PluginState>, timeout: Duration, stop: Option<StopCheck>) {
    match stop {
        None => {
            store.set_epoch_deadline(deadline_ticks(timeout));
            store.epoch_deadline_trap();
        }
        Some(stop) => {
            let mut left = deadline_ticks(timeout);
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(move |_| {
                if stop() {
                    return Err(wasmtime::Error::new(Stopped));
                }
                left = left.saturating_sub(1);
                if left == 0 {
                    // The call's own deadline: the same trap as without a stop check.
                    return Ok(wasmtime::UpdateDeadline::Interrupt);
                }
                Ok(wasmtime::UpdateDeadline::Continue(1))
            });
        }
    }
}

/// Epoch ticks of a deadline (at least one).
fn deadline_ticks(timeout: Duration) -> u64 {
    let ticks = timeout.as_nanos().div_ceil(TICK.as_nanos());
    (ticks as u64).max(1)
}

/// Logs what a successful call wrote to stderr (at debug level).
fn log_stderr(plugin: &str, stderr: &[u8]) {
    if !stderr.is_empty() {
        tracing::debug!(plugin, stderr = %String::from_utf8_lossy(stderr), "plugin wrote to stderr");
    }
}

/// Which loaded plugin a call is for: its registry name (for messages), an id no other
/// loaded plugin has, also not a later version of the same name (for [`Session`]), and its
/// own limits (a tenant's plugin), `None` for the server's.
#[derive(Debug, Clone)]
pub(crate) struct PluginId {
    pub name: String,
    pub id: u64,
    pub limits: Option<Arc<SharedLimits>>,
}

impl PluginId {
    pub fn new(name: &str, limits: Option<Arc<SharedLimits>>) -> PluginId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        PluginId {
            name: name.to_string(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            limits,
        }
    }
}

/// Plugin instances kept between the calls of one request, so that a request's questions
/// instantiate each plugin once (per thread) rather than once per call.
///
/// A plugin call costs an instantiation (a fresh store, the instance's memory and tables
/// set up from a pool slot) plus the call itself, and for the small calls the pipeline makes
/// (`compile`, `render`, `apply`, `answer`) the instantiation is the larger part (openai-choice
/// `compile`: 20 µs fresh, 6 µs on a kept instance). A session is made per request and
/// dropped with it, so instances never carry anything from one request (or tenant) to
/// another; within the request, a call that fails on a kept instance is run again on a
/// fresh one ([`PluginRuntime::call`]), so a trap, a loop or a memory cap still fails only
/// its own question. A hot-swapped plugin is a new plugin with a new id: questions keep the
/// version they started with, and its instances are never used for the new one. Calls from
/// several threads each take their own instance.
///
/// A session may carry its request's stop check ([`Session::stopping_when`]): a plugin call
/// made in it is interrupted at the next epoch tick (10 ms) once the check says the request
/// was cancelled (its deadline passed, its client left, the server is shutting down), so a
/// plugin that loops holds its thread no longer than its request, not for the whole
/// `--plugin-timeout-ms` of every question left. The check is a plain predicate: the plugin
/// runtime knows nothing of requests.
#[derive(Default)]
pub struct Session {
    idle: Mutex<Vec<Kept>>,
    /// Whether the request this session serves was cancelled (none: never).
    stop: Option<StopCheck>,
    /// The question types this request resolved, by name: every question of the request
    /// that names one gets the same version, even when a new one is swapped in meanwhile.
    pinned: Mutex<std::collections::HashMap<String, Arc<super::QuestionType>>>,
}

/// An instance waiting in a [`Session`] for the next call of its plugin.
struct Kept {
    plugin: u64,
    store: Store<PluginState>,
    instance: Box<dyn Any + Send>,
    /// Dropped last (fields drop in order): the instance's pool slot is free by then.
    slot: Slot,
}

/// Most instances a session keeps (each holds a slot of the instance pool until the request
/// ends); more are dropped after their call.
const MAX_KEPT: usize = 32;

/// Most instances all sessions of the process keep together: half of the [`slots`], so that
/// many concurrent requests keeping instances leave the other half to calls in flight. Past
/// it, instances are dropped after their call, as without a session.
const MAX_KEPT_TOTAL: usize = slots::COMPONENT_INSTANCES as usize / 2;

/// Instances kept by all sessions now.
static KEPT_TOTAL: AtomicUsize = AtomicUsize::new(0);

/// A request's "was it cancelled?" check, called from the epoch callback of its plugin calls.
pub type StopCheck = Arc<dyn Fn() -> bool + Send + Sync>;

impl Session {
    /// An empty session.
    pub fn new() -> Session {
        Session::default()
    }

    /// An empty session whose plugin calls stop once `stop` returns true.
    pub fn stopping_when(stop: StopCheck) -> Session {
        Session {
            idle: Mutex::default(),
            stop: Some(stop),
            pinned: Mutex::default(),
        }
    }

    /// Whether the request this session serves was cancelled.
    pub fn is_stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|stop| stop())
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Kept>> {
        // The list is consistent between statements that can panic.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a kept instance of `plugin` out of the session.
    fn take<T: 'static>(&self, plugin: u64) -> Option<(Store<PluginState>, Box<T>, Slot)> {
        let mut idle = self.lock();
        let at = idle.iter().rposition(|k| k.plugin == plugin)?;
        let kept = idle.swap_remove(at);
        drop(idle);
        KEPT_TOTAL.fetch_sub(1, Ordering::Relaxed);
        match kept.instance.downcast::<T>() {
            Ok(instance) => Some((kept.store, instance, kept.slot)),
            // Ids are unique per loaded plugin, and a plugin has one instance type.
            Err(_) => None,
        }
    }

    /// The question type `name` this request pinned, else the one `resolve` gives (pinned
    /// for the request's later questions).
    pub(crate) fn pin_question_type(
        &self,
        name: &str,
        resolve: impl FnOnce() -> Option<Arc<super::QuestionType>>,
    ) -> Option<Arc<super::QuestionType>> {
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(plugin) = pinned.get(name) {
            return Some(plugin.clone());
        }
        let plugin = resolve()?;
        pinned.insert(name.to_string(), plugin.clone());
        Some(plugin)
    }

    /// How many instances the session keeps now.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.lock().len()
    }

    /// Keeps an instance of `plugin` for the next call.
    fn put(
        &self,
        plugin: u64,
        store: Store<PluginState>,
        instance: Box<dyn Any + Send>,
        slot: Slot,
    ) {
        let mut idle = self.lock();
        if idle.len() >= MAX_KEPT || !reserve_kept() {
            // Not kept: the store first, then its slot.
            drop(idle);
            drop(store);
            drop(instance);
            drop(slot);
            return;
        }
        idle.push(Kept {
            plugin,
            store,
            instance,
            slot,
        });
    }
}

/// Counts one more kept instance, unless all sessions keep [`MAX_KEPT_TOTAL`] already.
fn reserve_kept() -> bool {
    if KEPT_TOTAL.fetch_add(1, Ordering::Relaxed) >= MAX_KEPT_TOTAL {
        KEPT_TOTAL.fetch_sub(1, Ordering::Relaxed);
        return false;
    }
    true
}

impl Drop for Session {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(|p| p.into_inner());
        KEPT_TOTAL.fetch_sub(idle.len(), Ordering::Relaxed);
    }
}

impl Drop for PluginRuntime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// Runs `f`, a blocking plugin call, so that it is safe wherever it is called from.
///
/// wasmtime-wasi's synchronous bindings run their stream operations (a guest writing to stderr,
/// e.g. a panic message) with `Handle::block_on` when a tokio runtime is current, which panics on
/// an async worker thread. Calls are meant to come from `spawn_blocking` threads; should one come
/// from an async task of a multi-thread runtime, `block_in_place` makes that legal (and keeps the
/// executor from stalling). On a blocking thread or outside tokio `f` just runs.
fn outside_async<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// `64 MiB`, or bytes when not a whole number of MiB.
fn human_bytes(bytes: usize) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Write to a unique temp file next to `path`, then rename: readers never see half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)?;
    let unique = format!(
        ".{}.{}.{:?}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("artifact"),
        std::process::id(),
        std::thread::current().id()
    )
    .replace(['(', ')'], "");
    let tmp = dir.join(unique);
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
