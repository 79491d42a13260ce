//! The server's error type and its one mapping to HTTP: its own failures, the engine's
//! (`EngineError`, a question's `RefusalKind`) and tenancy's (`Refused`).
//!
//! Every failure a caller can cause is a 4xx whose message names the field, the limit and the
//! setting to change. Each wire format wants its own error body (OpenAI: `{"error": {...}}`,
//! Jev: `{"detail": [{loc, msg, type}]}`), so an error is rendered for a [`Wire`] format.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// The wire format an error is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI's Decisions format (`/v1/decisions`).
    OpenAi,
    /// TypeSafe's Jev format (`/v1/systemone`).
    SystemOne,
}

pub use decide_engine::error::{dotted, Loc, LocPart};

/// A location as Jev's (FastAPI's) `loc` list: `["body", "questions", "q1", "type"]`.
pub fn jev_loc(loc: &[LocPart]) -> Value {
    let mut parts = vec![json!("body")];
    parts.extend(loc.iter().map(|part| match part {
        LocPart::Field(name) => json!(name),
        LocPart::Index(index) => json!(index),
    }));
    Value::Array(parts)
}

/// Everything that can fail a whole request (or one item of a batch: cloned when one refusal
/// stops several items, see [`crate::pipeline::Engine::decide_items`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or breaks a rule; `loc` points at the field.
    #[error("{message}")]
    Invalid {
        loc: Loc,
        message: String,
        kind: &'static str,
    },
    /// The request asks for something this server does not offer (a generation mode): 400
    /// on every wire format, where validation errors may be 422.
    #[error("{message}")]
    BadRequest { loc: Loc, message: String },
    /// The request is too large for a configured limit.
    #[error("{message}")]
    TooLarge { loc: Loc, message: String },
    /// Unsupported body encoding or content type.
    #[error("{message}")]
    UnsupportedMedia { message: String },
    /// The server is loading or could not load its model/plugins.
    #[error("{reason}")]
    NotReady {
        reason: String,
        retry_after_s: Option<u64>,
    },
    /// Every question of the request failed; this is the first failure.
    #[error("{message}")]
    QuestionFailed {
        status: StatusCode,
        loc: Loc,
        message: String,
        code: &'static str,
    },
    /// `--api-key` is set and the request did not present it.
    #[error("{message}")]
    Unauthorized { message: String },
    /// A tenant limit (a rate, its concurrent or queued requests) refuses the request for
    /// now. `headers` are OpenAI's `x-ratelimit-*` headers; `retry_after_s` becomes
    /// `Retry-After`.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_s: u64,
        headers: Vec<(String, String)>,
    },
    /// The caller may not do this (the admin API without `--admin-key`, an upload without a
    /// tenant key).
    #[error("{message}")]
    Forbidden { message: String },
    /// A named thing (tenant, key, plugin, version) does not exist.
    #[error("{message}")]
    NotFound { message: String },
    /// The request conflicts with what exists (a duplicate tenant name).
    #[error("{message}")]
    Conflict { message: String },
    /// A model was named that this server does not serve.
    #[error("{message}")]
    UnknownModel { message: String },
    /// The request's deadline (`--request-timeout-ms`, or the request's own `timeout_ms`)
    /// passed before it was answered: 504, and its queued model work is dropped.
    #[error("{message}")]
    Timeout { message: String },
    /// The model worker's queue is full (`--max-queued-requests`, `--max-queued-tokens`):
    /// 503 with `Retry-After` at once, before the request's work is queued.
    #[error("{message}")]
    Overloaded { message: String, retry_after_s: u64 },
    /// The client closed the connection before the answer. Never sent (nobody is there); it
    /// ends the request's remaining work. 499, as nginx logs such a request.
    #[error("{message}")]
    Cancelled { message: String },
    /// A bug: never caused by input.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What the engine fails with, as the HTTP error it is (the statuses are [`ApiError::status`]'s).
