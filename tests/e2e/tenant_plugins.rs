//! Each tenant's own plugins, uploaded while the server runs: the HTTP lifecycle (upload,
//! use, versions, replace, rollback, delete), isolation between tenants, bad uploads, the
//! tenant's own plugin limits, a hot swap under load, and crash safety (kill -9 during
//! uploads, restart, every plugin the old or the new version and answering).
//!
//! Run: `cargo test --release -p decide --test e2e tenant_plugins -- --nocapture` (the hot
//! swap and the crash loop print their figures).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use decide_tenancy::TenantLimits;
use serde_json::{json, Value};

use crate::server::{scratch_dir, test_guest, Reply, Server};
use crate::tenant_fixture::{seed_tenant, Seeded};

const WASM: &str = "application/wasm";

fn guest_bytes(name: &str) -> Vec<u8> {
    std::fs::read(test_guest(name)).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    decide_plugins::runtime::sha256_hex(bytes)
}

/// Starts a server on `data_dir` (with an operator key, so the default tenant can be tested).
fn start(data_dir: &Path, extra: &[&str]) -> Server {
    let mut args = vec![
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--api-key",
        "operator-key",
    ];
    args.extend_from_slice(extra);
    Server::ready(&args)
}

fn upload(server: &Server, key: &str, name: &str, bytes: Vec<u8>) -> Reply {
    server.put_bytes_as(&format!("/v1/plugins/{name}"), key, bytes, WASM)
}

fn listed(server: &Server, key: &str) -> Vec<Value> {
    let reply = server.send_as("GET", "/v1/plugins", key, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["plugins"].as_array().unwrap().clone()
}

fn entry(list: &[Value], name: &str) -> Option<Value> {
    list.iter().find(|p| p["name"] == name).cloned()
}

fn predicate_body(questions: usize) -> Value {
    let question = json!({"type": "predicate", "instructions": "The customer wants a refund."});
    json!({"model": "smol", "input": "The parcel arrived broken and I want my money back.",
           "questions": vec![question; questions]})
}

/// The probability of `predicate_body(1)` as `key` sees it.
fn predicate_p(server: &Server, key: &str) -> f64 {
    let reply = server.post_as("/v1/decisions", key, &predicate_body(1));
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["answers"][0]["probability"].as_f64().unwrap()
}

/// Concurrent requests share forward passes; a batched read differs from a lone one by float
/// rounding (~1e-6), so 1e-4 tells the built-in (p) from `predicate-inverted` (1 - p).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-4
}

