//! The HTTP/1 accept loop: what `axum::serve` does, plus a header-read timeout.
//!
//! `axum::serve` builds hyper's connection with no timer, and hyper's `header_read_timeout`
//! needs one to take effect: a client could open connections and send their headers a byte
//! at a time, holding each socket (and its task) for as long as it liked. This loop serves
//! the same router through hyper's HTTP/1 builder with tokio's timer and
//! `--header-read-timeout-s`: a connection whose request headers are not complete in that
//! time (counted from when the server starts reading them, also between keep-alive
//! requests) is closed. Graceful shutdown is hyper-util's: once `shutdown` resolves, no new
//! connection is accepted, idle ones close, and the call returns when every connection in
//! flight has finished its response.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

/// Serves `router` on `listener` until `shutdown` resolves and the connections in flight end.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.as_mut() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = watched.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
