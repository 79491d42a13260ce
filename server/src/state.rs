//! What every handler shares: the server's [`AppState`] (its configuration, the engine once
//! loaded, tenants, limits, usage, calibrations, drain and progress) and where the server is in
//! its life (loading, ready, failed). Handlers take it as [`SharedState`]; the router
//! (`api.rs`) and the handlers both import it from here, so that neither imports the
//! other for it.

use std::sync::{Arc, RwLock};

use crate::config::Config;
use crate::error::{ApiError, Wire};
use crate::metrics::Metrics;
use crate::pipeline::Engine;
use crate::tenancy::calibration::TenantCalibrations;
use crate::tenancy::limits::Limiters;
use crate::tenancy::usage::Usage;
use crate::tenancy::Directory;

/// Seconds a client is told to wait while the server is loading.
const LOADING_RETRY_AFTER_S: u64 = 2;

/// Where the server is in its life.
pub(crate) enum Phase {
    Loading(String),
    Ready(Arc<Engine>, String),
    Failed(String),
}

/// State shared by all handlers.
pub struct AppState {
    pub config: Config,
    pub metrics: Arc<Metrics>,
    /// Tenants and keys (see [`crate::tenancy`]).
    pub directory: Arc<Directory>,
    /// What each tenant used.
    pub usage: Usage,
    /// Tenants' own calibrations (fits running, results in use).
    pub calibrations: Arc<TenantCalibrations>,
    /// Each tenant's rates, concurrent and queued requests.
    pub limits: Limiters,
    pub(crate) phase: RwLock<Phase>,
    /// What startup tuning measured (none: pinned, skipped or failed), for `/health`.
    pub(crate) tuned: RwLock<Option<Arc<crate::tune::store::Saved>>>,
    /// The latency-aware choice among the tuned candidates, once measured.
    pub(crate) serving: RwLock<Option<Arc<crate::tune::latency::Serving>>>,
    /// What startup still measures in the background while the server answers, for `/health`.
    pub(crate) pending: RwLock<Pending>,
    /// Requests in flight, and whether a stop signal asked the server to drain.
    pub drain: Arc<crate::drain::Drain>,
    /// Long work in progress (loading, calibrations), shown by `/health`.
    pub progress: Arc<crate::progress::Board>,
}

/// What handlers receive.
pub type SharedState = Arc<AppState>;

impl AppState {
    pub fn new(config: Config, metrics: Arc<Metrics>, directory: Arc<Directory>) -> SharedState {
        let limits = Limiters::with_shared(
            config.tenant_defaults(),
            directory.store().clone().shared_rates(),
        );
        let state = Arc::new(AppState {
            config,
            metrics,
            directory,
            usage: Usage::default(),
            calibrations: Arc::default(),
            limits,
            phase: RwLock::new(Phase::Loading("starting".into())),
            tuned: RwLock::new(None),
            serving: RwLock::new(None),
            pending: RwLock::default(),
            drain: Arc::default(),
            progress: Arc::default(),
        });
        // A tenant deleted anywhere (this server's admin API, the CLI, another replica)
        // leaves no per-tenant state behind here.
        let weak = Arc::downgrade(&state);
        state.directory.on_tenant_removed(Box::new(move |id| {
            if let Some(state) = weak.upgrade() {
                state.forget_tenant(id);
            }
        }));
        state
    }

    /// What a running server drops when a tenant is deleted (through its admin API, the CLI
    /// or another replica): the tenant's usage counters (so its id leaves `/metrics`), its
    /// limiters, its calibration in use and its plugins.
    pub fn forget_tenant(&self, id: &str) {
        self.usage.forget(id);
        self.limits.forget(id);
        self.calibrations.remove_tenant(id);
        if let Ok(engine) = self.engine() {
            engine.plugins().remove_tenant(id);
        }
    }

    /// Where the server's long work reports: the log, and the board `/health` shows.
    pub fn reporter(&self) -> crate::progress::Reporter {
        crate::progress::Reporter::publishing(self.progress.clone(), self.config.progress_every_s)
    }

    /// Records loading progress shown by `/health`.
    pub fn set_loading(&self, step: impl Into<String>) {
        *self.phase.write().unwrap_or_else(|p| p.into_inner()) = Phase::Loading(step.into());
    }

    /// The engine is ready; `served` is the model name reported in responses.
    pub fn set_ready(&self, engine: Arc<Engine>, served: String) {
        *self.phase.write().unwrap_or_else(|p| p.into_inner()) = Phase::Ready(engine, served);
    }

    /// Records what startup tuning measured.
    pub fn set_tuned(&self, saved: Option<crate::tune::store::Saved>) {
        *self.tuned.write().unwrap_or_else(|p| p.into_inner()) = saved.map(Arc::new);
    }

    /// Records which setup this device serves and why (latency-aware, `tune::latency`).
    pub fn set_serving(&self, serving: crate::tune::latency::Serving) {
        *self.serving.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(serving));
    }

    /// Records what startup still measures in the background.
    pub fn set_pending(&self, pending: Pending) {
        *self.pending.write().unwrap_or_else(|p| p.into_inner()) = pending;
    }

    /// Loading failed; decision requests get 503 with this reason.
    pub fn set_failed(&self, reason: String) {
        *self.phase.write().unwrap_or_else(|p| p.into_inner()) = Phase::Failed(reason);
    }

    /// The engine, or why there is none.
    pub fn engine(&self) -> Result<Arc<Engine>, ApiError> {
        match &*self.phase.read().unwrap_or_else(|p| p.into_inner()) {
            Phase::Ready(engine, _) => Ok(engine.clone()),
            Phase::Loading(step) => Err(ApiError::NotReady {
                reason: format!("the server is loading ({step}); retry shortly"),
                retry_after_s: Some(LOADING_RETRY_AFTER_S),
            }),
            Phase::Failed(reason) => Err(ApiError::NotReady {
                reason: format!("the server cannot answer decisions: {reason}"),
                retry_after_s: None,
            }),
        }
    }

    /// The model name reported in responses.
    pub fn served_model_name(&self) -> String {
        match &*self.phase.read().unwrap_or_else(|p| p.into_inner()) {
            Phase::Ready(_, served) => served.clone(),
            _ => String::new(),
        }
    }

    /// Names a request may use for the served model: its served name, the model file's stem,
    /// and each SDK's documented model name (`gpt-6-luna` for OpenAI's Decisions, `jev-latest`
    /// for TypeSafe's), so that example code runs unchanged against this server.
    pub fn model_aliases(&self, wire: Wire) -> Vec<String> {
        let mut names = vec![self.served_model_name()];
        if let Some(stem) = self.config.model.file_stem().and_then(|s| s.to_str()) {
            if !names.iter().any(|n| n == stem) {
                names.push(stem.to_string());
            }
        }
        names.push(match wire {
            Wire::OpenAi => "gpt-6-luna".to_string(),
            Wire::SystemOne => "jev-latest".to_string(),
        });
        names
    }
}

/// What startup still has to measure once the server answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Startup tuning found no saved result: it measures the candidates.
    pub tuning: bool,
    /// Startup calibration found no saved result (and tuning's correction does not apply).
    pub calibration: bool,
    /// A tuning result is installed: the setup this device serves is weighed by what a
    /// question costs here (`tune::latency`).
    pub latency: bool,
}

impl Pending {
    /// The steps left, as `/health` lists them.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.tuning {
            names.push("tuning");
        }
        if self.latency {
            names.push("latency");
        }
        if self.calibration {
            names.push("calibration");
        }
        names
    }
}