fn error_message(reply: &Reply) -> String {
    reply.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn tenant_plugins_lifecycle_isolation_versions_rollback_delete() {
    let data = scratch_dir("tenant-plugins-lifecycle");
    let a = seed_tenant(&data, "team-a", TenantLimits::default());
    let b = seed_tenant(&data, "team-b", TenantLimits::default());
    let server = start(&data, &[]);
    let p = predicate_p(&server, &b.key);
    assert!(
        (p - 0.5).abs() > 0.05,
        "the test needs p away from 0.5: {p}"
    );

    // A third-party question type, used by A through `{"type": "sentiment"}`.
    let sentiment = guest_bytes("openai-sentiment");
    let reply = upload(&server, &a.key, "openai-sentiment", sentiment.clone());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["version"], 1, "{}", reply.body);
    assert_eq!(reply.body["kind"], "question-type");
    assert_eq!(reply.body["source"], "tenant");
    assert_eq!(reply.body["sha256"], sha256(&sentiment));
    assert_eq!(reply.body["size"], sentiment.len());
    assert_eq!(reply.body["plugin_version"], "1.0.0");
    let ask = json!({"model": "smol", "input": "The courier was rude and the box was soaked.",
                     "questions": [{"type": "sentiment", "aspect": "the delivery", "levels": 5}]});
    let reply = server.post_as("/v1/decisions", &a.key, &ask);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = &reply.body["answers"][0];
    assert_eq!(answer["type"], "sentiment", "{answer}");
    let distribution: Vec<f64> = answer["distribution"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(distribution.len(), 5, "{answer}");
    crate::assert_distribution(&distribution);
    let score = answer["score"].as_f64().unwrap();
    assert!((-1.0..=1.0).contains(&score), "{answer}");
    assert!(answer["sentiment"].is_string(), "{answer}");

    // B neither sees nor can use it.
    let reply = server.post_as("/v1/decisions", &b.key, &ask);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        error_message(&reply).contains("openai-sentiment"),
        "{}",
        reply.body
    );
    assert!(entry(&listed(&server, &b.key), "openai-sentiment").is_none());
    let seen = entry(&listed(&server, &a.key), "openai-sentiment").expect("A lists its plugin");
    assert_eq!(seen["source"], "tenant", "{seen}");
    assert_eq!(seen["upload_version"], 1, "{seen}");
    // Nor does the default tenant (the operator's key).
    assert!(entry(&listed(&server, "operator-key"), "openai-sentiment").is_none());
    let builtin = entry(&listed(&server, &b.key), "openai-predicate").unwrap();
    assert_eq!(builtin["source"], "builtin", "{builtin}");

    // A replaces a built-in for itself only: version 1 inverts, version 2 is the built-in's
    // component again.
    let inverted = guest_bytes("predicate-inverted");
    let original = guest_bytes("openai-predicate");
    let reply = upload(&server, &a.key, "openai-predicate", inverted.clone());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["version"], 1);
    assert!(close(predicate_p(&server, &a.key), 1.0 - p));
    assert!(
        close(predicate_p(&server, &b.key), p),
        "B keeps the built-in"
    );
    let reply = upload(&server, &a.key, "openai-predicate", original.clone());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["version"], 2);
    assert!(close(predicate_p(&server, &a.key), p));

    let reply = server.send_as("GET", "/v1/plugins/openai-predicate/versions", &a.key, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let versions = reply.body["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 2, "{}", reply.body);
    assert_eq!(versions[0]["sha256"], sha256(&inverted));
    assert_eq!(versions[0]["tenant_id"], a.id.as_str());
    assert_eq!(versions[0]["active"], false);
    assert_eq!(versions[1]["sha256"], sha256(&original));
    assert_eq!(versions[1]["active"], true);
    let reply = server.send_as("GET", "/v1/plugins/openai-predicate/versions", &b.key, None);
    assert_eq!(
        reply.status, 404,
        "B has no versions of A's plugin: {}",
        reply.body
    );

    // Rollback to version 1.
    let path = "/v1/plugins/openai-predicate/rollback";
    let reply = server.post_as(path, &a.key, &json!({"version": 1}));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["version"], 1);
    assert_eq!(reply.body["sha256"], sha256(&inverted));
    assert!(close(predicate_p(&server, &a.key), 1.0 - p));
    let reply = server.post_as(path, &a.key, &json!({"version": 9}));
    assert_eq!(reply.status, 404, "{}", reply.body);
    let reply = server.post_as(path, &a.key, &json!({"version": "one"}));
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.body["error"]["param"], "version", "{}", reply.body);

    // Delete: the built-in serves A again; deleting again is 404.
    let reply = server.send_as("DELETE", "/v1/plugins/openai-predicate", &a.key, None);
    assert_eq!(reply.status, 204, "{}", reply.body);
    assert!(close(predicate_p(&server, &a.key), p));
    let back = entry(&listed(&server, &a.key), "openai-predicate").unwrap();
    assert_eq!(back["source"], "builtin", "{back}");
    let reply = server.send_as("DELETE", "/v1/plugins/openai-predicate", &a.key, None);
    assert_eq!(reply.status, 404, "{}", reply.body);

    // Who may upload, and what.
    let reply = upload(&server, "operator-key", "openai-x", sentiment.clone());
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert!(
        error_message(&reply).contains("admin API"),
        "{}",
        reply.body
    );
    let reply = server.put_bytes_as("/v1/plugins/openai-x", "not-a-key", sentiment.clone(), WASM);
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = server.put_bytes_as(
        "/v1/plugins/openai-x",
        &a.key,
        sentiment.clone(),
        "application/octet-stream",
    );
    assert_eq!(reply.status, 415, "{}", reply.body);
    assert!(
        error_message(&reply).contains("application/wasm"),
        "{}",
        reply.body
    );
    let reply = upload(&server, &a.key, "Bad%20Name", sentiment.clone());
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.body["error"]["param"], "name", "{}", reply.body);
    assert_eq!(server.get("/health").status, 200);
}

