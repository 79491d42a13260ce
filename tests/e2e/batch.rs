//! `POST /v1/systemone/batch`: many states answered as one request, each item exactly what
//! `/v1/systemone` answers for it alone, a failed item failing alone, the batch's limits, the
//! tenant's rates taken once per batch, and the items' reads sharing the model worker.

use serde_json::{json, Map, Value};

use crate::endpoints::numbers;
use crate::server::{Reply, Server};

const TICKETS: [&str; 10] = [
    "I was charged twice for my subscription this month. Please refund the extra charge today.",
    "My parcel arrived with a crushed box and the lamp inside is broken.",
    "The app crashes every time I open the settings page on my phone.",
    "Can you tell me when my order will ship? It has been a week.",
    "Thank you, the replacement arrived quickly and works perfectly.",
    "I am furious: this is the third time the invoice shows the wrong amount!",
    "How do I change the delivery address for an order I placed yesterday?",
    "The password reset email never arrives, I checked the spam folder too.",
    "Please cancel my plan, I no longer need it, and confirm by email.",
    "The courier left the package at the wrong house and nobody answers the phone.",
];

/// The shared questions: one of each Jev type.
fn shared_questions() -> Value {
    json!({
        "refund": {"type": "noul", "instructions": "The customer asks for a refund."},
        "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
                 "criteria": {"billing": "payments and invoices", "shipping": null, "technical": null}},
        "anger": {"type": "score", "instructions": "How angry is the customer?",
                  "criteria": ["calm", "annoyed", "furious"]}
    })
}

/// Questions some items ask instead of the shared ones.
fn own_questions() -> Value {
    json!({
        "urgent": {"type": "noul", "instructions": "The customer needs an answer today."},
        "channel": {"type": "choice", "instructions": "How should we reply?",
                    "criteria": {"email": null, "phone": "urgent matters", "chat": null}}
    })
}

/// Item `i`'s state: text, or every fifth a JSON object, all different.
fn state(i: usize) -> Value {
    let text = format!("Ticket {}: {}", 1000 + i, TICKETS[i % TICKETS.len()]);
    if i % 5 == 3 {
        json!({"ticket": 1000 + i, "channel": "web", "body": text})
    } else {
        Value::String(text)
    }
}

/// The `{"error": ...}` of an item, asserting it is one.
fn item_error(item: &Value) -> &Map<String, Value> {
    item.get("error")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("expected an error item, got {item}"))
}

fn message(error: &Map<String, Value>) -> &str {
    error["message"].as_str().unwrap()
}

