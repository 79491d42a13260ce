//! The trivial server that a run's ceiling is measured against: hyper on loopback, answering
//! every request with a small fixed JSON body after reading the whole request body.
//!
//! It does as little as an HTTP server can while still doing what a real one must (parse the
//! request, read its body, write a response), so a run against it measures the generator's own
//! maximum for that workload, its bodies included. It runs on a runtime of its own, on its own
//! threads, so the generator's runtime is configured exactly as in the real run; on a machine
//! with fewer cores than both runtimes' threads the two share the cores, and the ceiling is then
//! a lower bound of the generator's maximum.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::thread::JoinHandle;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;
use tokio::sync::oneshot;

use crate::client::drain;
use crate::Error;

/// The fixed answer.
const BODY: &[u8] = br#"{"ok":true}"#;

/// A running trivial server; dropping it stops the server and its threads.
pub struct Trivial {
    /// Where it listens (127.0.0.1, a free port).
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Trivial {
    /// Starts a server on `threads` threads of its own that answers `status` to everything.
    pub fn start(threads: usize, status: StatusCode) -> Result<Self, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("trivial")
            .enable_all()
            .build()
            .map_err(Error::Trivial)?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("trivial-main".into())
            .spawn(move || {
                runtime.block_on(async move {
                    match listen() {
                        Ok((listener, addr)) => {
                            let _ = ready_tx.send(Ok(addr));
                            serve(listener, status, stopped).await;
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                });
            })
            .map_err(Error::Trivial)?;
        let addr = ready_rx
            .recv()
            .map_err(|_| Error::Trivial(std::io::Error::other("server thread ended")))?
            .map_err(Error::Trivial)?;
        Ok(Trivial {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The URL to give a run.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Trivial {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A loopback listener with a deep backlog, so a thousand clients connecting at once are not
/// held back by SYN retries (std's and tokio's `bind` listen with 1024 or fewer).
fn listen() -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    let listener = socket.listen(4096)?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

async fn serve(
    listener: tokio::net::TcpListener,
    status: StatusCode,
    mut stopped: oneshot::Receiver<()>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: keep serving the connections we have,
                // and let some close before accepting again.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = &mut stopped => return,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(move |request: http::Request<Incoming>| async move {
                // A body that breaks off is the client's problem; answer regardless.
                let _ = drain(request.into_body()).await;
                let mut response = http::Response::new(Full::new(Bytes::from_static(BODY)));
                *response.status_mut() = status;
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Ok::<_, Infallible>(response)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
