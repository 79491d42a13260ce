//! Tenants over the admin API and the `decide tenants` CLI: the lifecycle of a tenant and its
//! keys, what a key answers (and what a revoked or unknown one gets, in each wire format's
//! own 401), usage in the admin API, `/v1/usage` and `/metrics`, the admin guard,
//! validation, and that tenants and keys survive a restart on the same `--data-dir`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::server::{scratch_dir, Reply, Server};

const ADMIN: &str = "admin-sekret";

fn decision() -> Value {
    json!({"model": "smol", "input": "I was charged twice; please refund me.",
           "questions": [{"type": "predicate", "instructions": "The customer wants a refund."},
                         {"type": "choice", "instructions": "Which team?", "choices": [{"value": "billing"}, {"value": "shipping"}]}]})
}

fn jev_decision() -> Value {
    json!({"model": "jev-latest", "state": "I was charged twice; please refund me.",
           "questions": {"refund": {"type": "noul", "instructions": "The customer wants a refund."}}})
}

/// `decide tenants ARGS --data-dir DIR`: exit code and stdout parsed as JSON (or stderr).
fn cli(dir: &Path, args: &[&str]) -> (i32, Value) {
    let output = Command::new(crate::server::binary())
        .arg("tenants")
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .output()
        .expect("run decide tenants");
    let code = output.status.code().unwrap_or(-1);
    let text = if code == 0 {
        output.stdout
    } else {
        output.stderr
    };
    let text = String::from_utf8_lossy(&text).to_string();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn admin(server: &Server, method: &str, path: &str, body: Option<&Value>) -> Reply {
    server.send_as(method, &format!("/admin/v1{path}"), ADMIN, body)
}

/// Asserts both wire formats answer `key` with their own 401 shape; returns the messages.
fn assert_unauthorized(server: &Server, key: Option<&str>) -> (String, String) {
    let (openai, jev) = match key {
        Some(key) => (
            server.post_as("/v1/decisions", key, &decision()),
            server.post_as("/v1/systemone", key, &jev_decision()),
        ),
        None => (
            server.post("/v1/decisions", &decision()),
            server.post("/v1/systemone", &jev_decision()),
        ),
    };
    assert_eq!(openai.status, 401, "{}", openai.body);
    assert_eq!(
        openai.body["error"]["type"], "authentication_error",
        "{}",
        openai.body
    );
    assert_eq!(jev.status, 401, "{}", jev.body);
    assert_eq!(
        jev.body["detail"]["error_type"], "authentication_error",
        "{}",
        jev.body
    );
    (
        openai.body["error"]["message"]
            .as_str()
            .unwrap()
            .to_string(),
        jev.body["detail"]["message"].as_str().unwrap().to_string(),
    )
}

/// The value of the series `name{tenant="id"}` in `/metrics`, if present.
fn tenant_series(server: &Server, name: &str, id: &str) -> Option<u64> {
    let text = server.get("/metrics").body;
    let text = text.as_str().expect("metrics are text");
    let prefix = format!("{name}{{tenant=\"{id}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.trim().parse().expect("a counter"))
}

#[test]
fn tenant_lifecycle_over_http_and_the_cli_survives_a_restart() {
    let data = scratch_dir("tenants-data");
    let data_arg = data.to_str().unwrap();
    let server = Server::ready(&["--admin-key", ADMIN, "--data-dir", data_arg]);

    // No tenant yet: the server is one default tenant and needs no key.
    assert_eq!(server.post("/v1/decisions", &decision()).status, 200);

    // A tenant, with limits and settings, and a key shown once.
    let created = admin(
        &server,
        "POST",
        "/tenants",
        Some(
            &json!({"name": "team-a", "limits": {"requests_per_minute": 600, "max_questions": 50}, "settings": {"weight": 2}}),
        ),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("tn_"), "{}", created.body);
    assert_eq!(created.body["name"], "team-a");
    assert_eq!(
        created.body["limits"],
        json!({"requests_per_minute": 600, "max_questions": 50})
    );
    assert_eq!(created.body["settings"], json!({"weight": 2}));
    let made = admin(&server, "POST", &format!("/tenants/{id}/keys"), None);
    assert_eq!(made.status, 201, "{}", made.body);
    let key = made.body["key"].as_str().unwrap().to_string();
    let key_id = made.body["id"].as_str().unwrap().to_string();
    assert!(key.starts_with("dk_") && key.len() > 40, "{}", made.body);
    assert!(key.starts_with(made.body["prefix"].as_str().unwrap()));
    assert!(made.body["created_at"].as_u64().unwrap() > 0);

    // Once a tenant exists, a key is needed; the tenant's key answers both wire formats.
    assert_unauthorized(&server, None);
    let (unknown, _) = assert_unauthorized(
        &server,
        Some("dk_000000000000000000000000000000000000000000000000"),
    );
    assert!(unknown.contains("not valid"), "{unknown}");
    let openai = server.post_as("/v1/decisions", &key, &decision());
    assert_eq!(openai.status, 200, "{}", openai.body);
    let jev = server.post_as("/v1/systemone", &key, &jev_decision());
    assert_eq!(jev.status, 200, "{}", jev.body);

    // The tenant's own usage and rates by its own key (not counted as a request: the admin
    // API's count below is still 2); no key, no usage.
    let own = server.send_as("GET", "/v1/usage", &key, None);
    assert_eq!(own.status, 200, "{}", own.body);
    assert_eq!(own.body["tenant_id"], id.as_str());
    assert_eq!(own.body["usage"]["requests"], 2, "{}", own.body);
    assert_eq!(own.body["limits"]["requests_per_minute"], 600);
    assert_eq!(
        own.body["rate_limits"]["x-ratelimit-limit-requests"], "600",
        "{}",
        own.body
    );
    let left: u32 = own.body["rate_limits"]["x-ratelimit-remaining-requests"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}", own.body));
    assert!(left <= 600);
    assert_eq!(own.headers["x-ratelimit-limit-requests"], "600");
    assert_eq!(server.get_anonymous("/v1/usage").status, 401);

    // List, show, update (given fields replace, null clears).
    let listed = admin(&server, "GET", "/tenants", None);
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["tenants"].as_array().unwrap().len(), 1);
    assert_eq!(listed.body["tenants"][0]["id"], id.as_str());
    let patched = admin(
        &server,
        "PATCH",
        &format!("/tenants/{id}"),
        Some(
            &json!({"limits": {"requests_per_minute": null, "concurrent_requests": 4}, "settings": {"renderer": "direct-options"}}),
        ),
    );
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(
        patched.body["limits"],
        json!({"max_questions": 50, "concurrent_requests": 4})
    );
    assert_eq!(
        patched.body["settings"],
        json!({"weight": 2, "renderer": "direct-options"})
    );
    assert_eq!(
        admin(&server, "GET", &format!("/tenants/{id}"), None).body,
        patched.body
    );
    let keys = admin(&server, "GET", &format!("/tenants/{id}/keys"), None);
    assert_eq!(keys.body["keys"][0]["id"], key_id.as_str());
    assert!(
        !keys.body.to_string().contains(&key[12..]),
        "a listed key never shows the key"
    );

    // Usage counts what the key did, in the admin API and in /metrics.
    let usage = admin(&server, "GET", &format!("/tenants/{id}/usage"), None);
    assert_eq!(usage.status, 200, "{}", usage.body);
    assert_eq!(usage.body["tenant_id"], id.as_str());
    assert_eq!(usage.body["usage"]["requests"], 2, "{}", usage.body);
    assert_eq!(usage.body["usage"]["decisions"], 3, "{}", usage.body);
    let input_tokens = openai.body["usage"]["input_tokens"].as_u64().unwrap()
        + jev.body["usage"]["input_tokens"].as_u64().unwrap();
    assert_eq!(usage.body["usage"]["input_tokens"], input_tokens);
    assert_eq!(
        tenant_series(&server, "decide_tenant_requests_total", &id),
        Some(2)
    );
    assert_eq!(
        tenant_series(&server, "decide_tenant_input_tokens_total", &id),
        Some(input_tokens)
    );

    // Revoked: 401 in each format's own shape, at once.
    assert_eq!(
        admin(
            &server,
            "DELETE",
            &format!("/tenants/{id}/keys/{key_id}"),
            None
        )
        .status,
        204
    );
    let (openai_message, jev_message) = assert_unauthorized(&server, Some(&key));
    assert!(openai_message.contains("revoked"), "{openai_message}");
    assert_eq!(openai_message, jev_message);
    assert_eq!(
        admin(
            &server,
            "DELETE",
            &format!("/tenants/{id}/keys/{key_id}"),
            None
        )
        .status,
        404,
        "revoking twice"
    );

    // The CLI writes the running server's store; the server notices within its recheck.
    let (code, cli_tenant) = cli(
        &data,
        &[
            "create",
            "--name",
            "team-cli",
            "--settings",
            r#"{"weight": 3}"#,
        ],
    );
    assert_eq!(code, 0, "{cli_tenant}");
    let cli_id = cli_tenant["id"].as_str().unwrap().to_string();
    let (code, cli_key) = cli(&data, &["keys", "create", &cli_id]);
    assert_eq!(code, 0, "{cli_key}");
    let cli_key = cli_key["key"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let reply = server.post_as("/v1/decisions", &cli_key, &decision());
        if reply.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a CLI key still fails after 3 s: {}",
            reply.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, listed) = cli(&data, &["list"]);
    assert_eq!(code, 0);
    assert_eq!(listed["tenants"].as_array().unwrap().len(), 2, "{listed}");
    let (code, message) = cli(
        &data,
        &["update", &cli_id, "--limits", r#"{"max_questions": -1}"#],
    );
    assert_eq!(code, 2);
    assert!(
        message
            .as_str()
            .unwrap()
            .contains("limits.max_questions: must be a non-negative integer"),
        "{message}"
    );

    // Deleting a tenant: its keys stop working, its usage and series go.
    let second = admin(&server, "POST", &format!("/tenants/{id}/keys"), None);
    let second = second.body["key"].as_str().unwrap().to_string();
    assert_eq!(
        server.post_as("/v1/decisions", &second, &decision()).status,
        200
    );
    assert_eq!(
        admin(&server, "DELETE", &format!("/tenants/{id}"), None).status,
        204
    );
    assert_unauthorized(&server, Some(&second));
    assert_eq!(
        admin(&server, "GET", &format!("/tenants/{id}"), None).status,
        404
    );
    assert_eq!(
        admin(&server, "GET", &format!("/tenants/{id}/usage"), None).status,
        404
    );
    assert_eq!(
        tenant_series(&server, "decide_tenant_requests_total", &id),
        None
    );

    // Restart on the same data dir without --admin-key: the CLI's tenant and key survive,
    // and the admin API is off (403, saying how to turn it on).
    server.kill();
    let server = Server::ready(&["--data-dir", data_arg]);
    let reply = server.post_as("/v1/decisions", &cli_key, &decision());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_unauthorized(&server, Some(&second));
    let off = server.send_as("GET", "/admin/v1/tenants", ADMIN, None);
    assert_eq!(off.status, 403, "{}", off.body);
    assert_eq!(off.body["error"]["type"], "permission_error");
    assert!(
        off.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--admin-key"),
        "{}",
        off.body
    );
    let (code, shown) = cli(&data, &["show", &cli_id]);
    assert_eq!(code, 0);
    assert_eq!(shown["settings"]["weight"], 3);
}

#[test]
fn the_admin_api_guards_and_validates_while_the_model_loads() {
    // Readiness held back: the admin API needs no engine.
    let server = Server::start(&["--admin-key", ADMIN, "--ready-delay-ms", "600000"]);
    assert_eq!(server.get("/health").status, 503);

    let wrong = server.send_as("GET", "/admin/v1/tenants", "not-the-admin-key", None);
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert_eq!(wrong.body["error"]["type"], "authentication_error");
    assert_eq!(server.get("/admin/v1/tenants").status, 401, "no key at all");

    let cases = [
        (
            json!({"name": "a", "colour": "red"}),
            400,
            "colour",
            "unknown field",
        ),
        (json!({"name": ""}), 400, "name", "1 to 128"),
        (json!({"name": "x".repeat(129)}), 400, "name", "1 to 128"),
        (json!({"limits": {}}), 400, "name", "required"),
        (
            json!({"name": "a", "limits": {"requests_per_minute": -5}}),
            400,
            "limits.requests_per_minute",
            "non-negative integer",
        ),
        (
            json!({"name": "a", "limits": {"tokens_per_day": 5}}),
            400,
            "limits.tokens_per_day",
            "unknown field",
        ),
        (
            json!({"name": "a", "settings": {"weight": 0}}),
            400,
            "settings.weight",
            "1 to 1000",
        ),
    ];
    for (body, status, field, rule) in cases {
        let reply = admin(&server, "POST", "/tenants", Some(&body));
        assert_eq!(reply.status, status, "{body} -> {}", reply.body);
        assert_eq!(
            reply.body["error"]["param"], field,
            "{body} -> {}",
            reply.body
        );
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(field) && message.contains(rule),
            "{body} -> {message}"
        );
    }
    let not_json = server.send_as("POST", "/admin/v1/tenants", ADMIN, None);
    assert_eq!(not_json.status, 400, "an empty body: {}", not_json.body);

    let first = admin(&server, "POST", "/tenants", Some(&json!({"name": "dup"})));
    assert_eq!(first.status, 201, "{}", first.body);
    let again = admin(&server, "POST", "/tenants", Some(&json!({"name": "dup"})));
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(
        again.body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("name:"),
        "{}",
        again.body
    );
    let id = first.body["id"].as_str().unwrap();
    let bad_patch = admin(
        &server,
        "PATCH",
        &format!("/tenants/{id}"),
        Some(&json!({"settings": {"weight": 5000}})),
    );
    assert_eq!(bad_patch.status, 400, "{}", bad_patch.body);
    assert_eq!(bad_patch.body["error"]["param"], "settings.weight");
    assert_eq!(
        admin(&server, "GET", &format!("/tenants/{id}"), None).body["settings"],
        json!({}),
        "a refused update writes nothing"
    );
    let key_body = admin(
        &server,
        "POST",
        &format!("/tenants/{id}/keys"),
        Some(&json!({"scope": "all"})),
    );
    assert_eq!(key_body.status, 400, "{}", key_body.body);
    assert_eq!(key_body.body["error"]["param"], "scope");
    for path in [
        "/tenants/tn_missing",
        "/tenants/tn_missing/keys",
        "/tenants/tn_missing/usage",
    ] {
        let reply = admin(&server, "GET", path, None);
        assert_eq!(reply.status, 404, "{path}: {}", reply.body);
        assert!(reply.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tn_missing"));
    }
}
