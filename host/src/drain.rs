//! Stopping without dropping work: on SIGTERM (or Ctrl-C) the server stops accepting
//! connections, finishes the requests in flight within `--drain-timeout-s`, and exits.
//!
//! [`Drain`] counts the HTTP requests in flight (a middleware around every route) and says
//! whether the server is draining, so `/health` can answer 503 `draining` and a router takes
//! the replica out while its last requests finish. [`serve_until_drained`] runs the graceful
//! shutdown of [`crate::http_serve`] under the deadline: drained in time, the process exits 0; past it, the
//! requests still running are abandoned, logged, and the process exits 1 so a supervisor can
//! tell a clean stop from a cut one.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// Whether the server is draining, and how many requests are in flight.
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    in_flight: AtomicUsize,
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

    fn begin(&self) {
        self.draining.store(true, Ordering::Relaxed);
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
    Drained,
    /// The drain deadline passed with this many requests still running.
    Cut { in_flight: usize },
}

/// Serves until a stop signal, then drains within `timeout`.
pub async fn serve_until_drained(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    drain: Arc<Drain>,
    timeout: Duration,
    header_read_timeout: Duration,
) -> std::io::Result<Stopped> {
    let signalled = Arc::new(tokio::sync::Notify::new());
    let on_signal = {
        let drain = drain.clone();
        let signalled = signalled.clone();
        async move {
            stop_signal().await;
            drain.begin();
            tracing::info!(
                in_flight = drain.in_flight(),
                timeout_s = timeout.as_secs_f64(),
                "stop signal: no new connections; finishing the requests in flight (setting --drain-timeout-s)"
            );
            signalled.notify_one();
        }
    };
    let server = crate::http_serve::serve(listener, router, header_read_timeout, on_signal);
    let deadline = async {
        signalled.notified().await;
        tokio::time::sleep(timeout).await;
    };
    tokio::select! {
        served = server => served.map(|()| Stopped::Drained),
        () = deadline => Ok(Stopped::Cut { in_flight: drain.in_flight() }),
    }
}

async fn stop_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        if let Ok(mut signal) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            signal.recv().await;
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = terminate => {} }
}
