//! Per-tenant limits: rates (429 with Retry-After and `x-ratelimit-*` headers, or 413 when a
//! request can never fit a minute), concurrent and queued requests, and request limits
//! narrowed per tenant; in both wire formats. One server with a tenant per limit.

use std::time::Duration;

use serde_json::{json, Value};

use decide_tenancy::TenantLimits;

use crate::server::{scratch_dir, Reply, Server};
use crate::tenant_fixture::{seed_tenant, Seeded};

const STATE: &str = "Ticket 4471: the customer ordered a standing desk on May 2nd, paid by card, \
and says the motor stopped working after a week. They ask for a replacement.";

fn questions(count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| json!({"type": "predicate", "instructions": format!("Statement {i}: the customer asks for a replacement.")}))
        .collect()
}

fn openai(count: usize) -> Value {
    json!({"model": "smol", "input": STATE, "questions": questions(count)})
}

fn jev(count: usize) -> Value {
    let questions: serde_json::Map<String, Value> = (0..count)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "noul", "instructions": format!("Statement {i}: the customer asks for a replacement.")}),
            )
        })
        .collect();
    json!({"state": STATE, "questions": questions})
}

fn header<'a>(reply: &'a Reply, name: &str) -> &'a str {
    reply
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header: {:?}", reply.headers))
        .to_str()
        .unwrap()
}

/// An OpenAI-format 429: `rate_limit_error`, the message naming `needle`, Retry-After.
fn assert_429_openai(reply: &Reply, needle: &str) {
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(
        reply.body["error"]["type"], "rate_limit_error",
        "{}",
        reply.body
    );
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message}");
    let retry: u64 = header(reply, "retry-after").parse().unwrap();
    assert!((1..=60).contains(&retry), "retry-after {retry}");
}

/// A Jev-format 429: `{"detail": {"error_type": "rate_limit_error", "message": ...}}`.
fn assert_429_jev(reply: &Reply, needle: &str) {
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(
        reply.body["detail"]["error_type"], "rate_limit_error",
        "{}",
        reply.body
    );
    let message = reply.body["detail"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message}");
    assert!(reply.headers.contains_key("retry-after"));
}

struct Tenants {
    requests: Seeded,
    decisions: Seeded,
    tokens: Seeded,
    concurrent: Seeded,
    queued: Seeded,
    narrowed: Seeded,
}

fn start() -> (Server, Tenants) {
    let data = scratch_dir("limits");
    let seed = |name: &str, limits: TenantLimits| seed_tenant(&data, name, limits);
    let tenants = Tenants {
        requests: seed(
            "requests",
            TenantLimits {
                requests_per_minute: Some(2),
                ..Default::default()
            },
        ),
        decisions: seed(
            "decisions",
            TenantLimits {
                decisions_per_minute: Some(3),
                ..Default::default()
            },
        ),
        tokens: seed(
            "tokens",
            TenantLimits {
                input_tokens_per_minute: Some(200),
                ..Default::default()
            },
        ),
        concurrent: seed(
            "concurrent",
            TenantLimits {
                concurrent_requests: Some(1),
                queued_requests: Some(0),
                ..Default::default()
            },
        ),
        queued: seed(
            "queued",
            TenantLimits {
                concurrent_requests: Some(1),
                queued_requests: Some(1),
                ..Default::default()
            },
        ),
        narrowed: seed(
            "narrowed",
            TenantLimits {
                max_questions: Some(2),
                ..Default::default()
            },
        ),
    };
    let server = Server::ready(&["--data-dir", data.to_str().unwrap()]);
    (server, tenants)
}