impl From<decide_engine::EngineError> for ApiError {
    fn from(error: decide_engine::EngineError) -> Self {
        use decide_engine::EngineError;
        match error {
            EngineError::Invalid { loc, message, kind } => ApiError::Invalid { loc, message, kind },
            EngineError::TooLarge { loc, message } => ApiError::TooLarge { loc, message },
            EngineError::NotReady {
                reason,
                retry_after_s,
            } => ApiError::NotReady {
                reason,
                retry_after_s,
            },
            EngineError::Overloaded {
                message,
                retry_after_s,
            } => ApiError::Overloaded {
                message,
                retry_after_s,
            },
            EngineError::RateLimited {
                message,
                retry_after_s,
                headers,
            } => ApiError::RateLimited {
                message,
                retry_after_s,
                headers,
            },
            EngineError::Timeout { message } => ApiError::Timeout { message },
            EngineError::Cancelled { message } => ApiError::Cancelled { message },
            EngineError::Internal(message) => ApiError::Internal(message),
        }
    }
}

/// A tenancy refusal met inside the engine's work (a tenant's token rate, taken as prompt
/// tokens reach the model worker), as the engine's error; it becomes the same HTTP error as
/// the refusal would have been outside.
pub fn refused_in_engine(refused: crate::tenancy::Refused) -> decide_engine::EngineError {
    use crate::tenancy::Refused;
    use decide_engine::EngineError;
    match refused {
        Refused::RateLimited {
            message,
            retry_after_s,
            headers,
        } => EngineError::RateLimited {
            message,
            retry_after_s,
            headers,
        },
        Refused::TooLarge { message } => EngineError::TooLarge {
            loc: vec![],
            message,
        },
        // Not met during admission: who is asking was settled before the work began.
        Refused::Unauthorized { message } | Refused::Forbidden { message } => {
            EngineError::Internal(message)
        }
        Refused::Internal(message) => EngineError::Internal(message),
    }
}

