//! Readiness: decision requests get 503 with Retry-After until the model and plugins are loaded.

use serde_json::json;

use crate::server::Server;

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
