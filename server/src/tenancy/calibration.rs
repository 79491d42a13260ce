//! A tenant's own calibration: it uploads labelled questions (the JSONL format of
//! `calibration/default.jsonl`), the server reads them through the tenant's own plugins and
//! renderer in the background, fits the tenant's calibration policy with the same
//! cross-validation and keep rule as startup calibration ([`crate::calibration`]), and from
//! then on the tenant's answers use that fit and report the temperature source `tenant`.
//!
//! Its HTTP handlers are in `calibration_http.rs`: `PUT /v1/calibration` (the file as the
//! body) starts a fit and answers 202;
//! `GET /v1/calibration` shows its progress and the stored result; `DELETE /v1/calibration`
//! cancels a running fit and drops the result. One fit per tenant runs at a time. Results
//! live in the tenant store, so they survive restarts; a result is used only with the model
//! and policy plugin version it was fitted with.
//!
//! A fit is the tenant's work on the shared model worker, so it is bounded and accountable
//! like its requests: at most `max_calibration_questions` questions (default
//! `--tenant-max-calibration-questions`); its prompt tokens are taken from the tenant's
//! `input_tokens_per_minute` (the fit waits for the bucket instead of failing) and counted in
//! its usage; and its reads carry a cancel token that `DELETE /v1/calibration` and deleting
//! the tenant set, so the model worker drops them before its next pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use super::limits::TenantLimiter;
use super::now_s;
use super::store::Store;
use super::usage::Counters;
use crate::calibration::{
    self, cv,
    ece::{Interval, ReliabilityBin},
    questions::QuestionSet,
    CalibrationState,
};
use crate::cancel::Cancel;
use crate::error::ApiError;
use crate::pipeline::{Engine, RequestScope, TemperatureSource};

/// A tenant's fitted calibration, as stored (JSON).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Fitted {
    /// The policy plugin and the sha256 of the version that fitted.
    pub policy: String,
    pub policy_sha256: String,
    /// What answers get: the fitted parameters when kept, else T = 1.0.
    pub params: Vec<f64>,
    pub temperature: f64,
    pub kept: bool,
    pub reason: String,
    /// The model the questions were read with (its name and forward description).
    pub model: String,
    /// Questions answered and used, and skipped.
    pub used: usize,
    pub skipped: usize,
    /// ECE raw and held-out calibrated (5-fold, 95% bootstrap over groups).
    pub ece_raw: Interval,
    pub ece_calibrated: Option<Interval>,
    pub accuracy_raw: f64,
    /// The reliability diagram behind the two ECEs: per confidence bin (10 equal-width bins
    /// of the top option's probability, only those holding answers), the answers' mean
    /// stated confidence and their accuracy, for the raw reads and for the held-out
    /// calibrated ones (what the fitted parameters give on questions they were not fitted
    /// on). Empty for a fit stored before the bins were kept: fit again to see them.
    #[serde(default)]
    pub reliability_raw: Vec<ReliabilityBin>,
    #[serde(default)]
    pub reliability_calibrated: Option<Vec<ReliabilityBin>>,
    pub questions_sha256: String,
    pub fitted_at: u64,
}

/// Where a tenant's latest fit is.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Progress {
    /// `running`, `done`, `failed` or `cancelled`.
    pub status: &'static str,
    pub answered: usize,
    pub total: usize,
    pub started_at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A tenant's running or last fit.
#[derive(Debug)]
struct Job {
    progress: Progress,
    /// Set by `DELETE /v1/calibration` and by deleting the tenant: the fit's reads stop.
    cancel: Cancel,
    /// Tells this job from a later one of the same tenant (a cancelled fit winding down must
    /// not write over the progress of the next).
    id: u64,
}

/// Every tenant's fits: the running or last job, and the stored results in use.
#[derive(Debug, Default)]
pub struct TenantCalibrations {
    jobs: Mutex<HashMap<String, Job>>,
    next_job: std::sync::atomic::AtomicU64,
    /// Stored results as answers use them, by tenant (None: the tenant has none).
    in_use: RwLock<HashMap<String, Option<Arc<CalibrationState>>>>,
}

/// The model a fit belongs to.
fn model_identity(engine: &Engine) -> String {
    let info = engine.model().info();
    format!("{} ({})", info.name, info.forward)
}