/// The status a request gets when every one of its questions was refused with `kind` (and the
/// status a batch item or a Jev refusal shows).
pub fn refusal_status(kind: decide_engine::error::RefusalKind) -> StatusCode {
    use decide_engine::error::RefusalKind;
    match kind {
        RefusalKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        RefusalKind::BadRequest => StatusCode::BAD_REQUEST,
        RefusalKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        RefusalKind::NotReady | RefusalKind::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
        RefusalKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        RefusalKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        RefusalKind::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::REQUEST_TIMEOUT),
        RefusalKind::EngineFailed => StatusCode::BAD_GATEWAY,
        RefusalKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// What tenancy refuses, as the HTTP error it is (the one place its refusals get statuses).
impl From<crate::tenancy::Refused> for ApiError {
    fn from(refused: crate::tenancy::Refused) -> Self {
        use crate::tenancy::Refused;
        match refused {
            Refused::Unauthorized { message } => ApiError::Unauthorized { message },
            Refused::Forbidden { message } => ApiError::Forbidden { message },
            Refused::RateLimited {
                message,
                retry_after_s,
                headers,
            } => ApiError::RateLimited {
                message,
                retry_after_s,
                headers,
            },
            Refused::TooLarge { message } => ApiError::TooLarge {
                loc: vec![],
                message,
            },
            Refused::Internal(message) => ApiError::Internal(message),
        }
    }
}

impl ApiError {
    /// An invalid field, with the conventional error kind.
    pub fn invalid(loc: Loc, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            loc,
            message: message.into(),
            kind: "value_error",
        }
    }

    /// The HTTP status of this error. Validation is 400 for OpenAI and 422 for Jev, as each
    /// format's clients expect.
    pub fn status(&self, wire: Wire) -> StatusCode {
        match self {
            ApiError::Invalid { .. } => match wire {
                Wire::OpenAi => StatusCode::BAD_REQUEST,
                Wire::SystemOne => StatusCode::UNPROCESSABLE_ENTITY,
            },
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMedia { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NotReady { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::QuestionFailed { status, .. } => *status,
            ApiError::UnknownModel { .. } => StatusCode::NOT_FOUND,
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Cancelled { .. } => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::REQUEST_TIMEOUT)
            }
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Where in the body the error points (empty: the request as a whole).
    pub fn loc(&self) -> &[LocPart] {
        match self {
            ApiError::Invalid { loc, .. }
            | ApiError::BadRequest { loc, .. }
            | ApiError::TooLarge { loc, .. }
            | ApiError::QuestionFailed { loc, .. } => loc,
            _ => &[],
        }
    }

    /// The machine-readable code (Jev's `type`, OpenAI's `code`).
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Invalid { kind, .. } => kind,
            ApiError::BadRequest { .. } => "unsupported_request",
            ApiError::TooLarge { .. } => "too_large",
            ApiError::UnsupportedMedia { .. } => "unsupported_media_type",
            ApiError::NotReady { .. } => "not_ready",
            ApiError::QuestionFailed { code, .. } => code,
            ApiError::UnknownModel { .. } => "model_not_found",
            ApiError::Unauthorized { .. } => "invalid_api_key",
            ApiError::RateLimited { .. } => "rate_limit_exceeded",
            ApiError::Forbidden { .. } => "forbidden",
            ApiError::NotFound { .. } => "not_found",
            ApiError::Conflict { .. } => "conflict",
            ApiError::Timeout { .. } => "timeout",
            ApiError::Overloaded { .. } => "overloaded",
            ApiError::Cancelled { .. } => "cancelled",
            ApiError::Internal(_) => "internal_error",
        }
    }

    /// Is this a complaint about the request's content, pointing at a field (a Jev `detail`
    /// list), rather than about the server, the caller or the moment?
    fn is_validation(&self) -> bool {
        match self {
            ApiError::Invalid { .. } | ApiError::BadRequest { .. } | ApiError::TooLarge { .. } => {
                true
            }
            ApiError::QuestionFailed { status, .. } => status.is_client_error(),
            _ => false,
        }
    }

    /// The error body in the given wire format (OpenAI's `{"error": {...}}`, Jev's `{"detail":
    /// [...]}` for validation and `{"detail": {...}}` otherwise): what the HTTP API answers, and
    /// what an MCP tool error carries as its structured content.
    pub fn body_for(&self, wire: Wire) -> Value {
        let status = self.status(wire);
        let message = self.to_string();
        let loc = self.loc();
        match wire {
            Wire::OpenAi => {
                let kind = match status {
                    StatusCode::GATEWAY_TIMEOUT => "timeout",
                    StatusCode::SERVICE_UNAVAILABLE => "server_error",
                    StatusCode::NOT_FOUND => "invalid_request_error",
                    StatusCode::UNAUTHORIZED => "authentication_error",
                    StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
                    StatusCode::FORBIDDEN => "permission_error",
                    s if s.is_server_error() => "server_error",
                    _ => "invalid_request_error",
                };
                let param = if loc.is_empty() {
                    Value::Null
                } else {
                    Value::String(dotted(loc))
                };
                json!({"error": {"message": message, "type": kind, "param": param, "code": self.code()}})
            }
            // Jev's API answers validation errors with a `detail` list of `{loc, msg, type}` and
            // every other error (401, 404, 429, 503, ...) with `detail: {error_type, message}`.
            Wire::SystemOne if !self.is_validation() => {
                let error_type = match self {
                    ApiError::Timeout { .. } => "timeout",
                    ApiError::Overloaded { .. } => "overloaded",
                    _ => error_type(status),
                };
                json!({"detail": {"error_type": error_type, "message": message}})
            }
            Wire::SystemOne => {
                json!({"detail": [{"loc": jev_loc(loc), "msg": message, "type": self.code()}]})
            }
        }
    }

    /// Seconds a client is told to wait before retrying (`Retry-After`), where it should.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            ApiError::NotReady { retry_after_s, .. } => *retry_after_s,
            ApiError::RateLimited { retry_after_s, .. }
            | ApiError::Overloaded { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        }
    }

    /// The error body and headers in the given wire format.
    pub fn into_response_for(self, wire: Wire) -> Response {
        let status = self.status(wire);
        let message = self.to_string();
        let body = self.body_for(wire);
        let retry_after = self.retry_after_s();
        let mut response = (status, axum::Json(body)).into_response();
        if let ApiError::RateLimited { headers, .. } = &self {
            for (name, value) in headers {
                if let (Ok(name), Ok(value)) = (
                    header::HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(value),
                ) {
                    response.headers_mut().insert(name, value);
                }
            }
        }
        if let Some(seconds) = retry_after {
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        if status.is_server_error()
            && !matches!(
                self,
                ApiError::NotReady { .. } | ApiError::Overloaded { .. } | ApiError::Timeout { .. }
            )
        {
            tracing::error!(%status, %message, "request failed");
        }
        response
    }
}

