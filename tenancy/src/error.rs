//! What tenancy refuses, and why, in words a client can act on.
//!
//! Each variant names the kind of refusal, not an HTTP status: the server maps them to
//! statuses in one place (401, 403, 429 with `Retry-After`, 413, 500), so that this crate
//! stays free of any wire format.

/// A request tenancy will not let through.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refused {
    /// No key, or a key that is not (or no longer) valid.
    #[error("{message}")]
    Unauthorized { message: String },
    /// The caller is known but may not do this (a tenant's operation by the default tenant).
    #[error("{message}")]
    Forbidden { message: String },
    /// A tenant limit (a rate, its concurrent or queued requests) refuses the request for
    /// now. `headers` are OpenAI's `x-ratelimit-*` headers; `retry_after_s` is how long to
    /// wait.
    #[error("{message}")]
    RateLimited {
        message: String,
        retry_after_s: u64,
        headers: Vec<(String, String)>,
    },
    /// The request needs more than a limit allows in a whole minute: it can never pass.
    #[error("{message}")]
    TooLarge { message: String },
    /// A bug: never caused by input.
    #[error("internal error: {0}")]
    Internal(String),
}
