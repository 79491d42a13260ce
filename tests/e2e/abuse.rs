//! The red-team attacks of issue 54 that tenancy and the HTTP layer answer, each kept as a
//! test so it stays fixed: a tenant filling the disk with plugin versions, a tenant's
//! calibration that nobody could bound or stop, a server that served anyone once its last
//! tenant was deleted, `/metrics` open to anyone, slow-header connections held forever, 401s
//! that echoed the presented token, and names carrying NUL or bidirectional-text controls.
//!
//! Run: `cargo test --release -p decide --test e2e abuse:: -- --nocapture` (the disk and
//! model-time figures are printed).

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use decide_tenancy::TenantLimits;
use serde_json::{json, Value};

use crate::server::{scratch_dir, test_guest, Reply, Server};
use crate::tenant_calibration::{labelled_questions, put_questions};
use crate::tenant_fixture::seed_tenant;

const WASM: &str = "application/wasm";
const ADMIN: &str = "abuse-admin-key";

fn message(reply: &Reply) -> String {
    reply.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Bytes of every file under `dir`.
fn disk_used(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            disk_used(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

/// `n` as unsigned LEB128, as WebAssembly writes sizes.
fn leb128(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// `component` padded to about `size` bytes with a custom section (id 0) whose payload is
/// unique to `tag` and this run: still a valid component that passes every check, with its
/// own SHA-256, as the attack's padded uploads were.
fn padded(component: &[u8], tag: usize, size: usize) -> Vec<u8> {
    let name = b"decide-padding";
    let nonce = format!("{tag}-{}-{:?}-", std::process::id(), Instant::now());
    let fill = size.saturating_sub(component.len() + nonce.len() + 32);
    let mut payload = nonce.into_bytes();
    payload.resize(payload.len() + fill, b'x');
    let mut section = leb128(name.len());
    section.extend_from_slice(name);
    section.extend_from_slice(&payload);
    let mut bytes = component.to_vec();
    bytes.push(0);
    bytes.extend(leb128(section.len()));
    bytes.extend(section);
    bytes
}

fn upload(server: &Server, key: &str, name: &str, bytes: Vec<u8>) -> Reply {
    server.put_bytes_as(&format!("/v1/plugins/{name}"), key, bytes, WASM)
}

/// A sentiment question through the tenant's own `openai-sentiment` plugin.
fn sentiment(server: &Server, key: &str) -> Reply {
    server.post_as(
        "/v1/decisions",
        key,
        &json!({"model": "smol", "input": "The courier was rude and the box was soaked.",
                "questions": [{"type": "sentiment", "aspect": "the delivery", "levels": 3}]}),
    )
}

/// Issue 54, item 5: 13 uploads of one name, each a valid component padded to 16 MB, left
/// 196 MB on disk that stayed after `DELETE`. Now the versions of one plugin are a limit
/// (the 11th upload is refused, naming `max_plugin_versions` and its flag), the bytes a
/// tenant stores are a limit (`max_stored_bytes`, content-addressed: a component kept twice
/// counts once), and `DELETE ?purge=true` removes the history and every blob no version of
/// any tenant refers to, so the disk is back where it started; a blob another tenant still
/// uses stays.
#[test]
fn padded_uploads_are_bounded_and_purge_gives_the_disk_back() {
    let data = scratch_dir("abuse-disk");
    let a = seed_tenant(&data, "padder", TenantLimits::default());
    let b = seed_tenant(&data, "neighbour", TenantLimits::default());
    let small = seed_tenant(
        &data,
        "small",
        TenantLimits {
            max_stored_bytes: Some(5_000_000),
            ..Default::default()
        },
    );
    let server = Server::ready(&["--data-dir", data.to_str().unwrap()]);
    let component = std::fs::read(test_guest("openai-sentiment")).unwrap();
    let start = disk_used(&data);

    let mut first = None;
    let mut refused = Vec::new();
    for i in 0..13 {
        let bytes = padded(&component, i, 16_000_000);
        if i == 0 {
            first = Some(bytes.clone());
        }
        let reply = upload(&server, &a.key, "openai-sentiment", bytes);
        if i < 10 {
            assert_eq!(reply.status, 200, "upload {i}: {}", reply.body);
        } else {
            refused.push(reply);
        }
    }
    let peak = disk_used(&data);
    for reply in &refused {
        assert_eq!(reply.status, 409, "{}", reply.body);
        let text = message(reply);
        assert!(text.contains("max_plugin_versions = 10"), "{text}");
        assert!(text.contains("--tenant-max-plugin-versions"), "{text}");
        assert!(text.contains("?purge=true"), "{text}");
    }
    let listed = server.send_as("GET", "/v1/plugins/openai-sentiment/versions", &a.key, None);
    assert_eq!(listed.body["versions"].as_array().unwrap().len(), 10);
    assert_eq!(sentiment(&server, &a.key).status, 200);

    // The neighbour uploads the same bytes as the padder's version 1: one blob, two owners.
    let first = first.unwrap();
    let shared = upload(&server, &b.key, "openai-sentiment", first.clone());
    assert_eq!(shared.status, 200, "{}", shared.body);
    let shared_blob = data
        .join("blobs")
        .join(shared.body["sha256"].as_str().unwrap());

    // The bytes limit, with the tenant's own value: 2 MB + 2 MB fit in 5 MB, a third does not;
    // the same component again adds nothing.
    let two = padded(&component, 100, 2_000_000);
    assert_eq!(
        upload(&server, &small.key, "openai-sentiment", two.clone()).status,
        200
    );
    assert_eq!(
        upload(
            &server,
            &small.key,
            "openai-sentiment",
            padded(&component, 101, 2_000_000)
        )
        .status,
        200
    );
    let over = upload(
        &server,
        &small.key,
        "openai-sentiment",
        padded(&component, 102, 2_000_000),
    );
    assert_eq!(over.status, 413, "{}", over.body);
    let text = message(&over);
    assert!(text.contains("max_stored_bytes = 5000000"), "{text}");
    assert!(
        text.contains(&format!("PATCH /admin/v1/tenants/{}", small.id)),
        "{text}"
    );
    assert_eq!(
        upload(&server, &small.key, "openai-sentiment", two).status,
        200
    );

    // Purge: the padder's history and its blobs go, the shared blob stays for the neighbour.
    let bad = server.send_as(
        "DELETE",
        "/v1/plugins/openai-sentiment?purge=maybe",
        &a.key,
        None,
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(message(&bad).contains("purge"), "{}", bad.body);
    let purged = server.send_as(
        "DELETE",
        "/v1/plugins/openai-sentiment?purge=true",
        &a.key,
        None,
    );
    assert_eq!(purged.status, 204, "{}", purged.body);
    let gone = server.send_as("GET", "/v1/plugins/openai-sentiment/versions", &a.key, None);
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert!(shared_blob.exists(), "the neighbour's blob was removed");
    assert_eq!(
        sentiment(&server, &b.key).status,
        200,
        "the neighbour's plugin serves"
    );
    let after_a = disk_used(&data);

    for tenant in [&b, &small] {
        let purged = server.send_as(
            "DELETE",
            "/v1/plugins/openai-sentiment?purge=true",
            &tenant.key,
            None,
        );
        assert_eq!(purged.status, 204, "{}", purged.body);
    }
    assert!(
        !shared_blob.exists(),
        "a blob no version refers to stays on disk"
    );
    let after = disk_used(&data);
    println!(
        "disk under the data dir: {:.1} MB at the start, {:.1} MB after 13 padded uploads (10 kept), {:.1} MB after the padder's purge (the neighbour's 16 MB blob kept), {:.1} MB after every purge",
        start as f64 / 1e6,
        peak as f64 / 1e6,
        after_a as f64 / 1e6,
        after as f64 / 1e6
    );
    assert!(peak > start + 150_000_000, "{start} -> {peak}");
    assert!(
        after < start + 2_000_000,
        "{start} -> {after}: the purge left blobs behind"
    );
    // A fresh upload after a purge starts a new history.
    let again = upload(&server, &a.key, "openai-sentiment", component);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["version"], 1, "{}", again.body);
}

/// Seconds the model worker has been busy, from `/metrics`.
fn busy(server: &Server) -> f64 {
    server.metric("decide_model_busy_seconds_total")
}

fn calibration(server: &Server, key: &str) -> Value {
    let reply = server.send_as("GET", "/v1/calibration", key, None);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

/// Waits until the tenant's fit has answered some questions and the model worker's busy
/// time grows (the worker records it per batch, and a batch may take over a second on a
/// loaded machine, so this waits for a change rather than measuring a fixed window). Returns
/// the longest gap seen between two updates of the busy time while the fit reads: one batch
/// on this machine under its current load, which scales how long "idle" must last below.
fn wait_reading(server: &Server, key: &str) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(120);
    while calibration(server, key)["progress"]["answered"]
        .as_u64()
        .unwrap_or(0)
        == 0
    {
        assert!(Instant::now() < deadline, "{}", calibration(server, key));
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut last = busy(server);
    let mut changed = Instant::now();
    let mut updates = 0;
    let mut longest = Duration::ZERO;
    while updates < 3 {
        assert!(
            Instant::now() < deadline,
            "the fit does not keep the model busy: {}",
            calibration(server, key)
        );
        std::thread::sleep(Duration::from_millis(100));
        let now = busy(server);
        if now != last {
            if updates > 0 {
                longest = longest.max(changed.elapsed());
            }
            last = now;
            changed = Instant::now();
            updates += 1;
        }
    }
    longest
}

/// Seconds from now until the model worker's busy time stops growing, after checking that it
/// then stays unchanged. "Stopped" means unchanged for 2 s or three times the longest gap
/// between updates measured while the fit read (`batch`), whichever is longer, so that one
/// slow batch on a loaded machine is not taken for idleness; fails after 20 s or ten batches.
fn seconds_until_idle(server: &Server, batch: Duration) -> f64 {
    let window = Duration::from_secs(2).max(batch * 3);
    let limit = Duration::from_secs(20).max(batch * 10);
    let start = Instant::now();
    let mut last = busy(server);
    let mut changed = Instant::now();
    while changed.elapsed() < window {
        assert!(
            start.elapsed() < limit,
            "the model worker is still reading {limit:?} after the fit was stopped (one batch: {batch:?})"
        );
        std::thread::sleep(Duration::from_millis(200));
        let now = busy(server);
        if now != last {
            last = now;
            changed = Instant::now();
        }
    }
    std::thread::sleep(window.max(Duration::from_secs(3)));
    assert_eq!(
        busy(server),
        last,
        "the model worker read again after it stopped (idle window {window:?}, one batch {batch:?})"
    );
    changed.duration_since(start).as_secs_f64()
}

/// Issue 54, item 6: `PUT /v1/calibration` accepted 33,000 questions (~26 h of model time),
/// `DELETE /v1/calibration` answered 404 while the fit went on, deleting the tenant left it
/// running, and none of it counted against the tenant. Now the question count is a limit
/// (413 naming `max_calibration_questions` and its flag), the fit's prompt tokens are in the
/// tenant's usage and taken from its token rate, and `DELETE /v1/calibration` or deleting the
/// tenant cancels it: the model worker's busy time stops growing.
#[test]
fn a_tenant_calibration_is_bounded_charged_and_stoppable() {
    let data = scratch_dir("abuse-calibration");
    let big = TenantLimits {
        max_calibration_questions: Some(5000),
        ..Default::default()
    };
    let a = seed_tenant(&data, "fitter", big.clone());
    let b = seed_tenant(&data, "plain", TenantLimits::default());
    let c = seed_tenant(
        &data,
        "metered",
        TenantLimits {
            input_tokens_per_minute: Some(3000),
            ..Default::default()
        },
    );
    let server = Server::ready(&["--data-dir", data.to_str().unwrap(), "--admin-key", ADMIN]);

    let over = put_questions(&server, &b.key, labelled_questions(1001));
    assert_eq!(over.status, 413, "{}", over.body);
    let text = message(&over);
    assert!(text.contains("max_calibration_questions = 1000"), "{text}");
    assert!(
        text.contains("--tenant-max-calibration-questions"),
        "{text}"
    );

    // A big fit, cancelled by DELETE /v1/calibration.
    let started = put_questions(&server, &a.key, labelled_questions(2000));
    assert_eq!(started.status, 202, "{}", started.body);
    let batch = wait_reading(&server, &a.key);
    let cancelled = server.send_as("DELETE", "/v1/calibration", &a.key, None);
    assert_eq!(cancelled.status, 204, "{}", cancelled.body);
    assert_eq!(calibration(&server, &a.key)["status"], "cancelled");
    let stopped = seconds_until_idle(&server, batch);
    println!(
        "DELETE /v1/calibration: the model worker's busy time stopped growing {stopped:.2} s after"
    );
    let usage = server.send_as(
        "GET",
        &format!("/admin/v1/tenants/{}/usage", a.id),
        ADMIN,
        None,
    );
    assert_eq!(usage.status, 200, "{}", usage.body);
    assert!(
        usage.body["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0,
        "{}",
        usage.body
    );

    // Another, cancelled by deleting the tenant.
    let started = put_questions(&server, &a.key, labelled_questions(2000));
    assert_eq!(started.status, 202, "{}", started.body);
    let batch = wait_reading(&server, &a.key);
    let deleted = server.send_as(
        "DELETE",
        &format!("/admin/v1/tenants/{}", a.id),
        ADMIN,
        None,
    );
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let stopped = seconds_until_idle(&server, batch);
    println!(
        "deleting the tenant: the model worker's busy time stopped growing {stopped:.2} s after"
    );

    // A fit takes the tenant's token rate: its own requests are then refused for it.
    let started = put_questions(&server, &c.key, labelled_questions(300));
    assert_eq!(started.status, 202, "{}", started.body);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let reply = server.post_as(
            "/v1/decisions",
            &c.key,
            &json!({"model": "smol", "input": "My card was charged twice for one order.",
                    "questions": [{"type": "predicate", "instructions": "The customer asks for money back."}]}),
        );
        if reply.status == 429 {
            assert!(
                message(&reply).contains("input_tokens_per_minute"),
                "{}",
                reply.body
            );
            break;
        }
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            Instant::now() < deadline,
            "the fit never took the tenant's token rate"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        server
            .send_as("DELETE", "/v1/calibration", &c.key, None)
            .status,
        204
    );
}

fn ask(server: &Server, key: Option<&str>) -> Reply {
    let body = json!({"model": "smol", "input": "The parcel arrived broken.",
                      "questions": [{"type": "predicate", "instructions": "Is the customer unhappy?"}]});
    match key {
        Some(key) => server.post_as("/v1/decisions", key, &body),
        None => server.post("/v1/decisions", &body),
    }
}

/// POST /mcp (an MCP `initialize`), with a key when given.
fn mcp(server: &Server, key: Option<&str>) -> u16 {
    let mut request = reqwest::blocking::Client::new()
        .post(format!("{}/mcp", server.base))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                                 "clientInfo": {"name": "abuse", "version": "1"}}}));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().expect("POST /mcp").status().as_u16()
}

/// Issue 54, item 7: on a server without `--api-key`, deleting the last tenant turned
/// authentication off (no key, a revoked key or any string got 200, `/mcp` too). Now a
/// server that ever had tenants refuses requests without a valid key (401 naming
/// `--api-key`), logs it, and still does after a restart; `--allow-anonymous` is the
/// operator's explicit way back.
#[test]
fn a_server_that_had_tenants_never_serves_without_a_key() {
    let data = scratch_dir("abuse-fail-closed");
    let data_arg = data.to_str().unwrap();
    let server = Server::start_logged(&["--data-dir", data_arg, "--admin-key", ADMIN]);
    server.wait_ready();
    assert_eq!(
        ask(&server, None).status,
        200,
        "no tenants yet: served as before"
    );

    let created = server.send_as(
        "POST",
        "/admin/v1/tenants",
        ADMIN,
        Some(&json!({"name": "only"})),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    let key = server.send_as("POST", &format!("/admin/v1/tenants/{id}/keys"), ADMIN, None);
    let key = key.body["key"].as_str().unwrap().to_string();
    assert_eq!(ask(&server, Some(&key)).status, 200);
    assert_eq!(ask(&server, None).status, 401);
    let deleted = server.send_as("DELETE", &format!("/admin/v1/tenants/{id}"), ADMIN, None);
    assert_eq!(deleted.status, 204, "{}", deleted.body);

    for presented in [None, Some(key.as_str()), Some("anything")] {
        let reply = ask(&server, presented);
        assert_eq!(reply.status, 401, "{presented:?}: {}", reply.body);
        assert!(message(&reply).contains("--api-key"), "{}", reply.body);
        assert_eq!(mcp(&server, presented), 401, "/mcp with {presented:?}");
    }
    server.log_once_it_has("--allow-anonymous", Duration::from_secs(10));
    drop(server);

    let server = Server::ready(&["--data-dir", data_arg]);
    let reply = ask(&server, None);
    assert_eq!(reply.status, 401, "after a restart: {}", reply.body);
    assert_eq!(mcp(&server, None), 401);
    drop(server);

    let server = Server::ready(&["--data-dir", data_arg, "--api-key", "operator"]);
    assert_eq!(ask(&server, None).status, 401);
    assert_eq!(ask(&server, Some("operator")).status, 200);
    drop(server);

    let server = Server::ready(&["--data-dir", data_arg, "--allow-anonymous"]);
    assert_eq!(
        ask(&server, None).status,
        200,
        "--allow-anonymous serves without a key"
    );
}

/// Issue 54, item 8: `/metrics` listed every tenant id and its traffic to anyone. With
/// `--admin-key` or `--metrics-key` it needs one of them; with neither it stays open (a
/// loopback server scraped by a local agent).
#[test]
fn metrics_need_the_metrics_or_admin_key_once_one_is_set() {
    let data = scratch_dir("abuse-metrics");
    let tenant = seed_tenant(&data, "watched", TenantLimits::default());
    let server = Server::start(&["--data-dir", data.to_str().unwrap(), "--admin-key", ADMIN]);
    let anonymous = server.get_anonymous("/metrics");
    assert_eq!(anonymous.status, 401, "{}", anonymous.body);
    assert!(
        message(&anonymous).contains("--metrics-key"),
        "{}",
        anonymous.body
    );
    assert_eq!(
        server.send_as("GET", "/metrics", &tenant.key, None).status,
        401
    );
    let admin = server.send_as("GET", "/metrics", ADMIN, None);
    assert_eq!(admin.status, 200);
    assert!(admin.body.as_str().unwrap().contains("decide_ready"));
    drop(server);

    let server = Server::start(&["--metrics-key", "scraper", "--admin-key", ADMIN]);
    assert_eq!(server.get_anonymous("/metrics").status, 401);
    assert_eq!(
        server.send_as("GET", "/metrics", "scraper", None).status,
        200
    );
    assert_eq!(server.send_as("GET", "/metrics", ADMIN, None).status, 200);
    drop(server);

    let server = Server::start(&[]);
    assert_eq!(
        server.get_anonymous("/metrics").status,
        200,
        "open without keys"
    );
}

/// Issue 54, item 8: 30 connections sending their headers a byte at a time were held for
/// the whole minute. Now a connection whose headers are not complete within
/// `--header-read-timeout-s` is closed, while a prompt request on it is answered.
#[test]
fn slow_headers_are_cut_at_the_header_read_timeout() {
    let server = Server::start(&["--header-read-timeout-s", "1"]);
    let address = server.base.trim_start_matches("http://").to_string();

    let mut prompt = std::net::TcpStream::connect(&address).unwrap();
    prompt
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    prompt
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = prompt.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let mut slow: Vec<std::net::TcpStream> = (0..5)
        .map(|_| std::net::TcpStream::connect(&address).unwrap())
        .collect();
    let started = Instant::now();
    for stream in &mut slow {
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
    }
    let mut open = slow.len();
    let mut closed_at = Vec::new();
    let mut alive: Vec<bool> = vec![true; slow.len()];
    while open > 0 && started.elapsed() < Duration::from_secs(10) {
        for (i, stream) in slow.iter_mut().enumerate() {
            if !alive[i] {
                continue;
            }
            // One more header line every round: the headers never end.
            let wrote = stream.write_all(b"X-Slow: 1\r\n");
            let mut buffer = [0u8; 512];
            let read = stream.read(&mut buffer);
            let gone = wrote.is_err()
                || matches!(read, Ok(0))
                || matches!(&read, Err(e) if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut);
            if gone {
                alive[i] = false;
                open -= 1;
                closed_at.push(started.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("slow-header connections closed after {closed_at:?}");
    assert_eq!(
        open, 0,
        "{open} slow-header connections still open after 10 s"
    );
    assert!(
        closed_at.iter().all(|t| *t < Duration::from_secs(5)),
        "{closed_at:?}"
    );
}

/// Issue 54, item 8: a 401 echoed the first 11 characters of whatever token was sent, so a
/// short admin key sent to the data plane came back. No refusal shows any part of it.
#[test]
fn a_refused_token_is_never_echoed() {
    let data = scratch_dir("abuse-echo");
    seed_tenant(&data, "someone", TenantLimits::default());
    let server = Server::ready(&["--data-dir", data.to_str().unwrap()]);
    for token in ["Zq9xAdminKey", "dk_Zq9x0123456789abcdef"] {
        for reply in [
            ask(&server, Some(token)),
            server.send_as("GET", "/v1/plugins", token, None),
            server.send_as("GET", "/v1/calibration", token, None),
        ] {
            assert_eq!(reply.status, 401, "{}", reply.body);
            let text = reply.body.to_string();
            assert!(!text.contains("Zq9x"), "the token was echoed: {text}");
        }
    }
}

/// Issue 54, item 8: tenant and question names accepted NUL and bidirectional-text controls
/// (which make a name display as another) and echoed them back. Names are now printable
/// characters only, and the 400 names the field.
#[test]
fn names_must_be_printable() {
    let server = Server::ready(&["--admin-key", ADMIN]);
    for name in ["team\u{202E}nimda", "team\u{0}a", "team\u{2066}x"] {
        let reply = server.send_as(
            "POST",
            "/admin/v1/tenants",
            ADMIN,
            Some(&json!({"name": name})),
        );
        assert_eq!(reply.status, 400, "{name:?}: {}", reply.body);
        assert!(message(&reply).starts_with("name:"), "{}", reply.body);
    }
    let created = server.send_as(
        "POST",
        "/admin/v1/tenants",
        ADMIN,
        Some(&json!({"name": "team"})),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap();
    let renamed = server.send_as(
        "PATCH",
        &format!("/admin/v1/tenants/{id}"),
        ADMIN,
        Some(&json!({"name": "a\u{202E}b"})),
    );
    assert_eq!(renamed.status, 400, "{}", renamed.body);
    let key = server.send_as("POST", &format!("/admin/v1/tenants/{id}/keys"), ADMIN, None);
    let key = key.body["key"].as_str().unwrap().to_string();

    let reply = server.post_as(
        "/v1/decisions",
        &key,
        &json!({"model": "smol", "input": "x",
                "questions": [{"type": "predicate", "name": "ok\u{202E}fdp.exe", "instructions": "?"}]}),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(
        message(&reply).contains("questions[0].name"),
        "{}",
        reply.body
    );
    assert!(
        !reply.body.to_string().contains('\u{202E}'),
        "echoed: {}",
        reply.body
    );

    let reply = server.put_bytes_as("/v1/plugins/x%E2%80%AEy", &key, vec![0, 97, 115, 109], WASM);
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(message(&reply).starts_with("name:"), "{}", reply.body);
}