/// The Jev `error_type` of a status.
fn error_type(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::FORBIDDEN => "permission_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::CONFLICT => "conflict_error",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        StatusCode::BAD_GATEWAY => "engine_error",
        StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
        StatusCode::GATEWAY_TIMEOUT => "timeout_error",
        s if s.is_server_error() => "internal_error",
        _ => "invalid_request_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loc;

    #[test]
    fn jev_errors_are_a_detail_list_for_validation_and_an_object_otherwise() {
        let body = |error: ApiError| {
            let response = error.into_response_for(Wire::SystemOne);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let bytes = runtime
                .block_on(axum::body::to_bytes(response.into_body(), 1 << 20))
                .unwrap();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        let invalid = body(ApiError::invalid(loc!["state"], "state: must not be empty"));
        assert_eq!(invalid["detail"][0]["loc"], json!(["body", "state"]));
        let missing = body(ApiError::UnknownModel {
            message: "model `x` is not served here".into(),
        });
        assert_eq!(
            missing,
            json!({"detail": {"error_type": "not_found_error", "message": "model `x` is not served here"}})
        );
        let loading = body(ApiError::NotReady {
            reason: "loading".into(),
            retry_after_s: Some(2),
        });
        assert_eq!(loading["detail"]["error_type"], "service_unavailable");
    }

    #[test]
    fn validation_status_depends_on_the_wire_format() {
        let error = ApiError::invalid(loc!["input"], "input: must not be empty");
        assert_eq!(error.status(Wire::OpenAi), StatusCode::BAD_REQUEST);
        assert_eq!(
            error.status(Wire::SystemOne),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }

    fn body(response: Response) -> (StatusCode, Option<String>, Value) {
        let status = response.status();
        let retry = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = futures_util::FutureExt::now_or_never(axum::body::to_bytes(
            response.into_body(),
            usize::MAX,
        ))
        .expect("a JSON body is ready at once")
        .unwrap();
        (status, retry, serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn timeouts_and_overload_render_in_each_format() {
        let timeout = || ApiError::Timeout {
            message: "past 50 ms (extra.timeout_ms of the request)".into(),
        };
        let (status, retry, json) = body(timeout().into_response_for(Wire::OpenAi));
        assert_eq!((status, retry), (StatusCode::GATEWAY_TIMEOUT, None));
        assert_eq!(json["error"]["type"], "timeout");
        assert_eq!(json["error"]["code"], "timeout");
        let (_, _, json) = body(timeout().into_response_for(Wire::SystemOne));
        assert_eq!(json["detail"]["error_type"], "timeout");
        assert!(json["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("timeout_ms"));

        let overloaded = || ApiError::Overloaded {
            message: "queue full".into(),
            retry_after_s: 1,
        };
        let (status, retry, json) = body(overloaded().into_response_for(Wire::OpenAi));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(json["error"]["code"], "overloaded");
        let (_, retry, json) = body(overloaded().into_response_for(Wire::SystemOne));
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(json["detail"]["error_type"], "overloaded");
    }
}