#[test]
fn tenant_plugin_bad_uploads_are_refused_and_the_old_version_keeps_serving() {
    let data = scratch_dir("tenant-plugins-bad");
    let inverted = guest_bytes("predicate-inverted");
    let a = seed_tenant(
        &data,
        "team-a",
        TenantLimits {
            max_plugins: Some(2),
            max_plugin_bytes: Some(inverted.len() as u64 + 50_000),
            ..TenantLimits::default()
        },
    );
    let server = start(&data, &[]);
    let reply = upload(&server, &a.key, "openai-predicate", inverted.clone());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let p_inverted = predicate_p(&server, &a.key);

    let refusals: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("another kind", guest_bytes("temperature"), 400, "same kind"),
        (
            "garbage",
            b"\0asm this is not a component".to_vec(),
            400,
            "not a valid WebAssembly component",
        ),
        (
            "a failing self-test",
            guest_bytes("broken-example"),
            400,
            "self-test failed",
        ),
        (
            "over the size cap",
            vec![0u8; inverted.len() + 50_001],
            413,
            "max_plugin_bytes",
        ),
        ("an empty body", Vec::new(), 400, "empty"),
    ];
    for (what, bytes, status, reason) in refusals {
        let reply = upload(&server, &a.key, "openai-predicate", bytes);
        assert_eq!(reply.status, status, "{what}: {}", reply.body);
        assert!(
            error_message(&reply).contains(reason),
            "{what}: the refusal says why: {}",
            reply.body
        );
        assert!(
            close(predicate_p(&server, &a.key), p_inverted),
            "{what}: the old version still serves"
        );
    }
    let current = entry(&listed(&server, &a.key), "openai-predicate").unwrap();
    assert_eq!(current["sha256"], sha256(&inverted), "{current}");
    assert_eq!(current["upload_version"], 1, "{current}");

    // The count: a second name fits, a third does not; replacing an existing one still does.
    let reply = upload(
        &server,
        &a.key,
        "openai-sentiment",
        guest_bytes("openai-sentiment"),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = upload(
        &server,
        &a.key,
        "openai-third",
        guest_bytes("openai-sentiment"),
    );
    assert_eq!(reply.status, 409, "{}", reply.body);
    let message = error_message(&reply);
    assert!(
        message.contains("max_plugins") && message.contains('2'),
        "{message}"
    );
    let reply = upload(&server, &a.key, "openai-predicate", inverted.clone());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["version"], 2);
}

#[test]
fn tenant_plugin_limits_apply_to_its_own_plugins_only() {
    let data = scratch_dir("tenant-plugins-limits");
    let strict = seed_tenant(
        &data,
        "strict",
        TenantLimits {
            plugin_timeout_ms: Some(150),
            plugin_memory_mib: Some(16),
            ..TenantLimits::default()
        },
    );
    let plain = seed_tenant(&data, "plain", TenantLimits::default());
    let server = start(
        &data,
        &["--plugin-timeout-ms", "3000", "--plugin-memory-mib", "48"],
    );
    for tenant in [&strict, &plain] {
        for name in ["spin-question", "hog-question"] {
            let reply = upload(
                &server,
                &tenant.key,
                &format!("openai-{name}"),
                guest_bytes(name),
            );
            assert_eq!(reply.status, 200, "{name}: {}", reply.body);
        }
    }
    let body = json!({"model": "smol", "input": "A short note.", "questions": [
        {"type": "predicate", "instructions": "This is a note."},
        {"type": "spin-question", "instructions": "misbehave"},
        {"type": "hog-question", "instructions": "misbehave"},
    ]});
    // (spin refusal, hog refusal, how long the request took).
    let refusals = |tenant: &Seeded| -> (String, String, Duration) {
        let started = Instant::now();
        let reply = server.post_as("/v1/decisions", &tenant.key, &body);
        let elapsed = started.elapsed();
        assert_eq!(reply.status, 200, "{}", reply.body);
        let answers = &reply.body["answers"];
        assert_eq!(
            answers[0]["type"], "predicate",
            "only the plugins' questions fail: {}",
            reply.body
        );
        let message = |i: usize| {
            assert_eq!(answers[i]["type"], "refusal", "{}", reply.body);
            answers[i]["extra"]["error"]["message"]
                .as_str()
                .unwrap()
                .to_string()
        };
        (message(1), message(2), elapsed)
    };
    let (spin, hog, strict_elapsed) = refusals(&strict);
    assert!(spin.contains("openai-spin-question"), "{spin}");
    assert!(
        spin.contains("150 ms") && spin.contains("the tenant's limit plugin_timeout_ms"),
        "{spin}"
    );
    assert!(hog.contains("openai-hog-question"), "{hog}");
    assert!(
        hog.contains("16 MiB") && hog.contains("the tenant's limit plugin_memory_mib"),
        "{hog}"
    );
    // The other tenant's copies run under the server's limits.
    let (spin, hog, plain_elapsed) = refusals(&plain);
    assert!(
        spin.contains("3000 ms") && spin.contains("--plugin-timeout-ms"),
        "{spin}"
    );
    assert!(
        hog.contains("48 MiB") && hog.contains("--plugin-memory-mib"),
        "{hog}"
    );
    println!(
        "a spinning plugin's request: {} ms under the tenant's 150 ms deadline, {} ms under the server's 3000 ms",
        strict_elapsed.as_millis(),
        plain_elapsed.as_millis()
    );
    assert!(
        plain_elapsed >= Duration::from_millis(3000)
            && strict_elapsed < Duration::from_millis(2500),
        "the tenant's deadline really stops the call earlier"
    );
}

