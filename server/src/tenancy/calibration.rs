//! A tenant's own calibration: it uploads labelled questions (the JSONL format of
//! `calibration/default.jsonl`), the server reads them through the tenant's own plugins and
//! renderer in the background, fits the tenant's calibration policy with the same
//! cross-validation and keep rule as startup calibration ([`crate::calibration`]), and from
//! then on the tenant's answers use that fit and report the temperature source `tenant`.
//!
//! `PUT /v1/calibration` (the file as the body) starts a fit and answers 202;
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

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::limits::TenantLimiter;
use super::store::Store;
use super::usage::Counters;
use super::{now_s, Caller};
use crate::api::SharedState;
use crate::calibration::{self, cv, ece::Interval, questions::QuestionSet, CalibrationState};
use crate::cancel::Cancel;
use crate::error::{ApiError, Wire};
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

    fn forget(&self, tenant_id: &str) {
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
    fn cancel(&self, tenant_id: &str) -> bool {
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
    fn progress(&self, tenant_id: &str) -> Option<Progress> {
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
    fn start(
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
        questions_sha256: set.sha256.clone(),
        fitted_at: now_s(),
    })
}

/// The token admission of a tenant's fit: each read's prompt tokens are taken from the
/// tenant's `input_tokens_per_minute` bucket, waiting for it to refill (the fit is paced by
/// the tenant's own rate instead of failing), and counted in the tenant's usage. A read
/// larger than the whole minute fails (that question is skipped, naming the limit); the wait
/// ends when the fit is cancelled.
fn charge_tokens(
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

/// The tenant of a calibration request: a configured tenant, never the default one.
fn tenant_caller(state: &SharedState, headers: &HeaderMap) -> Result<(Caller, String), ApiError> {
    let caller = state.directory.authenticate(headers)?;
    let tenant = caller.require_tenant(
        "a tenant calibration",
        "the server's own calibration is set by the operator (decide calibrate, --calibration-questions)",
    )?;
    Ok((caller, tenant.id.clone()))
}

/// `PUT /v1/calibration`: starts fitting the uploaded labelled questions.
#[utoipa::path(put, path = "/v1/calibration", operation_id = "start_calibration", tag = "calibration",
    request_body(content = String, content_type = "application/x-ndjson",
        description = "Labelled questions, one JSON object a line (`{state, question, expected, group?, id?}`, the format of calibration/default.jsonl), at least 50."),
    responses(crate::openapi::service::CalibrationUploadResponses))]
pub async fn upload(State(state): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    match start_upload(&state, &headers, body).await {
        Ok(progress) => (
            StatusCode::ACCEPTED,
            Json(crate::openapi::service::CalibrationStarted {
                status: progress.status,
                progress,
                poll: "/v1/calibration",
            }),
        )
            .into_response(),
        Err(error) => error.into_response_for(Wire::OpenAi),
    }
}

async fn start_upload(
    state: &SharedState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Progress, ApiError> {
    let (caller, tenant_id) = tenant_caller(state, headers)?;
    let engine = state.engine()?;
    let limit = state.config.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::TooLarge {
            loc: vec![],
            message: format!(
                "the question file is over the limit of {limit} bytes (setting --max-body-bytes / DECIDE_MAX_BODY_BYTES)"
            ),
        })?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::invalid(vec![], "the question file is not UTF-8 text"))?;
    let set = QuestionSet::parse("the uploaded question file", text)
        .map_err(|message| ApiError::invalid(vec![], message))?;
    if set.questions.len() < calibration::MIN_ANSWERED {
        return Err(ApiError::invalid(
            vec![],
            format!(
                "the question file has {} questions; a fit needs at least {} (JSONL lines like calibration/default.jsonl)",
                set.questions.len(),
                calibration::MIN_ANSWERED
            ),
        ));
    }
    let (max, own) = match caller
        .tenant()
        .and_then(|t| t.limits.max_calibration_questions)
    {
        Some(max) => (max, true),
        None => (state.config.tenant_max_calibration_questions, false),
    };
    if set.questions.len() > max {
        let how = if own {
            format!("the tenant's own limit; the operator changes it with PATCH /admin/v1/tenants/{tenant_id}")
        } else {
            format!("the server-wide default, setting --tenant-max-calibration-questions / DECIDE_TENANT_MAX_CALIBRATION_QUESTIONS; the operator sets the tenant's own with PATCH /admin/v1/tenants/{tenant_id}")
        };
        return Err(ApiError::TooLarge {
            loc: vec![],
            message: format!(
                "the question file has {} questions, over tenant limit max_calibration_questions = {max} ({how}); upload at most {max}",
                set.questions.len()
            ),
        });
    }
    let mut scope = crate::frontends::request_scope(&caller);
    scope.calibrated = None;
    // Set by DELETE /v1/calibration and by deleting the tenant; a child of the server's
    // background token, so a stopping server ends the fit too.
    scope.cancel = state.drain.background_token().child(None);
    // The fit reads through the tenant's plugins and renderer, and is the tenant's work: its
    // prompt tokens come out of the tenant's token rate (waiting for the bucket, as a
    // background job may) and count in its usage.
    scope.admit_tokens = Some(charge_tokens(
        state.limits.of(&caller),
        state.usage.of(&tenant_id),
        scope.cancel.clone(),
    ));
    state.calibrations.start(
        engine,
        state.directory.store().clone(),
        tenant_id,
        scope,
        set,
        state.reporter(),
    )
}

/// `GET /v1/calibration`: the running or last fit, and the stored result.
#[utoipa::path(
    get,
    path = "/v1/calibration",
    operation_id = "calibration_status",
    tag = "calibration",
    responses(crate::openapi::service::CalibrationStatusResponses)
)]
pub async fn status(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    let result = (|| {
        let (_, tenant_id) = tenant_caller(&state, &headers)?;
        let progress = state.calibrations.progress(&tenant_id);
        let stored = state
            .directory
            .store()
            .calibration(&tenant_id)
            .map_err(|e| ApiError::Internal(e.to_string()))?
            .and_then(|json| serde_json::from_str::<Fitted>(&json).ok());
        let status = match (&progress, &stored) {
            (Some(p), _) => p.status,
            (None, Some(_)) => "done",
            (None, None) => "none",
        };
        Ok::<_, ApiError>(crate::openapi::service::CalibrationStatus {
            status,
            progress,
            result: stored,
        })
    })();
    match result {
        Ok(body) => Json(body).into_response(),
        Err(error) => error.into_response_for(Wire::OpenAi),
    }
}

/// `DELETE /v1/calibration`: a running fit is cancelled (its queued reads are dropped), and
/// the tenant's answers go back to the server's calibration.
#[utoipa::path(
    delete,
    path = "/v1/calibration",
    operation_id = "remove_calibration",
    tag = "calibration",
    responses(crate::openapi::service::CalibrationRemoveResponses)
)]
pub async fn remove(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    let result = (|| {
        let (_, tenant_id) = tenant_caller(&state, &headers)?;
        let cancelled = state.calibrations.cancel(&tenant_id);
        let removed = state
            .directory
            .store()
            .delete_calibration(&tenant_id)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        state.calibrations.forget(&tenant_id);
        if cancelled || removed {
            Ok(())
        } else {
            Err(ApiError::NotFound {
                message: "this tenant has no calibration of its own and no fit running".into(),
            })
        }
    })();
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => error.into_response_for(Wire::OpenAi),
    }
}
