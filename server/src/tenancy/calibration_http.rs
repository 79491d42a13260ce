//! `/v1/calibration`: a tenant's own calibration over HTTP (`PUT` starts a fit of the uploaded
//! labelled questions, `GET` shows its progress and the stored result, `DELETE` cancels it and
//! drops the result). The fit itself, its bounds and its accounting are in `calibration.rs`.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::calibration::{charge_tokens, Fitted, Progress};
use super::Caller;
use crate::calibration::{self, questions::QuestionSet};
use crate::error::{ApiError, Wire};
use crate::state::SharedState;

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
