//! Readiness and stopping: decision requests get 503 with Retry-After until the model and
//! plugins are loaded; on SIGTERM the server finishes what is in flight and exits.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::Server;

/// A request that keeps the model busy for a few seconds on the test model: 24 questions over
/// a long input.
fn slow_request() -> Value {
    let input =
        "The parcel arrived late and the box was crushed; the customer wants a refund. ".repeat(40);
    let questions: Vec<Value> = (0..24)
        .map(|i| json!({"type": "predicate", "instructions": format!("The message mentions item {i}.")}))
        .collect();
    json!({"model": "smol", "input": input, "questions": questions})
}

/// Waits until `/health` counts `n` requests in flight (itself included).
fn wait_in_flight(server: &Server, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/health").body["in_flight"]
        .as_u64()
        .unwrap_or(0)
        < n
    {
        assert!(Instant::now() < deadline, "the slow request never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_finishes_the_requests_in_flight_then_exits_0() {
    let mut server = Server::ready(&["--drain-timeout-s", "120"]);
    let started = Instant::now();
    let reply = std::thread::scope(|scope| {
        let slow = scope.spawn(|| server.post("/v1/decisions", &slow_request()));
        wait_in_flight(&server, 2);
        server.signal("TERM");
        slow.join().expect("the slow request's thread")
    });
    assert_eq!(
        reply.status, 200,
        "the request in flight was finished: {}",
        reply.body
    );
    assert_eq!(reply.body["answers"].as_array().map(Vec::len), Some(24));
    let status = server
        .wait_exit(Duration::from_secs(60))
        .expect("the server exits once drained");
    assert!(status.success(), "drained in time: exit 0, got {status:?}");
    eprintln!("drained and exited after {:?}", started.elapsed());
}

#[test]
fn past_the_drain_timeout_the_rest_is_abandoned_and_the_exit_is_1() {
    let mut server = Server::ready(&["--drain-timeout-s", "0.2"]);
    let url = format!("{}/v1/decisions", server.base);
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            // The connection is closed under it: reqwest's blocking client panics on a
            // transport error through `post`, so send it by hand.
            reqwest::blocking::Client::new()
                .post(&url)
                .json(&slow_request())
                .send()
        });
        wait_in_flight(&server, 2);
        server.signal("TERM");
        let status = server
            .wait_exit(Duration::from_secs(30))
            .expect("the server exits at the drain deadline");
        assert_eq!(status.code(), Some(1), "cut short: exit 1, got {status:?}");
        // Its work was cancelled at the deadline: it gets no answer, or a 503 if its
        // handler saw the cancellation before the process was gone.
        match slow.join().unwrap() {
            Err(_) => {}
            Ok(response) => assert_eq!(
                response.status().as_u16(),
                503,
                "the abandoned request got no answer, or a 503"
            ),
        }
    });
}

#[test]
fn decisions_get_503_with_retry_after_until_ready() {
    let server = Server::start(&["--ready-delay-ms", "3000"]);
    let body = json!({"model": "smol", "input": "x", "questions": [{"type": "predicate", "instructions": "?"}]});
    let early = server.post("/v1/decisions", &body);
    assert_eq!(early.status, 503, "{}", early.body);
    assert!(early.headers.contains_key("retry-after"));
    let early_jev = server.post(
        "/v1/systemone",
        &json!({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}),
    );
    assert_eq!(early_jev.status, 503);
    assert!(early_jev.headers.contains_key("retry-after"));
    assert_eq!(server.get("/health").body["status"], "loading");
    server.wait_ready();
    assert_eq!(server.post("/v1/decisions", &body).status, 200);
}

#[test]
fn a_model_that_cannot_load_is_reported_not_crashed() {
    let dir = crate::server::scratch_dir("bad-model");
    let bogus = dir.join("bogus.gguf");
    std::fs::write(&bogus, b"not a gguf file").unwrap();
    let server = Server::start(&["--model", bogus.to_str().unwrap()]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let health = server.get("/health");
        if health.body["status"] == "failed" {
            assert!(
                health.body["reason"]
                    .as_str()
                    .unwrap()
                    .contains("bogus.gguf"),
                "{}",
                health.body
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", health.body);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let reply = server.post("/v1/decisions", &json!({"model": "x", "input": "x", "questions": [{"type": "predicate", "instructions": "?"}]}));
    assert_eq!(reply.status, 503);
}