#[test]
fn tenant_plugin_hot_swap_under_load_fails_no_request() {
    let data = scratch_dir("tenant-plugins-hot-swap");
    let a = seed_tenant(&data, "team-a", TenantLimits::default());
    let server = Arc::new(start(&data, &[]));
    let p = predicate_p(&server, &a.key);
    assert!(
        (p - 0.5).abs() > 0.05,
        "the test needs p away from 0.5: {p}"
    );
    let versions = [
        guest_bytes("predicate-inverted"),
        guest_bytes("openai-predicate"),
    ];
    let expected = [1.0 - p, p];

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let (server, stop, sent, failures) =
                (server.clone(), stop.clone(), sent.clone(), failures.clone());
            let key = a.key.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let reply = server.post_as("/v1/decisions", &key, &predicate_body(2));
                    sent.fetch_add(1, Ordering::Relaxed);
                    let answers = &reply.body["answers"];
                    let (q0, q1) = (
                        answers[0]["probability"].as_f64(),
                        answers[1]["probability"].as_f64(),
                    );
                    let ok = reply.status == 200
                        && matches!((q0, q1), (Some(q0), Some(q1))
                            // One version for the whole request, the old or the new.
                            if close(q0, q1) && (close(q0, p) || close(q0, 1.0 - p)));
                    if !ok {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{}: {}", reply.status, reply.body));
                    }
                }
            })
        })
        .collect();
    let swaps = 8;
    for i in 0..swaps {
        std::thread::sleep(Duration::from_millis(400));
        let reply = upload(&server, &a.key, "openai-predicate", versions[i % 2].clone());
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body["version"], i + 1);
        // A request sent after the upload answered sees the new version.
        let q = predicate_p(&server, &a.key);
        assert!(
            close(q, expected[i % 2]),
            "after swap {}: {q}, expected {}",
            i + 1,
            expected[i % 2]
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let sent = sent.load(Ordering::Relaxed);
    let failures = failures.lock().unwrap();
    println!(
        "hot swap under load: {swaps} uploads, {sent} requests sent (3 clients, 2 questions each), {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "failed requests: {:?}",
        &failures[..failures.len().min(3)]
    );
    assert!(sent >= swaps, "the clients sent requests during the swaps");
}

/// Every blob file is whole: named by the SHA-256 of its content (temp files aside).
fn blob_files_are_whole(data: &Path) -> usize {
    let mut temps = 0;
    for file in std::fs::read_dir(data.join("blobs")).unwrap().flatten() {
        let name = file.file_name().to_string_lossy().to_string();
        if name.ends_with(".tmp") {
            temps += 1;
            continue;
        }
        let bytes = std::fs::read(file.path()).unwrap();
        assert_eq!(sha256(&bytes), name, "a half-written blob file");
    }
    temps
}

/// A PUT that may be cut off by the server dying: its status, or `None`.
fn upload_may_fail(base: &str, key: &str, bytes: Vec<u8>) -> Option<u16> {
    reqwest::blocking::Client::new()
        .put(format!("{base}/v1/plugins/openai-predicate"))
        .bearer_auth(key)
        .header("content-type", WASM)
        .body(bytes)
        .timeout(Duration::from_secs(30))
        .send()
        .ok()
        .map(|r| r.status().as_u16())
}