#[test]
fn limits_per_tenant_refuse_with_429_headers_and_messages() {
    let (server, t) = start();

    // Requests per minute: two pass (with the headers), the third is a 429 in either format.
    let key = &t.requests.key;
    let first = server.post_as("/v1/decisions", key, &openai(1));
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(header(&first, "x-ratelimit-limit-requests"), "2");
    assert_eq!(header(&first, "x-ratelimit-remaining-requests"), "1");
    assert!(header(&first, "x-ratelimit-reset-requests").ends_with('s'));
    let second = server.post_as("/v1/systemone", key, &jev(1));
    assert_eq!(second.status, 200, "{}", second.body);
    let third = server.post_as("/v1/decisions", key, &openai(1));
    assert_429_openai(&third, "tenant limit requests_per_minute = 2 reached");
    assert!(
        third.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("PATCH /admin/v1/tenants/{}", t.requests.id)),
        "{}",
        third.body
    );
    assert_eq!(header(&third, "x-ratelimit-remaining-requests"), "0");
    assert_eq!(header(&third, "x-ratelimit-limit-requests"), "2");
    let jev_third = server.post_as("/v1/systemone", key, &jev(1));
    assert_429_jev(&jev_third, "requests_per_minute = 2");

    // Decisions per minute count questions; a request larger than a minute is a 413.
    let key = &t.decisions.key;
    let ok = server.post_as("/v1/decisions", key, &openai(2));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(header(&ok, "x-ratelimit-remaining-decisions"), "1");
    let over = server.post_as("/v1/systemone", key, &jev(2));
    assert_429_jev(&over, "decisions_per_minute = 3");
    let never = server.post_as("/v1/decisions", key, &openai(4));
    assert_eq!(never.status, 413, "{}", never.body);
    let message = never.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("decisions_per_minute = 3") && message.contains("can never pass"),
        "{message}"
    );

    // Input tokens per minute: taken when the prompts go to the model; a refusal fails the
    // whole request (not single questions).
    let key = &t.tokens.key;
    let ok = server.post_as("/v1/decisions", key, &openai(1));
    assert_eq!(ok.status, 200, "{}", ok.body);
    let used = ok.body["usage"]["input_tokens"].as_u64().unwrap();
    assert!(used < 200, "one question takes {used} tokens");
    assert_eq!(header(&ok, "x-ratelimit-limit-tokens"), "200");
    // What is left, plus what refilled since (one token per 0.3 s).
    let remaining: u64 = header(&ok, "x-ratelimit-remaining-tokens").parse().unwrap();
    assert!(
        (200 - used..200 - used + 10).contains(&remaining),
        "{remaining} left after {used}"
    );
    let over = server.post_as("/v1/decisions", key, &openai(1));
    assert_429_openai(&over, "tenant limit input_tokens_per_minute = 200 reached");
    assert!(over.body.get("answers").is_none(), "{}", over.body);
    let never = server.post_as("/v1/systemone", key, &jev(3));
    assert_eq!(never.status, 413, "{}", never.body);
    let message = never.body["detail"][0]["msg"].as_str().unwrap();
    assert!(
        message.contains("input_tokens_per_minute = 200"),
        "{message}"
    );

    // Narrowed request limits name the tenant's limit.
    let key = &t.narrowed.key;
    let over = server.post_as("/v1/decisions", key, &openai(3));
    assert_eq!(over.status, 400, "{}", over.body);
    let message = over.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("limit of 2") && message.contains("tenant limit max_questions"),
        "{message}"
    );
    assert_eq!(over.body["error"]["param"], "questions");
    let jev_over = server.post_as("/v1/systemone", key, &jev(3));
    assert_eq!(jev_over.status, 422, "{}", jev_over.body);
    assert!(jev_over.body["detail"][0]["msg"]
        .as_str()
        .unwrap()
        .contains("tenant limit max_questions"));
    let within = server.post_as("/v1/decisions", key, &openai(2));
    assert_eq!(within.status, 200, "{}", within.body);
}

/// A request slow enough (many questions on CPU) to still be running when others arrive.
fn slow() -> Value {
    openai(24)
}

#[test]
fn concurrent_and_queued_requests_are_limited_per_tenant() {
    let (server, t) = start();
    let server = std::sync::Arc::new(server);
    let in_background = |key: String, delay_ms: u64| {
        let server = server.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            server.post_as("/v1/decisions", &key, &slow())
        })
    };

    // One slot, no queue: a second request while the first runs is refused at once.
    let running = in_background(t.concurrent.key.clone(), 0);
    std::thread::sleep(Duration::from_millis(400));
    let refused = server.post_as("/v1/systemone", &t.concurrent.key, &jev(1));
    assert_429_jev(&refused, "concurrent_requests = 1");
    // Another tenant is not affected by this one's slots.
    let other = server.post_as("/v1/decisions", &t.narrowed.key, &openai(1));
    assert_eq!(other.status, 200, "{}", other.body);
    let first = running.join().unwrap();
    assert_eq!(first.status, 200, "{}", first.body);

    // One slot and one place in the queue: the second waits and succeeds, the third is a 429.
    let running = in_background(t.queued.key.clone(), 0);
    let waiting = in_background(t.queued.key.clone(), 300);
    std::thread::sleep(Duration::from_millis(700));
    let refused = server.post_as("/v1/decisions", &t.queued.key, &openai(1));
    assert_429_openai(&refused, "queued_requests = 1");
    assert_eq!(running.join().unwrap().status, 200);
    let waited = waiting.join().unwrap();
    assert_eq!(waited.status, 200, "{}", waited.body);
}

#[test]
fn a_server_wide_default_limits_the_default_tenant() {
    let server = Server::ready(&["--tenant-requests-per-minute", "1"]);
    let first = server.post("/v1/decisions", &openai(1));
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(header(&first, "x-ratelimit-limit-requests"), "1");
    let second = server.post("/v1/systemone", &jev(1));
    assert_429_jev(&second, "--tenant-requests-per-minute");
    let third = server.post("/v1/decisions", &openai(1));
    assert_429_openai(&third, "DECIDE_TENANT_REQUESTS_PER_MINUTE");
}
