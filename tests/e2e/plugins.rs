//! Plugins replaced while the server runs, and plugins that misbehave.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::server::{scratch_dir, test_guest, Server};

fn predicate_body() -> serde_json::Value {
    json!({"model": "smol", "input": "The parcel arrived broken and I want my money back.",
           "questions": [{"type": "predicate", "instructions": "The customer wants a refund."}]})
}

#[test]
fn a_plugin_replaced_while_requests_run_fails_no_request() {
    let dir = scratch_dir("hot-swap");
    let server = Arc::new(Server::ready(&[
        "--plugins",
        dir.to_str().unwrap(),
        "--plugin-poll-ms",
        "100",
    ]));
    let before = server.post("/v1/decisions", &predicate_body());
    assert_eq!(before.status, 200, "{}", before.body);
    let p = before.body["answers"][0]["probability"].as_f64().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let load = {
        let (server, stop, sent) = (server.clone(), stop.clone(), sent.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let reply = server.post("/v1/decisions", &predicate_body());
                assert_eq!(
                    reply.status, 200,
                    "a request failed during the swap: {}",
                    reply.body
                );
                sent.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Write under a temporary name and rename, as an operator deploying a plugin would.
    let staged = dir.join("openai-predicate.wasm.tmp");
    std::fs::copy(test_guest("predicate-inverted"), &staged).unwrap();
    std::fs::rename(&staged, dir.join("openai-predicate.wasm")).unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let flipped = loop {
        let reply = server.post("/v1/decisions", &predicate_body());
        assert_eq!(reply.status, 200, "{}", reply.body);
        let q = reply.body["answers"][0]["probability"].as_f64().unwrap();
        // Concurrent requests share forward passes; with the f32 weights of the CPU default a
        // batched read differs from a lone one by float rounding (~1e-6), so 1e-4 tells the
        // old plugin (p) from the new one (1 - p).
        if (q - (1.0 - p)).abs() < 1e-4 {
            break q;
        }
        assert!(
            (q - p).abs() < 1e-4,
            "neither the old nor the new plugin: {q} vs {p}"
        );
        assert!(
            Instant::now() < deadline,
            "the new plugin was not picked up"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    stop.store(true, Ordering::Relaxed);
    load.join()
        .expect("no request failed while the plugin was swapped");
    assert!(sent.load(Ordering::Relaxed) > 0);
    assert!((flipped - (1.0 - p)).abs() < 1e-4);

    // A broken file never replaces the working plugin.
    std::fs::write(dir.join("openai-predicate.wasm"), b"\0asm garbage").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let after = server.post("/v1/decisions", &predicate_body());
    assert_eq!(after.status, 200, "{}", after.body);
    assert!((after.body["answers"][0]["probability"].as_f64().unwrap() - flipped).abs() < 1e-4);
}

#[test]
fn a_plugin_that_traps_loops_or_hogs_memory_fails_only_its_question() {
    let dir = scratch_dir("misbehaving");
    for name in ["trap-question", "spin-question", "hog-question"] {
        std::fs::copy(test_guest(name), dir.join(format!("openai-{name}.wasm"))).unwrap();
    }
    let server = Server::ready(&[
        "--plugins",
        dir.to_str().unwrap(),
        "--plugin-timeout-ms",
        "300",
    ]);
    for name in ["trap-question", "spin-question", "hog-question"] {
        let reply = server.post(
            "/v1/decisions",
            &json!({"model": "smol", "input": "A short note.", "questions": [
                {"type": "predicate", "name": "before", "instructions": "This is a note."},
                {"type": name, "name": "bad", "instructions": "misbehave"},
                {"type": "predicate", "name": "good", "instructions": "This is a note."}
            ]}),
        );
        assert_eq!(reply.status, 200, "{name}: {}", reply.body);
        assert_eq!(
            reply.body["answers"][1]["type"], "refusal",
            "{name}: {}",
            reply.body
        );
        let message = reply.body["answers"][1]["extra"]["error"]["message"]
            .as_str()
            .unwrap();
        assert!(
            message.contains(name),
            "the refusal names the plugin: {message}"
        );
        // The questions around it answer, the one after it (on the instance the request kept
        // from the one before) exactly like the one before.
        for i in [0, 2] {
            assert_eq!(
                reply.body["answers"][i]["type"], "predicate",
                "{name}: {}",
                reply.body
            );
        }
        assert_eq!(
            reply.body["answers"][0]["probability"], reply.body["answers"][2]["probability"],
            "{name}: {}",
            reply.body
        );
    }
    assert_eq!(server.get("/health").status, 200);
}
