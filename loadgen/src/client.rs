//! Sending: the target server, one keep-alive connection, and a unit sent over several of them.
//!
//! A connection is a hyper HTTP/1.1 client connection (`hyper::client::conn::http1`) over a
//! TCP_NODELAY socket, owned by whoever sends on it: a closed-loop client owns its own, an
//! open-loop unit borrows some from a free list for its duration. There is no pooled client in
//! between, so a run opens exactly as many connections as it has requests in flight, and a
//! request's clock covers only its own exchange. A connection the server closed (or a request
//! that failed on it) is reopened on the next send. Each response body is read to its end, so
//! the server's full answer is part of the latency, and each request is bounded by a timeout so
//! a hung server ends a run instead of stalling it.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Body;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::workload::Workload;
use crate::Error;

/// What every request of a run shares: how to judge and time it.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The status that counts as success; anything else is an error.
    pub expect: StatusCode,
    /// A response header holding the server's own time in milliseconds (decide's
    /// `x-decide-server-ms`), collected into its own histogram.
    pub server_ms_header: Option<HeaderName>,
    /// Longest wait for one request (connect, send, whole response); past it the request is a
    /// `timeout` transport error and its connection is dropped.
    pub timeout: Duration,
}

/// A request with its target filled in, cloned into an `http::Request` per send.
#[derive(Debug, Clone)]
pub struct Prepared {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    pub decisions: u64,
}