impl TenantCalibrations {
    /// The calibration a tenant's answers get, if it has a stored fit for this model.
    pub fn state_for(
        &self,
        store: &dyn Store,
        engine: &Engine,
        tenant_id: &str,
    ) -> Option<Arc<CalibrationState>> {
        if let Some(cached) = self
            .in_use
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant_id)
        {
            return cached.clone();
        }
        let loaded = match store.calibration(tenant_id) {
            Ok(Some(json)) => match serde_json::from_str::<Fitted>(&json) {
                Ok(fitted) if fitted.model == model_identity(engine) => {
                    Some(Arc::new(state_of(&fitted)))
                }
                Ok(fitted) => {
                    tracing::warn!(tenant = tenant_id, fitted_with = %fitted.model, "the tenant's calibration was fitted with another model; not used");
                    None
                }
                Err(error) => {
                    tracing::warn!(tenant = tenant_id, %error, "the tenant's stored calibration is unreadable; not used");
                    None
                }
            },
            Ok(None) => None,
            Err(error) => {
                // Not cached: the store may be back at the next request.
                tracing::warn!(tenant = tenant_id, %error, "cannot read the tenant's calibration");
                return None;
            }
        };
        self.in_use
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tenant_id.to_string(), loaded.clone());
        loaded
    }

    pub(crate) fn forget(&self, tenant_id: &str) {
        self.in_use
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant_id);
    }

    /// Drops what is known of a deleted tenant, cancelling its running fit.
    pub fn remove_tenant(&self, tenant_id: &str) {
        self.forget(tenant_id);
        let job = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant_id);
        if let Some(job) = job.filter(|j| j.progress.status == "running") {
            job.cancel.disconnect();
            tracing::info!(
                tenant = tenant_id,
                "the deleted tenant's calibration was cancelled"
            );
        }
    }

    /// Cancels the tenant's running fit, if any; whether there was one. Under the jobs lock,
    /// so a fit that finishes meanwhile either saved its result before (and `DELETE` then
    /// removes it) or sees the cancellation and saves nothing.
    pub(crate) fn cancel(&self, tenant_id: &str) -> bool {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        match jobs.get_mut(tenant_id) {
            Some(job) if job.progress.status == "running" => {
                job.cancel.disconnect();
                job.progress.status = "cancelled";
                job.progress.finished_at = Some(now_s());
                true
            }
            _ => false,
        }
    }

    /// The progress of the tenant's running or last fit.
    pub(crate) fn progress(&self, tenant_id: &str) -> Option<Progress> {
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant_id)
            .map(|job| job.progress.clone())
    }

    fn set_progress(&self, tenant_id: &str, id: u64, update: impl FnOnce(&mut Progress)) {
        if let Some(job) = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(tenant_id)
            .filter(|job| job.id == id && job.progress.status == "running")
        {
            update(&mut job.progress);
        }
    }

    /// Starts fitting `set` for the tenant in the background; 409 while one runs.
    pub(crate) fn start(
        self: &Arc<Self>,
        engine: Arc<Engine>,
        store: Arc<dyn Store>,
        tenant_id: String,
        scope: RequestScope,
        set: QuestionSet,
        reporter: crate::progress::Reporter,
    ) -> Result<Progress, ApiError> {
        let progress = Progress {
            status: "running",
            answered: 0,
            total: set.questions.len(),
            started_at: now_s(),
            finished_at: None,
            error: None,
        };
        let id = self
            .next_job
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cancel = scope.cancel.clone();
        {
            let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            if jobs
                .get(&tenant_id)
                .is_some_and(|j| j.progress.status == "running")
            {
                return Err(ApiError::Conflict {
                    message: "a calibration of this tenant is running; wait for it (GET /v1/calibration) or cancel it (DELETE /v1/calibration) before starting another".into(),
                });
            }
            jobs.insert(
                tenant_id.clone(),
                Job {
                    progress: progress.clone(),
                    cancel: cancel.clone(),
                    id,
                },
            );
        }
        let this = self.clone();
        let key = tenant_id.clone();
        let spawned = std::thread::Builder::new()
            .name("tenant-calibration".into())
            .spawn(move || {
                // The log names the tenant; /health shows the task without it.
                let task = reporter.start_for(
                    "tenant calibration",
                    Some(&tenant_id),
                    "questions",
                    set.questions.len() as u64,
                );
                let outcome = fit(&engine, &scope, &set, &|answered, total| {
                    task.set_total(total as u64);
                    task.set_done(answered as u64);
                    this.set_progress(&tenant_id, id, |p| {
                        p.answered = answered;
                        p.total = total;
                    })
                });
                task.finish();
                let outcome = outcome.and_then(|fitted| {
                    let json = serde_json::to_string(&fitted).map_err(|e| e.to_string())?;
                    // Under the jobs lock: see `cancel`.
                    let _jobs = this.jobs.lock().unwrap_or_else(|p| p.into_inner());
                    if cancel.is_cancelled() {
                        return Err("cancelled".to_string());
                    }
                    store
                        .save_calibration(&tenant_id, &json)
                        .map_err(|e| e.to_string())?;
                    Ok(fitted)
                });
                if cancel.is_cancelled() {
                    tracing::info!(tenant = %tenant_id, "tenant calibration cancelled");
                    return;
                }
                this.forget(&tenant_id);
                this.set_progress(&tenant_id, id, |p| {
                    p.finished_at = Some(now_s());
                    match outcome {
                        Ok(_) => p.status = "done",
                        Err(reason) => {
                            p.status = "failed";
                            p.error = Some(reason);
                        }
                    }
                });
            });
        if let Err(error) = spawned {
            self.jobs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            return Err(ApiError::Internal(format!(
                "cannot start the calibration thread: {error}"
            )));
        }
        Ok(progress)
    }
}

