//! What the engine refuses or fails with, and where in a request it points.
//!
//! The engine knows no HTTP: an [`EngineError`] names the kind of failure (an invalid field,
//! a limit, not ready, overloaded, a deadline, ...) with a message that names the field, the
//! limit and the setting to change, and the server maps each kind to a status in one place.
//! A [`Loc`] is a path into the request body (field names and indices), kept so that errors
//! point at the field whatever the wire format renders them as.

use serde_json::Value;

/// One location in the request body: field names and array indices.
pub type Loc = Vec<LocPart>;

/// A segment of a [`Loc`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocPart {
    Field(String),
    Index(usize),
}

impl From<&str> for LocPart {
    fn from(field: &str) -> Self {
        LocPart::Field(field.to_string())
    }
}
impl From<String> for LocPart {
    fn from(field: String) -> Self {
        LocPart::Field(field)
    }
}
impl From<usize> for LocPart {
    fn from(index: usize) -> Self {
        LocPart::Index(index)
    }
}

/// Builds a [`Loc`] from mixed field names and indices: `loc!["questions", 2, "choices"]`.
#[macro_export]
macro_rules! loc {
    ($($part:expr),* $(,)?) => { vec![$($crate::error::LocPart::from($part)),*] };
}

/// Renders a location as a dotted path with bracketed indices: `questions[2].choices`.
pub fn dotted(loc: &[LocPart]) -> String {
    let mut path = String::new();
    for part in loc {
        match part {
            // A name a dot would make ambiguous (empty, or with a dot, bracket, quote or space)
            // is written in brackets as a JSON string: `questions[0][""]`, `schema["a.b"]`.
            LocPart::Field(name) if !is_plain_name(name) => {
                path.push('[');
                path.push_str(&Value::String(name.clone()).to_string());
                path.push(']');
            }
            LocPart::Field(name) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(name);
            }
            LocPart::Index(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// Can a field name stand in a dotted path as it is?
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '$' | '/' | '~' | '@' | ':'))
}

/// Everything that can fail a whole request (or one item of a batch: cloned when one refusal
/// stops several items, see [`crate::pipeline::Engine::decide_items`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// The request is malformed or breaks a rule; `loc` points at the field.
    #[error("{message}")]
    Invalid {
        loc: Loc,
        message: String,
        kind: &'static str,
    },
    /// The request is too large for a configured limit.
    #[error("{message}")]
    TooLarge { loc: Loc, message: String },
    /// The model or a plugin it needs is not loaded (yet).
    #[error("{reason}")]
    NotReady {
        reason: String,
        retry_after_s: Option<u64>,
    },
    /// The model worker's queue is full (`--max-queued-requests`, `--max-queued-tokens`):
    /// refused at once, before the request's work is queued.
    #[error("{message}")]
    Overloaded { message: String, retry_after_s: u64 },
    /// A rate of the caller's (its input tokens per minute) refused the work for now; the
    /// caller's limiter said so, with the headers that go with it.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_s: u64,
        headers: Vec<(String, String)>,
    },
    /// The request's deadline passed before it was answered; its queued work is dropped.
    #[error("{message}")]
    Timeout { message: String },
    /// The client is gone; the request's remaining work ends.
    #[error("{message}")]
    Cancelled { message: String },
    /// A bug: never caused by input.
    #[error("internal error: {0}")]
    Internal(String),
}

impl EngineError {
    /// An invalid field, with the conventional error kind.
    pub fn invalid(loc: Loc, message: impl Into<String>) -> Self {
        EngineError::Invalid {
            loc,
            message: message.into(),
            kind: "value_error",
        }
    }

    /// An invalid field whose message starts with its dotted path (`questions[2]: ...`).
    pub fn invalid_at(loc: &Loc, what: impl std::fmt::Display) -> Self {
        let path = dotted(loc);
        let message = if path.is_empty() {
            what.to_string()
        } else {
            format!("{path}: {what}")
        };
        EngineError::invalid(loc.clone(), message)
    }

    /// How a question refused with this error is classed ([`crate::pipeline::Refusal`]).
    pub fn refusal_kind(&self) -> RefusalKind {
        match self {
            EngineError::Invalid { .. } => RefusalKind::Invalid,
            EngineError::TooLarge { .. } => RefusalKind::TooLarge,
            EngineError::NotReady { .. } => RefusalKind::NotReady,
            EngineError::Overloaded { .. } => RefusalKind::Overloaded,
            EngineError::RateLimited { .. } => RefusalKind::RateLimited,
            EngineError::Timeout { .. } => RefusalKind::Timeout,
            EngineError::Cancelled { .. } => RefusalKind::Cancelled,
            EngineError::Internal(_) => RefusalKind::Internal,
        }
    }
}

/// The kind of a question's refusal, which decides the status a request gets when every one of
/// its questions is refused like this (the server maps kinds to statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The question, or what a plugin made of it, is not valid; or the model abstained.
    Invalid,
    /// The request asks for what cannot be read at all (a prompt over the model's context).
    BadRequest,
    /// Over a configured limit.
    TooLarge,
    /// A plugin or the model is not ready.
    NotReady,
    /// The model worker's queue is full.
    Overloaded,
    /// A rate of the caller's refused it for now.
    RateLimited,
    /// The request's deadline passed.
    Timeout,
    /// The client is gone.
    Cancelled,
    /// The model worker failed the pass that read it.
    EngineFailed,
    /// A bug.
    Internal,
}

impl RefusalKind {
    /// Whether the server failed it (not ready, overloaded, past the deadline, the engine or a
    /// bug: a 5xx over HTTP), rather than the question or the caller.
    pub fn is_server_side(self) -> bool {
        matches!(
            self,
            RefusalKind::NotReady
                | RefusalKind::Overloaded
                | RefusalKind::Timeout
                | RefusalKind::EngineFailed
                | RefusalKind::Internal
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_paths_mix_fields_and_indices() {
        assert_eq!(
            dotted(loc!["questions", 2, "choices", 0, "value"].as_slice()),
            "questions[2].choices[0].value"
        );
        assert_eq!(dotted(&[]), "");
        // Names a dot would make ambiguous, in brackets.
        assert_eq!(
            dotted(loc!["", "a.b", 0, "c d"].as_slice()),
            r#"[""]["a.b"][0]["c d"]"#
        );
        assert_eq!(
            dotted(loc!["schema", "a.b", "type"].as_slice()),
            r#"schema["a.b"].type"#
        );
    }
}
