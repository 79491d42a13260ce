//! Nothing a client sends or does takes the server down (issue #16): a client that goes away
//! cancels its work, a request past its deadline gets 504 and its work is dropped, an
//! overloaded server sheds with 503 + Retry-After at once and `/health` keeps answering, and a
//! failed pass fails only its batch.
//!
//! Work is measured in model calls (`decide_model_calls_total`, every call into the model the
//! worker makes), not in wall time: with the prefix cache off, the same request always takes
//! the same calls, so "the cancelled work did not run" is a count. Waits are long (a loaded
//! 2-core machine reads a 512-token prefill chunk of SmolLM2 in 1-5 s); the only timing
//! assertions are that a 503 comes back while the slow request it was shed behind still runs,
//! and a generous bound on `/health`.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::{Reply, Server};

/// Long enough that nothing here waits for ever, short enough to fail a broken server in
/// reasonable time.
const PATIENCE: Duration = Duration::from_secs(180);

/// A long input: `lines` lines of a support thread (~20 tokens each).
fn thread(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "Line {i}: the customer wrote again about order {} and the parcel that never came.",
                i * 7
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The slow request: 4 questions over a ~1,200-token input. Its shared prefix is prefilled
/// in three 512-row chunks and its questions read in one pass: four model calls, seconds of
/// CPU, and (with the prefix cache off) the same four calls every time.
fn slow() -> Value {
    json!({
        "model": "smol",
        "input": thread(60),
        "questions": (0..4)
            .map(|i| json!({"type": "predicate", "instructions": format!("Statement {i}: the customer is angry.")}))
            .collect::<Vec<_>>(),
    })
}

/// A quick request: one question over one sentence (one model call).
fn quick() -> Value {
    json!({
        "model": "smol",
        "input": "The parcel arrived broken and the customer wants a refund.",
        "questions": [{"type": "predicate", "instructions": "The customer wants a refund."}],
    })
}

/// The Jev twin of [`quick`].
fn quick_jev() -> Value {
    json!({
        "state": "The parcel arrived broken and the customer wants a refund.",
        "questions": {"refund": {"type": "noul", "instructions": "The customer wants a refund."}},
    })
}

/// A field-schema request: two fields over one sentence (one job: prefill, then one pass).
fn quick_fields() -> Value {
    json!({
        "context": "The parcel arrived broken and the customer wants a refund.",
        "schema": {
            "refund": {"type": "boolean", "description": "Does the customer want a refund?"},
            "team": {"type": "enum", "description": "Which team?", "choices": ["billing", "shipping"]},
        },
    })
}

/// A request on a connection of its own that the test closes without reading the answer
/// (dropping it closes the socket), as a client that gives up does.
struct Gone(#[allow(dead_code)] TcpStream);

impl Gone {
    fn post(server: &Server, path: &str, body: &Value) -> Gone {
        let address = server.base.trim_start_matches("http://").to_string();
        let mut stream = TcpStream::connect(&address).expect("connect");
        let body = body.to_string();
        write!(
            stream,
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send the request");
        stream.flush().expect("flush");
        Gone(stream)
    }
}

/// Waits until `done`, failing with `what` after [`PATIENCE`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "not within {PATIENCE:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Jobs waiting for or being read by the model worker, as `/health` reports them.
fn queued(server: &Server) -> u64 {
    let health = server.get("/health");
    assert_eq!(health.status, 200, "{}", health.body);
    health.body["queue"]["requests"]
        .as_u64()
        .unwrap_or_else(|| panic!("no queue depth in /health: {}", health.body))
}

fn calls(server: &Server) -> f64 {
    server.metric("decide_model_calls_total")
}

fn assert_ok(reply: &Reply) {
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// The model calls `body` takes alone on an idle server (the prefix cache off).
fn calls_alone(server: &Server, body: &Value) -> f64 {
    let before = calls(server);
    assert_ok(&server.post("/v1/decisions", body));
    calls(server) - before
}

#[test]
fn a_client_that_disconnects_cancels_its_queued_and_running_work() {
    let server = Server::ready(&["--prefix-cache-mib", "0"]);
    let full = calls_alone(&server, &slow());
    assert!(full >= 3.0, "the slow request takes several calls: {full}");

    // Clients queued behind a slow request leave: their jobs are dropped unread, so the
    // worker runs the slow request's calls and not one more.
    let victims = 3;
    let before = calls(&server);
    std::thread::scope(|scope| {
        let blocker = scope.spawn(|| server.post("/v1/decisions", &slow()));
        wait_until("the slow request reaches the model worker", || {
            queued(&server) >= 1
        });
        let gone: Vec<Gone> = (0..victims)
            .map(|_| Gone::post(&server, "/v1/decisions", &quick()))
            .collect();
        wait_until("the victims' jobs are queued behind it", || {
            queued(&server) == 1 + victims
        });
        drop(gone);
        wait_until("the server sees the clients leave", || {
            server.metric("decide_disconnected_requests_total") == victims as f64
        });
        assert_ok(&blocker.join().unwrap());
    });
    wait_until("the queue drains", || queued(&server) == 0);
    assert_eq!(
        server.metric("decide_cancelled_jobs_total"),
        victims as f64,
        "every victim's job was dropped"
    );
    assert_eq!(
        calls(&server) - before,
        full,
        "only the slow request's calls ran, none for the cancelled jobs"
    );

    // A client that leaves while its own request is being read: the worker stops it before
    // its next call.
    let before = calls(&server);
    let gone = Gone::post(&server, "/v1/decisions", &slow());
    wait_until("its first model call starts", || calls(&server) > before);
    drop(gone);
    wait_until("the worker stops the job", || {
        server.metric("decide_cancelled_jobs_total") == (victims + 1) as f64
    });
    wait_until("the queue drains", || queued(&server) == 0);
    let ran = calls(&server) - before;
    assert!(
        ran < full,
        "{ran} of its {full} calls ran: the rest were dropped"
    );
    assert_eq!(server.metric("decide_disconnected_requests_total"), 4.0);

    // The server answers the next request as ever, and counted no failure.
    assert_ok(&server.post("/v1/decisions", &quick()));
    assert_eq!(server.metric("decide_engine_failures_total"), 0.0);
}

#[test]
fn a_request_past_its_deadline_gets_504_and_its_work_is_dropped() {
    let server = Server::ready(&["--prefix-cache-mib", "0"]);
    let full = calls_alone(&server, &slow());

    // OpenAI's format: `extra.timeout_ms`.
    let mut body = slow();
    body["extra"] = json!({"timeout_ms": 1000});
    let before = calls(&server);
    let reply = server.post("/v1/decisions", &body);
    assert_eq!(reply.status, 504, "{}", reply.body);
    let error = &reply.body["error"];
    assert_eq!(error["type"], "timeout", "{}", reply.body);
    assert_eq!(error["code"], "timeout", "{}", reply.body);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("1000 ms") && message.contains("extra.timeout_ms"),
        "{message}"
    );
    wait_until("the timed-out work leaves the queue", || {
        queued(&server) == 0
    });
    let ran = calls(&server) - before;
    assert!(
        ran < full,
        "{ran} of its {full} calls ran after the deadline"
    );

    // The Jev format: a top-level `timeout_ms`, the error as an object.
    let jev = json!({
        "state": thread(60),
        "questions": {"angry": {"type": "noul", "instructions": "The customer is angry."},
                      "refund": {"type": "noul", "instructions": "The customer wants a refund."}},
        "timeout_ms": 1000,
    });
    let reply = server.post("/v1/systemone", &jev);
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert_eq!(
        reply.body["detail"]["error_type"], "timeout",
        "{}",
        reply.body
    );
    let message = reply.body["detail"]["message"].as_str().unwrap();
    assert!(message.contains("timeout_ms"), "{message}");

    // The field-schema format: a top-level `timeout_ms`, the error in Jev's shape.
    let mut fields = quick_fields();
    fields["context"] = json!(thread(60));
    fields["timeout_ms"] = json!(1000);
    let reply = server.post("/v1/fields", &fields);
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert_eq!(
        reply.body["detail"]["error_type"], "timeout",
        "{}",
        reply.body
    );

    // A timeout that is not whole milliseconds is the caller's mistake.
    let mut bad = quick();
    bad["extra"] = json!({"timeout_ms": -5});
    let reply = server.post("/v1/decisions", &bad);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.body["error"]["param"], "extra.timeout_ms");

    assert_eq!(server.metric("decide_timed_out_requests_total"), 3.0);
    wait_until("the queue drains", || queued(&server) == 0);
    assert_ok(&server.post("/v1/decisions", &quick()));
    assert_ok(&server.post("/v1/systemone", &quick_jev()));
    assert_ok(&server.post("/v1/fields", &quick_fields()));

    // The server's own deadline applies to every request and is named by its flag; a request
    // cannot lengthen it. It is 10 s, so that a quick request meets it on a loaded machine,
    // and the slow request reads a ~6,000-token input (12 prefill chunks, 20 s or more).
    drop(server);
    let server = Server::ready(&["--prefix-cache-mib", "0", "--request-timeout-ms", "10000"]);
    let mut body = slow();
    body["input"] = json!(thread(300));
    body["extra"] = json!({"timeout_ms": 600_000});
    let reply = server.post("/v1/decisions", &body);
    assert_eq!(reply.status, 504, "{}", reply.body);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("10000 ms") && message.contains("--request-timeout-ms"),
        "{message}"
    );
    wait_until("the queue drains", || queued(&server) == 0);
    assert_ok(&server.post("/v1/decisions", &quick()));
    assert_eq!(server.metric("decide_timed_out_requests_total"), 1.0);
}

#[test]
fn an_overloaded_server_sheds_with_503_at_once_and_health_answers() {
    let server = Server::ready(&["--prefix-cache-mib", "0", "--max-queued-requests", "1"]);
    let health = server.get("/health");
    assert_eq!(health.body["queue"]["max_requests"], 1, "{}", health.body);
    assert_eq!(
        health.body["queue"]["max_tokens"], 1_000_000,
        "{}",
        health.body
    );
    std::thread::scope(|scope| {
        let blocker = scope.spawn(|| server.post("/v1/decisions", &slow()));
        wait_until("the slow request reaches the model worker", || {
            queued(&server) >= 1
        });
        // Everything else is refused at once, in every format, while the slow one runs.
        let requests = [
            ("/v1/decisions", quick()),
            ("/v1/decisions", quick()),
            ("/v1/decisions", quick()),
            ("/v1/systemone", quick_jev()),
            ("/v1/fields", quick_fields()),
        ];
        let shed: Vec<(&str, Reply)> = std::thread::scope(|inner| {
            let sent: Vec<_> = requests
                .iter()
                .map(|(path, body)| {
                    let server = &server;
                    (*path, inner.spawn(move || server.post(path, body)))
                })
                .collect();
            sent.into_iter()
                .map(|(path, handle)| (path, handle.join().unwrap()))
                .collect()
        });
        assert!(
            !blocker.is_finished(),
            "the refusals came back before the slow request finished"
        );
        for (path, reply) in &shed {
            assert_eq!(reply.status, 503, "{path}: {}", reply.body);
            let retry: u64 = reply.headers["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=60).contains(&retry), "retry-after {retry}");
            let message = match *path {
                "/v1/decisions" => {
                    assert_eq!(reply.body["error"]["code"], "overloaded", "{}", reply.body);
                    reply.body["error"]["message"].as_str().unwrap()
                }
                _ => {
                    assert_eq!(
                        reply.body["detail"]["error_type"], "overloaded",
                        "{}",
                        reply.body
                    );
                    reply.body["detail"]["message"].as_str().unwrap()
                }
            };
            assert!(message.contains("--max-queued-requests"), "{message}");
        }
        // /health answers quickly meanwhile and shows the queue.
        let mut samples = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let health = server.get("/health");
            samples.push(started.elapsed());
            assert_eq!(health.status, 200, "{}", health.body);
            assert_eq!(health.body["queue"]["requests"], 1, "{}", health.body);
            assert!(health.body["queue"]["tokens"].as_u64().unwrap() > 1000);
        }
        samples.sort();
        assert!(
            samples[2] < Duration::from_millis(500),
            "/health took {samples:?}"
        );
        assert!(
            samples[4] < Duration::from_secs(2),
            "/health took {samples:?}"
        );
        assert_ok(&blocker.join().unwrap());
    });
    assert_eq!(server.metric("decide_shed_requests_total"), 5.0);

    // A batch's items race for the one place: the first holds it while the others are
    // refused, each alone (503 `overloaded`), the batch itself answered.
    let items: Vec<Value> = (0..8)
        .map(|i| json!({"state": format!("Order {i}: the parcel arrived broken; the customer wants a refund.")}))
        .collect();
    let batch = json!({
        "questions": {"refund": {"type": "noul", "instructions": "The customer wants a refund."}},
        "items": items,
    });
    let reply = server.post("/v1/systemone/batch", &batch);
    assert_ok(&reply);
    let items = reply.body["items"].as_array().unwrap();
    let answered = items.iter().filter(|i| i.get("answers").is_some()).count();
    let refused: Vec<&Value> = items.iter().filter_map(|i| i.get("error")).collect();
    assert!(answered >= 1, "{}", reply.body);
    assert!(!refused.is_empty(), "{}", reply.body);
    for error in refused {
        assert_eq!(error["status"], 503, "{error}");
        assert_eq!(error["code"], "overloaded", "{error}");
    }

    // Once the queue has room the server answers as ever.
    wait_until("the queue drains", || queued(&server) == 0);
    assert_ok(&server.post("/v1/decisions", &quick()));
    assert_ok(&server.post("/v1/systemone", &quick_jev()));
}

/// Posts `body` to `path` until a reply is not a 200, at most `tries` times; that reply.
fn first_failure(server: &Server, path: &str, body: &Value, tries: usize) -> Reply {
    for _ in 0..tries {
        let reply = server.post(path, body);
        if reply.status != 200 {
            return reply;
        }
    }
    panic!("{tries} requests to {path} in a row succeeded");
}

/// An `engine_error` 502, in whichever shape the format gives it.
fn assert_engine_error(reply: &Reply) {
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert!(
        reply.body.to_string().contains("engine_error"),
        "{}",
        reply.body
    );
}

#[test]
fn a_failed_pass_fails_only_its_batch_and_the_server_keeps_serving() {
    // Every third batch of the worker panics. Each request here is one job, read in a batch
    // of its own: after a failure, the next two requests succeed and the third fails.
    let server = Server::ready(&["--inject-fault", "panic-every:3"]);
    let failed = first_failure(&server, "/v1/decisions", &quick(), 3);
    assert_engine_error(&failed);
    assert_eq!(
        failed.body["error"]["type"], "server_error",
        "{}",
        failed.body
    );
    let message = failed.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("panicked"), "{message}");
    assert_ok(&server.post("/v1/decisions", &quick()));
    assert_ok(&server.post("/v1/systemone", &quick_jev()));
    // The field-schema format calls it an engine failure too: 502.
    assert_engine_error(&server.post("/v1/fields", &quick_fields()));
    assert_ok(&server.post("/v1/decisions", &quick()));
    assert_ok(&server.post("/v1/fields", &quick_fields()));
    assert_eq!(server.metric("decide_engine_failures_total"), 2.0);
    assert_eq!(
        server.metric("decide_worker_restarts_total"),
        0.0,
        "a pass's panic is caught in the pass"
    );
    assert_eq!(queued(&server), 0, "failed jobs give their places back");
    drop(server);

    // A pass that returns an error (as a CUDA error does) fails the same way.
    let server = Server::ready(&["--inject-fault", "error-every:2"]);
    let failed = first_failure(&server, "/v1/systemone", &quick_jev(), 2);
    assert_engine_error(&failed);
    assert_ok(&server.post("/v1/systemone", &quick_jev()));
    assert_engine_error(&server.post("/v1/decisions", &quick()));
    assert_ok(&server.post("/v1/decisions", &quick()));
}