/// What answers get from a stored fit.
fn state_of(fitted: &Fitted) -> CalibrationState {
    CalibrationState {
        policy: fitted.policy.clone(),
        plugin_sha256: fitted.policy_sha256.clone(),
        params: fitted.params.clone(),
        temperature: fitted.temperature,
        source: TemperatureSource::Tenant,
    }
}

/// Reads the questions through the tenant's pipeline and fits its policy.
fn fit(
    engine: &Engine,
    scope: &RequestScope,
    set: &QuestionSet,
    progress: &dyn Fn(usize, usize),
) -> Result<Fitted, String> {
    let policy_name = scope
        .calibration
        .clone()
        .unwrap_or_else(|| engine.plugin_names().1.to_string());
    let policy = engine
        .plugins()
        .calibration_in(scope.plugins.as_deref(), &policy_name)
        .ok_or_else(|| format!("calibration plugin `{policy_name}` is not loaded"))?;
    let (samples, counts) =
        calibration::collect_in(engine, scope, set, policy.neutral_states(), progress);
    if scope.cancel.is_cancelled() {
        return Err("cancelled".into());
    }
    if samples.len() < calibration::MIN_ANSWERED {
        return Err(format!(
            "only {} of {} questions were answered, at least {} are needed{}",
            samples.len(),
            counts.total,
            calibration::MIN_ANSWERED,
            counts
                .skipped_reasons
                .first()
                .map(|r| format!(" (first skipped: {r})"))
                .unwrap_or_default()
        ));
    }
    let report = cv::evaluate(&policy, &samples);
    let verdict = calibration::verdict(&report, &policy);
    if !verdict.measured {
        return Err(verdict.reason);
    }
    Ok(Fitted {
        policy: policy_name,
        policy_sha256: policy.sha256().to_string(),
        params: verdict.params,
        temperature: verdict.temperature,
        kept: verdict.kept,
        reason: verdict.reason,
        model: model_identity(engine),
        used: counts.used,
        skipped: counts.skipped,
        ece_raw: report.ece_raw,
        ece_calibrated: report.ece_calibrated,
        accuracy_raw: report.accuracy_raw,
        reliability_raw: report.reliability_raw,
        reliability_calibrated: report.reliability_calibrated,
        questions_sha256: set.sha256.clone(),
        fitted_at: now_s(),
    })
}

/// The token admission of a tenant's fit: each read's prompt tokens are taken from the
/// tenant's `input_tokens_per_minute` bucket, waiting for it to refill (the fit is paced by
/// the tenant's own rate instead of failing), and counted in the tenant's usage. A read
/// larger than the whole minute fails (that question is skipped, naming the limit); the wait
/// ends when the fit is cancelled.
pub(crate) fn charge_tokens(
    limiter: Arc<TenantLimiter>,
    usage: Arc<Counters>,
    cancel: Cancel,
) -> crate::pipeline::AdmitTokens {
    Arc::new(move |tokens| loop {
        match limiter.admit_tokens(tokens) {
            Ok(()) => {
                usage.record_background_tokens(tokens);
                return Ok(());
            }
            Err(crate::tenancy::Refused::RateLimited { retry_after_s, .. }) => {
                let until = std::time::Instant::now()
                    + std::time::Duration::from_secs(retry_after_s.clamp(1, 60));
                while std::time::Instant::now() < until {
                    if let Some(error) = cancel.error() {
                        return Err(error);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            }
            Err(error) => return Err(crate::error::refused_in_engine(error)),
        }
    })
}