/// Asserts two Jev answer maps agree: the same questions, types and choices, and every
/// number within `tolerance`.
fn assert_same_answers(batched: &Value, alone: &Value, tolerance: f64, what: &str) {
    let (b, a) = (batched.as_object().unwrap(), alone.as_object().unwrap());
    assert_eq!(
        b.keys().collect::<Vec<_>>(),
        a.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (id, answer) in b {
        let other = &a[id];
        assert_eq!(answer["type"], other["type"], "{what} {id}");
        assert_eq!(answer.get("choice"), other.get("choice"), "{what} {id}");
        let (x, y) = (numbers(answer), numbers(other));
        assert_eq!(x.len(), y.len(), "{what} {id}: {answer} vs {other}");
        assert!(!x.is_empty(), "{what} {id}: {answer}");
        for (p, q) in x.iter().zip(&y) {
            assert!(
                (p - q).abs() < tolerance,
                "{what} {id}: batched {answer} vs alone {other}"
            );
        }
    }
}

/// A counter from `/metrics`.
fn metric(server: &Server, name: &str) -> u64 {
    let text = server.get("/metrics").body.as_str().unwrap().to_string();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
        .parse()
        .unwrap()
}

#[test]
fn fifty_items_answer_in_order_as_each_alone_and_one_fails_alone() {
    // Every read with the arithmetic of its lone request: one job per model-worker batch and
    // no cross-request prefix cache, so batched and lone answers agree to the last bits. With
    // dense f32 weights (the CPU default) a read packed with other jobs' prompts, or continuing
    // a cached prefix, rounds differently by up to ~1e-5 (measured 7e-6 on this model; a lone
    // request read twice differs by as much once its prefix is cached): a property of the
    // model worker, not of batches, tested with packing in
    // `the_items_reads_share_the_model_workers_batches`.
    let server = Server::ready(&["--max-batch-tokens", "1", "--prefix-cache-mib", "0"]);
    let failing = 23;
    let items: Vec<Value> = (0..50)
        .map(|i| match i {
            _ if i == failing => json!({"state": state(i), "questions": {
                "bogus": {"type": "nonesuch", "instructions": "Is this a real type?"}}}),
            _ if i % 9 == 4 => json!({"state": state(i), "questions": own_questions()}),
            _ => json!({"state": state(i)}),
        })
        .collect();
    let batch = json!({"model": "jev-latest", "questions": shared_questions(), "items": items});
    let reply = server.post("/v1/systemone/batch", &batch);
    assert_eq!(reply.status, 200, "{}", reply.body);
    for header in [
        "x-typesafe-request-id",
        "server-timing",
        "x-decide-server-ms",
    ] {
        assert!(reply.headers.contains_key(header), "no {header}");
    }
    assert!(reply.body["id"].as_str().unwrap().starts_with("req_"));
    let answered = reply.body["items"].as_array().unwrap();
    assert_eq!(answered.len(), 50);

    let error = item_error(&answered[failing]);
    assert_eq!(error["status"], 422, "{error:?}");
    assert!(
        message(error).starts_with("items[23].questions.bogus.type: no question-type plugin"),
        "{error:?}"
    );
    assert_eq!(
        error["loc"],
        json!(["body", "items", 23, "questions", "bogus", "type"])
    );

    let mut input_tokens = 0;
    for (i, item) in answered.iter().enumerate() {
        if i == failing {
            continue;
        }
        assert!(item.get("error").is_none(), "item {i}: {item}");
        assert!(item.get("partial_failures").is_none(), "item {i}: {item}");
        input_tokens += item["usage"]["input_tokens"].as_u64().unwrap();
        // The same state and questions alone on /v1/systemone.
        let questions = batch["items"][i]
            .get("questions")
            .cloned()
            .unwrap_or_else(shared_questions);
        let alone = server.post(
            "/v1/systemone",
            &json!({"state": state(i), "questions": questions}),
        );
        assert_eq!(alone.status, 200, "item {i}: {}", alone.body);
        let what = format!("item {i}");
        assert_same_answers(&item["answers"], &alone.body["answers"], 1e-6, &what);
        assert_eq!(
            item["usage"]["input_tokens"], alone.body["usage"]["input_tokens"],
            "item {i}"
        );
    }
    assert_eq!(reply.body["usage"]["input_tokens"], input_tokens);
    assert_eq!(reply.body["usage"]["output_tokens"], 0);
}

#[test]
fn batch_limits_and_item_errors() {
    let server = Server::ready(&[
        "--batch-max-items",
        "3",
        "--batch-max-input-bytes",
        "2000",
        "--max-input-bytes",
        "1000",
        "--max-prompt-tokens",
        "160",
    ]);
    let post = |items: Vec<Value>, questions: Value| -> Reply {
        server.post(
            "/v1/systemone/batch",
            &json!({"questions": questions, "items": items}),
        )
    };
    let short = |i: usize| json!({"state": TICKETS[i]});
    let detail = |reply: &Reply| reply.body["detail"][0].clone();

    // Four items over --batch-max-items 3: the whole batch is a 422 naming `items`.
    let many = post((0..4).map(short).collect(), shared_questions());
    assert_eq!(many.status, 422, "{}", many.body);
    assert_eq!(detail(&many)["loc"], json!(["body", "items"]));
    let msg = detail(&many)["msg"].as_str().unwrap().to_string();
    assert!(
        msg.contains("4 items exceed the limit of 3") && msg.contains("--batch-max-items"),
        "{msg}"
    );
    // Three states of 900 bytes (each within --max-input-bytes) over 2000 in all: 413.
    let long = |c: char| json!({"state": c.to_string().repeat(900)});
    let big = post(vec![long('a'), long('b'), long('c')], shared_questions());
    assert_eq!(big.status, 413, "{}", big.body);
    let msg = detail(&big)["msg"].as_str().unwrap().to_string();
    assert!(
        msg.contains("2700 bytes") && msg.contains("--batch-max-input-bytes"),
        "{msg}"
    );
    // No items.
    let none = post(vec![], shared_questions());
    assert_eq!(none.status, 422, "{}", none.body);
    assert_eq!(detail(&none)["loc"], json!(["body", "items"]));
    // Invalid shared questions fail the whole batch, whether the body or the plugin says so.
    let unknown = post(
        vec![short(0)],
        json!({"q": {"type": "nonesuch", "instructions": "?"}}),
    );
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    assert_eq!(
        detail(&unknown)["loc"],
        json!(["body", "questions", "q", "type"])
    );
    let untyped = post(vec![short(0)], json!({"q": {"instructions": "?"}}));
    assert_eq!(untyped.status, 422, "{}", untyped.body);
    assert_eq!(detail(&untyped)["type"], "missing");
    let criteria = post(
        vec![short(0)],
        json!({"q": {"type": "choice", "instructions": "?", "criteria": 5}}),
    );
    assert_eq!(criteria.status, 422, "{}", criteria.body);
    assert!(
        detail(&criteria)["msg"]
            .as_str()
            .unwrap()
            .starts_with("questions.q.criteria"),
        "{}",
        criteria.body
    );

    // An item's own errors fail that item only: its state over --max-input-bytes (413), an
    // empty state (422).
    let mixed = post(
        vec![
            short(1),
            json!({"state": "z".repeat(1200)}),
            json!({"state": ""}),
        ],
        shared_questions(),
    );
    assert_eq!(mixed.status, 200, "{}", mixed.body);
    let items = mixed.body["items"].as_array().unwrap();
    assert_eq!(
        items[0]["answers"].as_object().unwrap().len(),
        3,
        "{}",
        items[0]
    );
    let over = item_error(&items[1]);
    assert_eq!(over["status"], 413);
    assert_eq!(over["loc"], json!(["body", "items", 1, "state"]));
    assert!(
        message(over).starts_with("items[1].state: 1200 bytes")
            && message(over).contains("--max-input-bytes"),
        "{over:?}"
    );
    let empty = item_error(&items[2]);
    assert_eq!(empty["status"], 422);
    assert!(
        message(empty).starts_with("items[2].state: must not be empty"),
        "{empty:?}"
    );
    // An item whose every question fails (its prompts over --max-prompt-tokens) is an error
    // with the first failure, as the request alone would be; an item without questions of
    // its own in a batch without shared ones is an error too.
    let noul = json!({"q": {"type": "noul", "instructions": "Is this about billing?"}});
    let wordy = TICKETS.concat();
    let refused = post(
        vec![
            json!({"state": TICKETS[0], "questions": noul}),
            json!({"state": wordy, "questions": noul}),
            short(2),
        ],
        Value::Null,
    );
    assert_eq!(refused.status, 200, "{}", refused.body);
    let items = refused.body["items"].as_array().unwrap();
    assert!(items[0]["answers"]["q"]["noul"].is_number(), "{}", items[0]);
    let too_long = item_error(&items[1]);
    assert_eq!(too_long["status"], 400, "{too_long:?}");
    assert_eq!(too_long["code"], "context_length_exceeded");
    assert!(
        message(too_long).starts_with("items[1].questions.q: the prompt is"),
        "{too_long:?}"
    );
    let alone = server.post("/v1/systemone", &json!({"state": wordy, "questions": noul}));
    assert_eq!(alone.status, 400, "{}", alone.body);
    let missing = item_error(&items[2]);
    assert_eq!(missing["loc"], json!(["body", "items", 2, "questions"]));
}

#[test]
fn the_tenant_rates_take_the_batch_once_and_a_token_refusal_fails_only_unread_items() {
    let server = Server::ready(&[
        "--tenant-decisions-per-minute",
        "5",
        "--tenant-input-tokens-per-minute",
        "150",
        "--admin-key",
        "batch-admin",
    ]);
    let noul = json!({"q": {"type": "noul", "instructions": "Is this about billing?"}});
    // Three items of two questions: six decisions, more than a whole minute allows.
    let two = json!({"a": noul["q"], "b": noul["q"]});
    let items: Vec<Value> = (0..3).map(|i| json!({"state": TICKETS[i]})).collect();
    let never = server.post(
        "/v1/systemone/batch",
        &json!({"questions": two, "items": items}),
    );
    assert_eq!(never.status, 413, "{}", never.body);
    let msg = never.body["detail"][0]["msg"].as_str().unwrap();
    assert!(
        msg.contains("needs 6 questions") && msg.contains("decisions_per_minute = 5"),
        "{msg}"
    );

    // Four items of one question each (four decisions): one item's read fits the token rate,
    // after it none does, so the others fail with the 429 and the first keeps its answer.
    let items: Vec<Value> = (0..4).map(|i| json!({"state": TICKETS[i]})).collect();
    let reply = server.post(
        "/v1/systemone/batch",
        &json!({"questions": noul, "items": items}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let remaining = reply.headers["x-ratelimit-remaining-decisions"]
        .to_str()
        .unwrap();
    assert_eq!(remaining, "1", "four of five decisions taken at once");
    let items = reply.body["items"].as_array().unwrap();
    let answered: Vec<&Value> = items
        .iter()
        .filter(|i| i.get("answers").is_some())
        .collect();
    assert_eq!(answered.len(), 1, "{}", reply.body);
    let tokens = answered[0]["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        (76..=150).contains(&tokens),
        "the test needs one item to fit 150 tokens and two not to: {tokens}"
    );
    for item in items.iter().filter(|i| i.get("answers").is_none()) {
        let error = item_error(item);
        assert_eq!(error["status"], 429, "{error:?}");
        assert_eq!(error["code"], "rate_limit_exceeded");
        assert!(
            message(error).contains("input_tokens_per_minute = 150"),
            "{error:?}"
        );
    }
    assert_eq!(reply.body["usage"]["input_tokens"], tokens);

    // Two more decisions than the one left: the batch as a whole is a 429.
    let items: Vec<Value> = (0..2).map(|i| json!({"state": TICKETS[i]})).collect();
    let over = server.post(
        "/v1/systemone/batch",
        &json!({"questions": noul, "items": items}),
    );
    assert_eq!(over.status, 429, "{}", over.body);
    assert_eq!(over.body["detail"]["error_type"], "rate_limit_error");

    // Usage counts each item as a single request would be counted: the answered item as a
    // request with its decision and tokens, each refused item as rate-limited, besides the
    // two batches refused as a whole (a 413 and a 429).
    let usage = server.send_as(
        "GET",
        "/admin/v1/tenants/default/usage",
        "batch-admin",
        None,
    );
    assert_eq!(usage.status, 200, "{}", usage.body);
    let usage = &usage.body["usage"];
    assert_eq!(usage["requests"], 1, "{usage}");
    assert_eq!(usage["decisions"], 1, "{usage}");
    assert_eq!(usage["input_tokens"], tokens, "{usage}");
    assert_eq!(usage["rate_limited"], 3 + 1, "{usage}");
    assert_eq!(usage["rejected"], 1, "{usage}");
}

#[test]
fn the_items_reads_share_the_model_workers_batches() {
    let server = Server::ready(&[]);
    let before = |name: &str| metric(&server, name);
    let (batches, jobs, requests, items) = (
        before("decide_batches_total"),
        before("decide_batched_jobs_total"),
        before("decide_batch_requests_total"),
        before("decide_batch_items_total"),
    );
    let sent: Vec<Value> = (0..16).map(|i| json!({"state": state(i)})).collect();
    let reply = server.post(
        "/v1/systemone/batch",
        &json!({"questions": shared_questions(), "items": sent}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let grew = |name: &str, was: u64| metric(&server, name) - was;
    // Each item is one job (three questions, each one direct read, in one round) ...
    let jobs = grew("decide_batched_jobs_total", jobs);
    assert_eq!(jobs, 16);
    // ... and the worker took several of them into one batch: read one after another, each
    // job would be a batch of its own.
    let batches = grew("decide_batches_total", batches);
    assert!(
        batches < jobs,
        "{jobs} jobs in {batches} batches: the items were not read together"
    );
    assert_eq!(grew("decide_batch_requests_total", requests), 1);
    assert_eq!(grew("decide_batch_items_total", items), 16);
    // Read in packed passes with each other, items still answer as they do alone, within
    // the rounding of dense weights in passes of other sizes and over cached prefixes (see
    // the fifty-item test).
    for (i, item) in reply.body["items"].as_array().unwrap().iter().enumerate() {
        let alone = server.post(
            "/v1/systemone",
            &json!({"state": state(i), "questions": shared_questions()}),
        );
        assert_eq!(alone.status, 200, "item {i}: {}", alone.body);
        let what = format!("item {i}");
        assert_same_answers(&item["answers"], &alone.body["answers"], 1e-4, &what);
    }
}

#[test]
fn a_content_free_policy_reads_the_shared_questions_over_its_neutral_states_once() {
    // Exact arithmetic as in the fifty-item test, so answers compare to the last bits.
    let server = Server::ready(&[
        "--calibration",
        "contextual",
        "--max-batch-tokens",
        "1",
        "--prefix-cache-mib",
        "0",
    ]);
    let noul = json!({"q": {"type": "noul", "instructions": "The customer asks for a refund."}});
    let items = vec![
        json!({"state": TICKETS[0]}),
        json!({"state": TICKETS[1]}),
        json!({"state": TICKETS[2]}),
        json!({"state": TICKETS[3], "questions": own_questions()}),
    ];
    let reply = server.post(
        "/v1/systemone/batch",
        &json!({"questions": noul, "items": items}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answered = reply.body["items"].as_array().unwrap();
    let tokens = |item: &Value| item["usage"]["input_tokens"].as_u64().unwrap();
    let mut alone_tokens = Vec::new();
    for (i, item) in answered.iter().enumerate() {
        let questions = items[i]
            .get("questions")
            .cloned()
            .unwrap_or_else(|| noul.clone());
        let alone = server.post(
            "/v1/systemone",
            &json!({"state": TICKETS[i], "questions": questions}),
        );
        assert_eq!(alone.status, 200, "item {i}: {}", alone.body);
        let what = format!("item {i}");
        assert_same_answers(&item["answers"], &alone.body["answers"], 1e-6, &what);
        alone_tokens.push(tokens(&alone.body));
    }
    // The shared question's neutral reads are counted once, with the first item; an item
    // with questions of its own has them read over the neutral states for it.
    assert_eq!(tokens(&answered[0]), alone_tokens[0]);
    let neutral = alone_tokens[1] - tokens(&answered[1]);
    assert!(neutral > 0, "{}", reply.body);
    assert_eq!(tokens(&answered[2]), alone_tokens[2] - neutral);
    assert_eq!(tokens(&answered[3]), alone_tokens[3]);
    let sum: u64 = answered.iter().map(tokens).sum();
    assert_eq!(reply.body["usage"]["input_tokens"], sum);
}