/// `component` with a custom section appended (id 0: name `decide-test`, `tag`): the same
/// plugin with other bytes, hence another SHA-256, a fresh blob and a fresh compile.
fn variant(component: &[u8], tag: usize) -> Vec<u8> {
    let name = b"decide-test";
    // Unique to this run too: the server caches compiled components by content hash (in the
    // test target dir, across runs), and a cached one would not compile, shrinking the
    // upload's span to milliseconds and every kill to one before the upload is read.
    let payload = format!(
        "{tag}-{}-{}",
        std::process::id(),
        RUN.get_or_init(run_nonce)
    );
    let size = 1 + name.len() + payload.len();
    assert!(size < 128, "one-byte LEB128 sizes");
    let mut bytes = component.to_vec();
    bytes.extend_from_slice(&[0, size as u8, name.len() as u8]);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload.as_bytes());
    bytes
}

static RUN: std::sync::OnceLock<u128> = std::sync::OnceLock::new();

fn run_nonce() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn tenant_plugins_survive_kill_9_during_uploads_and_restarts() {
    let data = scratch_dir("tenant-plugins-crash");
    let a = seed_tenant(&data, "team-a", TenantLimits::default());
    let b = seed_tenant(&data, "team-b", TenantLimits::default());
    // Alternating behaviours (inverted, built-in), each upload a new variant: every upload
    // compiles, writes a new blob and records a new version, so a kill can land in any step.
    let bases = [
        guest_bytes("predicate-inverted"),
        guest_bytes("openai-predicate"),
    ];

    let mut server = start(&data, &[]);
    let p = predicate_p(&server, &b.key);
    assert!(
        (p - 0.5).abs() > 0.05,
        "the test needs p away from 0.5: {p}"
    );
    let expected = [1.0 - p, p];
    // B's own plugin must survive every restart untouched.
    let sentiment = guest_bytes("openai-sentiment");
    assert_eq!(
        upload(&server, &b.key, "openai-sentiment", sentiment.clone()).status,
        200
    );
    // Time an upload of a new variant, to spread the kills over its whole span on any machine.
    let started = Instant::now();
    let first = variant(&bases[0], 0);
    assert_eq!(
        upload(&server, &a.key, "openai-predicate", first.clone()).status,
        200
    );
    let span = started.elapsed();
    assert!(close(predicate_p(&server, &a.key), expected[0]));
    let (mut current, mut current_sha) = (0, sha256(&first));

    let iterations = 10;
    let (mut kept_old, mut got_new, mut temps_seen) = (0, 0, 0);
    for i in 0..iterations {
        let next = 1 - current;
        let bytes = variant(&bases[next], i + 1);
        let next_sha = sha256(&bytes);
        // From 0 to 1.2 times an upload's span: kills before, during and after its work.
        let delay = span.mul_f64(1.2 * i as f64 / (iterations - 1) as f64);
        let (base, key) = (server.base.clone(), a.key.clone());
        let uploader = std::thread::spawn(move || upload_may_fail(&base, &key, bytes));
        std::thread::sleep(delay);
        server.kill();
        let answered = uploader.join().unwrap();
        temps_seen += blob_files_are_whole(&data);

        server = start(&data, &[]);
        assert_eq!(
            blob_files_are_whole(&data),
            0,
            "the restart removed temp files"
        );
        let list = listed(&server, &a.key);
        let served = entry(&list, "openai-predicate").expect("A's plugin is restored");
        assert_eq!(served["source"], "tenant", "{served}");
        let sha = served["sha256"].as_str().unwrap().to_string();
        let restored_new = if sha == next_sha {
            got_new += 1;
            current = next;
            true
        } else {
            assert_eq!(sha, current_sha, "neither the old nor the new version");
            // An upload that answered 200 before the kill is durable.
            assert_ne!(answered, Some(200), "a confirmed upload was lost");
            kept_old += 1;
            false
        };
        current_sha = sha;
        assert!(
            close(predicate_p(&server, &a.key), expected[current]),
            "iteration {i}: the restored version answers as itself"
        );
        let theirs = entry(&listed(&server, &b.key), "openai-sentiment").expect("B's plugin");
        assert_eq!(theirs["sha256"], sha256(&sentiment));
        assert_eq!(
            entry(&listed(&server, &b.key), "openai-predicate").unwrap()["source"],
            "builtin"
        );
        println!(
            "crash iteration {i}: kill after {:.0} ms (an upload takes {:.0} ms), upload answered {answered:?}, restored {}",
            delay.as_secs_f64() * 1e3,
            span.as_secs_f64() * 1e3,
            if restored_new { "new" } else { "old" }
        );
    }
    println!(
        "crash loop: {iterations} iterations, {kept_old} kept the old version, {got_new} got the new one, {temps_seen} temp blob files left by kills (removed on restart), 0 half-written blobs"
    );
    assert_eq!(kept_old + got_new, iterations);
}
