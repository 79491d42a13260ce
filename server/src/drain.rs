//! Stopping without dropping work, and promptly: on SIGTERM (or Ctrl-C) the server stops
//! accepting connections, stops its background work (startup tuning and calibration) at once,
//! finishes the requests in flight within `--drain-timeout-s`, and exits.
//!
//! [`Drain`] counts the HTTP requests in flight (a middleware around every route) and says
//! whether the server is draining, so `/health` can answer 503 `draining` and a router takes
//! the replica out while its last requests finish. It also holds the two stop tokens every
//! piece of work hangs from: [`Drain::requests`], the parent of every request's [`Cancel`],
//! set when the drain deadline passes (the requests still running then end with a 503 and
//! their plugin calls and model reads stop within a pass), and [`Drain::background`], set at
//! the signal (background reads stop before their next pass). [`serve_until_drained`] runs
//! the graceful shutdown of [`crate::http_serve`] under the deadline: drained in time with no
//! startup work abandoned, the process exits 0; otherwise it exits 1 so a supervisor can tell
//! a clean stop from a cut one. Threads still busy are not waited for (the binary's runtime
//! shuts down with a short timeout), so the process is gone within the drain timeout whatever
//! a request or a plugin is doing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::cancel::Cancel;

/// Whether the server is draining, how many requests are in flight, and the stop tokens.
#[derive(Debug)]
pub struct Drain {
    draining: AtomicBool,
    in_flight: AtomicUsize,
    /// Parent of every request's token: set when the drain deadline passes.
    requests: Cancel,
    /// The token of the server's background work: set at the stop signal.
    background: Cancel,
    /// Startup (load, self-check, tuning, calibration) is still running.
    starting: AtomicBool,
}

impl Default for Drain {
    fn default() -> Self {
        let requests = Cancel::new(None);
        Drain {
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            background: requests.child(None),
            requests,
            starting: AtomicBool::new(true),
        }
    }
}

impl Drain {
    /// Has a stop signal arrived?
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// HTTP requests being answered now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The token of a request starting now (`deadline`: its own), cancelled also when the
    /// drain deadline passes.
    pub fn request_token(&self, deadline: Option<crate::cancel::Deadline>) -> Cancel {
        self.requests.child(deadline)
    }

    /// The token of the server's background work, cancelled at the stop signal.
    pub fn background_token(&self) -> Cancel {
        self.background.clone()
    }

    /// Startup finished (or failed): nothing of it is left to abandon.
    pub fn startup_done(&self) {
        self.starting.store(false, Ordering::Relaxed);
    }

    /// Whether startup work is still running.
    pub fn is_starting(&self) -> bool {
        self.starting.load(Ordering::Relaxed)
    }

    fn begin(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.background.shut_down();
    }
}

/// Counts a request in flight until its response is ready (or its client went away and the
/// handler was dropped).
pub async fn track(State(drain): State<Arc<Drain>>, request: Request, next: Next) -> Response {
    drain.in_flight.fetch_add(1, Ordering::Relaxed);
    struct Done(Arc<Drain>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let _done = Done(drain);
    next.run(request).await
}

/// How a server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every request in flight finished.
    Drained {
        /// Startup work (loading, self-check, tuning, calibration) was stopped unfinished.
        startup_abandoned: bool,
    },
    /// The drain deadline passed with this many requests still running; their work was
    /// cancelled.
    Cut { in_flight: usize },
}

/// How long the last step of a stop may take (the runtime's shutdown, which does not wait
/// for busy threads longer), out of the drain timeout: a tenth of it, at most half a second.
pub fn exit_grace(timeout: Duration) -> Duration {
    (timeout / 10).min(Duration::from_millis(500))
}

/// Serves until a stop signal, then drains within `timeout` (less [`exit_grace`], left for
/// the process to exit).
pub async fn serve_until_drained(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    drain: Arc<Drain>,
    timeout: Duration,
    signal: StopSignal,
    header_read_timeout: Duration,
) -> std::io::Result<Stopped> {
    let signalled = Arc::new(tokio::sync::Notify::new());
    let on_signal = {
        let drain = drain.clone();
        let signalled = signalled.clone();
        async move {
            signal.received().await;
            drain.begin();
            tracing::info!(
                in_flight = drain.in_flight(),
                starting = drain.is_starting(),
                timeout_s = timeout.as_secs_f64(),
                "stop signal: no new connections; background work stopped; finishing the requests in flight (setting --drain-timeout-s)"
            );
            signalled.notify_one();
        }
    };
    let server = crate::http_serve::serve(listener, router, header_read_timeout, on_signal);
    let deadline = async {
        signalled.notified().await;
        tokio::time::sleep(timeout.saturating_sub(exit_grace(timeout))).await;
    };
    let stopped = tokio::select! {
        served = server => served.map(|()| Stopped::Drained { startup_abandoned: drain.is_starting() })?,
        () = deadline => Stopped::Cut { in_flight: drain.in_flight() },
    };
    // Whatever still runs for a request (a plugin call, model reads) stops at its next check.
    drain.requests.shut_down();
    Ok(stopped)
}

/// The stop signals (SIGTERM, SIGINT), listened for from [`StopSignal::install`] on: a signal
/// that arrives before the server serves (while it loads) is kept, not fatal, so the server
/// stops the same way at any moment.
pub struct StopSignal {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignal {
    /// Starts listening (inside the runtime). Installed before the listening line is printed.
    pub fn install() -> std::io::Result<StopSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignal {
                terminate: signal(SignalKind::terminate())?,
                interrupt: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignal {})
    }

    async fn received(mut self) {
        #[cfg(unix)]
        tokio::select! { _ = self.terminate.recv() => {}, _ = self.interrupt.recv() => {} }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