impl Prepared {
    fn to_http(&self) -> http::Request<Full<Bytes>> {
        let mut request = http::Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// The server a run loads, with the workload's units prepared for it.
#[derive(Debug)]
pub struct Target {
    /// The URL as given, for reports.
    pub url: String,
    pub addr: SocketAddr,
    units: Vec<Vec<Prepared>>,
    widest: usize,
}

impl Target {
    /// Resolves `url` (`http://host:port[/prefix]`) and prepares every request of `workload`:
    /// the path is appended to the URL's prefix and a `Host` header added (hyper's connection
    /// API, unlike its pooled client, adds none).
    pub async fn new(url: &str, workload: &Workload) -> Result<Self, Error> {
        let bad = |message: &str| Error::Url {
            url: url.to_string(),
            message: message.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|_| bad("not a URL (want http://host:port)"))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad("only http:// is supported (no TLS)"));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        let addr = tokio::net::lookup_host((authority.host(), port))
            .await
            .map_err(|e| bad(&e.to_string()))?
            .next()
            .ok_or_else(|| bad("the host resolves to no address"))?;
        let host = HeaderValue::from_str(authority.as_str()).map_err(|_| bad("bad host"))?;
        let prefix = uri.path().trim_end_matches('/');
        let mut units = Vec::with_capacity(workload.units.len());
        for unit in &workload.units {
            let mut prepared = Vec::with_capacity(unit.requests.len());
            for request in &unit.requests {
                let uri: Uri = format!("{prefix}{}", request.path)
                    .parse()
                    .map_err(|_| bad(&format!("{prefix}{} is not a valid path", request.path)))?;
                let mut headers = request.headers.clone();
                headers.insert(HOST, host.clone());
                prepared.push(Prepared {
                    method: request.method.clone(),
                    uri,
                    headers,
                    body: request.body.clone(),
                    decisions: request.decisions,
                });
            }
            units.push(prepared);
        }
        Ok(Target {
            url: url.to_string(),
            addr,
            units,
            widest: workload.widest_unit(),
        })
    }

    /// The `n`th unit, round-robin over the workload.
    pub fn unit(&self, n: usize) -> &[Prepared] {
        &self.units[n % self.units.len()]
    }

    /// How many units the workload has.
    pub fn unit_count(&self) -> usize {
        self.units.len()
    }

    /// The most requests one unit sends at once.
    pub fn widest_unit(&self) -> usize {
        self.widest
    }
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A whole response arrived; `server` is the server-time header's value, if asked for.
    Response {
        status: u16,
        server: Option<Duration>,
    },
    /// No whole response: `connect`, `request` (failed while sending or awaiting the head),
    /// `body` (failed while reading the body) or `timeout`.
    Transport(&'static str),
}

/// One request's outcome and time.
#[derive(Debug, Clone)]
pub struct RequestResult {
    pub outcome: Outcome,
    /// Whether the response had the expected status.
    pub ok: bool,
    pub latency: Duration,
    /// The request's `decisions`, counted only when `ok`.
    pub decisions: u64,
}

/// One unit's requests and times.
#[derive(Debug, Clone)]
pub struct UnitResult {
    pub requests: Vec<RequestResult>,
    /// From the unit's due time to its last response.
    pub latency: Duration,
    /// From the unit's due time to its first request going out (open loop: the generator's own
    /// lateness; closed loop: zero).
    pub lag: Duration,
    /// When its last response ended.
    pub ended: Instant,
}

impl UnitResult {
    /// Whether every request of the unit succeeded.
    pub fn ok(&self) -> bool {
        self.requests.iter().all(|r| r.ok)
    }
}

/// One HTTP/1.1 keep-alive connection to one address, (re)opened when needed.
pub struct Conn {
    addr: SocketAddr,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// A connection that opens on its first use (or on `connect`).
    pub fn new(addr: SocketAddr) -> Self {
        Conn { addr, sender: None }
    }

    /// Opens the connection now, so a run can start with every connection ready.
    pub async fn connect(&mut self) -> std::io::Result<()> {
        let stream = TcpStream::connect(self.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        // The connection future does the socket's reading and writing; it ends when the sender
        // is dropped or the server closes.
        tokio::spawn(connection);
        self.sender = Some(sender);
        Ok(())
    }

    /// Sends one request and reads its whole response.
    pub async fn send(&mut self, request: &Prepared, settings: &Settings) -> RequestResult {
        let started = Instant::now();
        let outcome =
            match tokio::time::timeout(settings.timeout, self.exchange(request, settings)).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(kind)) => {
                    self.sender = None;
                    Outcome::Transport(kind)
                }
                Err(_) => {
                    self.sender = None;
                    Outcome::Transport("timeout")
                }
            };
        let ok = matches!(outcome, Outcome::Response { status, .. } if status == settings.expect.as_u16());
        RequestResult {
            outcome,
            ok,
            latency: started.elapsed(),
            decisions: request.decisions,
        }
    }

    async fn exchange(
        &mut self,
        request: &Prepared,
        settings: &Settings,
    ) -> Result<Outcome, &'static str> {
        let alive = match &mut self.sender {
            Some(sender) => sender.ready().await.is_ok(),
            None => false,
        };
        if !alive {
            self.connect().await.map_err(|_| "connect")?;
        }
        let sender = self.sender.as_mut().ok_or("connect")?;
        let response = sender
            .send_request(request.to_http())
            .await
            .map_err(|_| "request")?;
        let status = response.status().as_u16();
        let server = settings
            .server_ms_header
            .as_ref()
            .and_then(|name| response.headers().get(name))
            .and_then(|value| value.to_str().ok()?.trim().parse::<f64>().ok())
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0));
        drain(response.into_body()).await.map_err(|_| "body")?;
        Ok(Outcome::Response { status, server })
    }
}

/// Sends a unit's requests at once, one per connection (`conns` holds at least as many), and
/// times the unit from `due`.
pub async fn send_unit(
    conns: &mut [Conn],
    unit: &[Prepared],
    settings: &Settings,
    due: Instant,
) -> UnitResult {
    assert!(conns.len() >= unit.len(), "a connection per request");
    let lag = due.elapsed();
    let requests = futures_util::future::join_all(
        conns
            .iter_mut()
            .zip(unit)
            .map(|(conn, request)| conn.send(request, settings)),
    )
    .await;
    let ended = Instant::now();
    UnitResult {
        requests,
        latency: ended - due,
        lag,
        ended,
    }
}

/// Reads a body to its end without keeping it (the trivial server reads request bodies so too).
pub async fn drain<B: Body + Unpin>(mut body: B) -> Result<u64, B::Error> {
    let mut bytes = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            bytes += bytes::Buf::remaining(&data) as u64;
        }
    }
    Ok(bytes)
}
