//! Cancellation of a request's work: its client went away, or its deadline passed.
//!
//! A request's model work outlives the HTTP handler that asked for it: the pipeline runs on a
//! blocking thread and its reads wait in the model worker's queue. When axum drops the
//! handler's future (the client closed the connection) or the request's deadline passes, that
//! work has nobody to answer any more, and on a busy server it delays everyone queued behind
//! it. A [`Cancel`] is the request's token: the frontend creates it (with the deadline, if
//! any) and sets it from a drop guard or at the deadline; the pipeline stops at its next step,
//! and the model worker drops the request's jobs before their next pass. Items of a batch
//! share their request's token.
//!
//! Tokens form a small tree: a request's token is a [`Cancel::child`] of the server's stop
//! token (the server's drain), so a server that stops ends every request's work the same
//! way a deadline does, and a request's plugin calls see it through
//! [`Cancel::plugin_session`].
//!
//! The token is one atomic: setting and checking it takes no lock, so the model worker checks
//! every job of a batch before each pass at no cost worth measuring. The deadline is checked
//! where the token is (an `Instant` comparison), so no timer has to reach the worker.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::EngineError;

/// Not cancelled.
const LIVE: u8 = 0;
/// The client went away.
const GONE: u8 = 1;
/// The deadline passed.
const LATE: u8 = 2;
/// The server is stopping.
const STOPPING: u8 = 3;

/// When a request must be answered by, and which setting said so (named by its 504).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadline {
    /// The instant past which the request's work is dropped.
    pub at: Instant,
    /// How long the request was given.
    pub after: Duration,
    /// The setting that chose it, as the message names it.
    pub setting: &'static str,
}

/// The server's `--request-timeout-ms`, as a 504's message names it.
pub const SERVER_SETTING: &str = "setting --request-timeout-ms / DECIDE_REQUEST_TIMEOUT_MS";

/// A timeout a request body asks for (`extra.timeout_ms`, `timeout_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requested {
    /// Milliseconds (at least 1).
    pub ms: u64,
    /// The body field that set it, as a 504's message names it (`extra.timeout_ms of the
    /// request`).
    pub field: &'static str,
}

impl Deadline {
    /// The deadline of a request that started at `start`: the shorter of the server's
    /// `--request-timeout-ms` (`server_ms`, 0: none) and the request's own timeout. A request
    /// may shorten the server's deadline, never lengthen it, so an operator's bound holds.
    pub fn of(server_ms: u64, requested: Option<Requested>, start: Instant) -> Option<Deadline> {
        let server = (server_ms > 0).then_some((server_ms, SERVER_SETTING));
        let own = requested.map(|r| (r.ms, r.field));
        let (ms, setting) = match (server, own) {
            (Some(s), Some(o)) => {
                if o.0 < s.0 {
                    o
                } else {
                    s
                }
            }
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => return None,
        };
        let after = Duration::from_millis(ms);
        Some(Deadline {
            at: start.checked_add(after)?,
            after,
            setting,
        })
    }

    /// The 504 a request past this deadline gets.
    pub fn error(&self) -> EngineError {
        EngineError::Timeout {
            message: format!(
                "the request did not finish within its deadline of {} ms ({}); its queued model work was dropped. Retry with a longer timeout, fewer questions or a shorter input, or when the server is less busy",
                self.after.as_millis(),
                self.setting
            ),
        }
    }
}

struct Inner {
    state: AtomicU8,
    deadline: Option<Deadline>,
    /// The server's stop token: a request's work also ends when the server stops.
    parent: Option<Cancel>,
}

/// A request's cancellation token (cheap to clone: clones share it). The default never
/// cancels: the server's own reads (self-check, calibration, tuning) have no client to lose.
#[derive(Clone, Default)]
pub struct Cancel(Option<Arc<Inner>>);

/// Why a request's work stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Its client closed the connection before the answer.
    Disconnected,
    /// The server is stopping (SIGTERM past its drain deadline, or before serving).
    ShuttingDown,
    /// Its deadline passed.
    Deadline(Deadline),
}

impl Cancel {
    /// A token for one request, past `deadline` (if any) cancelled by itself.
    pub fn new(deadline: Option<Deadline>) -> Cancel {
        Cancel(Some(Arc::new(Inner {
            state: AtomicU8::new(LIVE),
            deadline,
            parent: None,
        })))
    }

    /// A token for one request that is also cancelled when `self` (the server's stop token,
    /// [`Cancel::new`] with no deadline) is: a stopping server ends its requests' work.
    pub fn child(&self, deadline: Option<Deadline>) -> Cancel {
        Cancel(Some(Arc::new(Inner {
            state: AtomicU8::new(LIVE),
            deadline,
            parent: self.0.is_some().then(|| self.clone()),
        })))
    }

    /// Marks the server as stopping: this token and every [`Cancel::child`] of it cancel.
    pub fn shut_down(&self) {
        self.set(STOPPING);
    }

    /// Whether the request's work should stop: its client is gone or its deadline passed.
    pub fn is_cancelled(&self) -> bool {
        self.is_cancelled_at(Instant::now())
    }

    /// [`Cancel::is_cancelled`] by a clock read once for many tokens (the model worker checks
    /// every job of a batch before each pass).
    pub fn is_cancelled_at(&self, now: Instant) -> bool {
        let Some(inner) = &self.0 else {
            return false;
        };
        if inner.state.load(Ordering::Relaxed) != LIVE {
            return true;
        }
        if let Some(parent) = &inner.parent {
            if parent.is_cancelled_at(now) {
                self.set(STOPPING);
                return true;
            }
        }
        match &inner.deadline {
            Some(deadline) if now >= deadline.at => {
                self.set(LATE);
                true
            }
            _ => false,
        }
    }

    /// Why it was cancelled (none: it was not).
    pub fn reason(&self) -> Option<Reason> {
        if !self.is_cancelled() {
            return None;
        }
        let inner = self.0.as_ref()?;
        match (inner.state.load(Ordering::Relaxed), &inner.deadline) {
            (LATE, Some(deadline)) => Some(Reason::Deadline(deadline.clone())),
            (STOPPING, _) => Some(Reason::ShuttingDown),
            _ => Some(Reason::Disconnected),
        }
    }

    /// The error the request's remaining work ends with, once cancelled: the 504 of its
    /// deadline, or [`EngineError::Cancelled`] when its client is gone (nobody reads that one).
    pub fn error(&self) -> Option<EngineError> {
        Some(match self.reason()? {
            Reason::Deadline(deadline) => deadline.error(),
            Reason::Disconnected => EngineError::Cancelled {
                message: "the client closed the connection before the answer; its work was dropped"
                    .into(),
            },
            Reason::ShuttingDown => EngineError::NotReady {
                reason: "the server is shutting down; its work in flight was dropped. Retry on another replica or once it is back".into(),
                retry_after_s: Some(1),
            },
        })
    }

    /// A plugin session for this request's calls: a call in flight is interrupted within an
    /// epoch tick once the request is cancelled, and later calls are not made
    /// ([`crate::plugins::Session::stopping_when`]).
    pub fn plugin_session(&self) -> crate::plugins::Session {
        if self.0.is_none() {
            return crate::plugins::Session::new();
        }
        let cancel = self.clone();
        crate::plugins::Session::stopping_when(std::sync::Arc::new(move || cancel.is_cancelled()))
    }

    /// The request's deadline, if it has one.
    pub fn deadline(&self) -> Option<&Deadline> {
        self.0.as_ref()?.deadline.as_ref()
    }

    /// Marks the client as gone (unless the request was already cancelled for its deadline).
    pub fn disconnect(&self) {
        self.set(GONE);
    }

    /// Marks the deadline as passed (the frontend's timer fired; the worker would also see it
    /// by the clock).
    pub fn expire(&self) {
        self.set(LATE);
    }

    /// The first reason wins: a request that timed out and whose client then left stays a
    /// timeout.
    fn set(&self, state: u8) {
        if let Some(inner) = &self.0 {
            let _ = inner
                .state
                .compare_exchange(LIVE, state, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .field("deadline", &self.deadline().map(|d| d.after))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_token_never_cancels() {
        let never = Cancel::default();
        never.disconnect();
        never.expire();
        assert!(!never.is_cancelled());
        assert!(never.error().is_none());
    }

    #[test]
    fn a_disconnect_cancels_every_clone() {
        let cancel = Cancel::new(None);
        let item = cancel.clone();
        assert!(!item.is_cancelled());
        cancel.disconnect();
        assert!(item.is_cancelled());
        assert_eq!(item.reason(), Some(Reason::Disconnected));
        assert!(matches!(item.error(), Some(EngineError::Cancelled { .. })));
    }

    #[test]
    fn a_passed_deadline_cancels_by_the_clock_and_stays_a_timeout() {
        let start = Instant::now() - Duration::from_millis(10);
        let deadline = Deadline::of(5, None, start).unwrap();
        let cancel = Cancel::new(Some(deadline));
        assert!(cancel.is_cancelled(), "5 ms after a start 10 ms ago");
        cancel.disconnect();
        match cancel.error() {
            Some(EngineError::Timeout { message }) => {
                assert!(message.contains("5 ms"), "{message}");
                assert!(message.contains("--request-timeout-ms"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let later = Cancel::new(Deadline::of(60_000, None, Instant::now()));
        assert!(!later.is_cancelled());
    }

    #[test]
    fn a_stopping_server_cancels_its_requests_but_not_the_other_way() {
        let server = Cancel::new(None);
        let request = server.child(None);
        let other = server.child(None);
        request.disconnect();
        assert!(
            !server.is_cancelled(),
            "a request's client leaving stops only it"
        );
        assert!(!other.is_cancelled());
        server.shut_down();
        assert!(other.is_cancelled());
        assert_eq!(other.reason(), Some(Reason::ShuttingDown));
        assert!(matches!(other.error(), Some(EngineError::NotReady { .. })));
        assert_eq!(
            request.reason(),
            Some(Reason::Disconnected),
            "the first reason wins"
        );
        let orphan = Cancel::default().child(None);
        assert!(!orphan.is_cancelled());
    }

    #[test]
    fn a_request_may_shorten_the_servers_deadline_but_not_lengthen_it() {
        let now = Instant::now();
        let field = "extra.timeout_ms of the request";
        let shorter = Requested { ms: 50, field };
        let longer = Requested { ms: 90_000, field };
        let d = Deadline::of(60_000, Some(shorter), now).unwrap();
        assert_eq!((d.after.as_millis(), d.setting), (50, field));
        let d = Deadline::of(60_000, Some(longer), now).unwrap();
        assert_eq!((d.after.as_millis(), d.setting), (60_000, SERVER_SETTING));
        let d = Deadline::of(0, Some(longer), now).unwrap();
        assert_eq!(
            d.after.as_millis(),
            90_000,
            "no server deadline: the request's"
        );
        assert!(Deadline::of(0, None, now).is_none());
    }
}
