//! The cross-request prefix cache and the batching of concurrent requests.

use serde_json::{json, Value};

use crate::server::Server;

const STATE: &str = "Order 5512 was placed on March 3rd. The customer paid by card, asked for express \
shipping to Oslo, and wrote twice since then: the parcel has not arrived, tracking has not moved for \
nine days, and they want either the parcel by Friday or their money back.";

fn request(cache_key: &str, questions: Value) -> Value {
    json!({"model": "smol", "input": STATE, "prompt_cache_key": cache_key, "questions": questions})
}

fn two_questions() -> Value {
    json!([
        {"type": "predicate", "instructions": "The customer wants a refund or the parcel."},
        {"type": "choice", "instructions": "Which team owns this?", "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": "sales"}]}
    ])
}

fn cached(reply: &Value) -> u64 {
    reply["usage"]["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens")
}

fn metric(server: &Server, name: &str) -> f64 {
    server.metric(name)
}

#[test]
fn a_repeated_input_is_served_from_the_prefix_cache_of_its_tenant_only() {
    let server = Server::ready(&[]);
    let first = server.post("/v1/decisions", &request("tenant-a", two_questions()));
    assert_eq!(first.status, 200, "{}", first.body);
    let again = server.post("/v1/decisions", &request("tenant-a", two_questions()));
    assert_eq!(again.status, 200, "{}", again.body);
    let other = server.post("/v1/decisions", &request("tenant-b", two_questions()));
    assert_eq!(other.status, 200, "{}", other.body);

    // First request: question 2 reuses the prefix question 1 paid for. The repeat also serves
    // question 1's prefix from the cache (at a 16-token block boundary). Another tenant
    // with the same text starts cold.
    let (c1, c2, c3) = (
        cached(&first.body),
        cached(&again.body),
        cached(&other.body),
    );
    assert!(c1 > 0, "{}", first.body["usage"]);
    assert!(c2 >= c1 + 32, "repeat: {c2} cached tokens vs first {c1}");
    assert_eq!(c3, c1, "another tenant never hits tenant a's entries");
    assert!(metric(&server, "decide_prefix_cache_hits_total") >= 1.0);
    assert!(metric(&server, "decide_prefix_cache_bytes") > 0.0);

    // A cache hit changes nothing in the answers (f32 weights on CPU: float rounding only).
    for i in 0..2 {
        let (a, b) = (&first.body["answers"][i], &again.body["answers"][i]);
        let pa = crate::endpoints::numbers(a);
        let pb = crate::endpoints::numbers(b);
        assert_eq!(pa.len(), pb.len());
        for (x, y) in pa.iter().zip(&pb) {
            assert!((x - y).abs() < 1e-4, "question {i}: {a} vs {b}");
        }
    }
}

#[test]
fn short_questions_of_one_tenant_share_their_common_beginning_through_the_cache() {
    let server = Server::ready(&[]);
    let questions = [
        "The customer wants a refund.",
        "The parcel was sent by express.",
        "The customer paid by card.",
        "The customer lives in Oslo.",
    ];
    let ask = |key: &str, q: &str| {
        let reply = server.post(
            "/v1/decisions",
            &request(key, json!([{"type": "predicate", "instructions": q}])),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body
    };
    let replies: Vec<Value> = questions.iter().map(|q| ask("tenant-a", q)).collect();
    let hits: Vec<u64> = replies.iter().map(cached).collect();
    // The first is read whole, and every full block of it is stored; the others share the
    // template header and the input with it, to the block where their question begins.
    assert_eq!(hits[0], 0, "{hits:?}");
    assert!(
        hits[1] >= 64 && hits[1..].iter().all(|&h| h == hits[1]),
        "later questions start from the stored beginning: {hits:?}"
    );
    assert!(metric(&server, "decide_prefix_cache_hits_total") >= 2.0);
    // Another tenant asking the same starts cold, and reads the same answers.
    for (q, reply) in questions.iter().zip(&replies).skip(2) {
        let cold = ask(&format!("cold-{q}"), q);
        assert_eq!(cached(&cold), 0);
        let (a, b) = (
            crate::endpoints::numbers(&reply["answers"][0]),
            crate::endpoints::numbers(&cold["answers"][0]),
        );
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-4, "{q}: {reply} vs {cold}");
        }
    }
}

/// The same request again reads only what follows each prompt's last full block: every
/// prompt's blocks were stored, the questions' own tokens included, not only what its
/// prompts share. The blocks are counted in `/metrics` and `/health`.
#[test]
fn a_request_sent_again_reads_only_each_prompts_last_block() {
    let server = Server::ready(&[]);
    let body = request("tenant-a", two_questions());
    let first = server.post("/v1/decisions", &body);
    assert_eq!(first.status, 200, "{}", first.body);
    let blocks_before = metric(&server, "decide_prefix_cache_block_hits_total");
    let again = server.post("/v1/decisions", &body);
    assert_eq!(again.status, 200, "{}", again.body);
    let input = again.body["usage"]["input_tokens"]
        .as_u64()
        .expect("input_tokens");
    let prompts: u64 = again.body["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .map(|a| {
            a["extra"]["audit"]["permutation_shifts"]
                .as_array()
                .map_or(1, |s| s.len() as u64)
        })
        .sum();
    let computed = input - cached(&again.body);
    assert!(
        computed <= prompts * 16,
        "{computed} of {input} tokens computed again for {prompts} prompts: {}",
        again.body["usage"]
    );
    assert!(metric(&server, "decide_prefix_cache_block_hits_total") > blocks_before);
    assert!(metric(&server, "decide_prefix_cache_blocks") > 0.0);
    let health = server.get("/health");
    let blocks = &health.body["prefix_cache"]["block_hits"];
    assert!(blocks.as_u64().is_some_and(|b| b > 0), "{}", health.body);
    // The answers are the reads of the first request (CPU: bit for bit; f32 prints).
    for i in 0..2 {
        let (a, b) = (&first.body["answers"][i], &again.body["answers"][i]);
        assert_eq!(
            crate::endpoints::numbers(a),
            crate::endpoints::numbers(b),
            "question {i}"
        );
    }
}

#[test]
fn the_prefix_cache_can_be_turned_off() {
    let server = Server::ready(&["--prefix-cache-mib", "0"]);
    let first = server.post("/v1/decisions", &request("k", two_questions()));
    let again = server.post("/v1/decisions", &request("k", two_questions()));
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(cached(&first.body), cached(&again.body));
    assert_eq!(metric(&server, "decide_prefix_cache_hits_total"), 0.0);
}

#[test]
fn concurrent_requests_share_forward_passes_and_answer_like_lone_requests() {
    // A 200 ms window makes the batching deterministic on a slow CI machine.
    let server = Server::ready(&["--batch-wait-us", "200000"]);
    let questions: Vec<Value> = [
        "The parcel has arrived.",
        "The customer paid by card.",
        "The customer is happy.",
        "The order was placed in March.",
        "The customer wrote more than once.",
        "Express shipping was requested.",
    ]
    .iter()
    .map(|q| json!([{"type": "predicate", "instructions": q}]))
    .collect();
    // Different tenants: no request can reuse another's cached prefix, so every request's
    // full prompt is read in the shared passes.
    let alone: Vec<Value> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let reply = server.post("/v1/decisions", &request(&format!("alone-{i}"), q.clone()));
            assert_eq!(reply.status, 200, "{}", reply.body);
            reply.body
        })
        .collect();
    let batches_before = metric(&server, "decide_batches_total");
    let jobs_before = metric(&server, "decide_batched_jobs_total");
    let busy_before = metric(&server, "decide_model_busy_seconds_total");
    let started = std::time::Instant::now();
    let together: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = questions
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let server = &server;
                scope.spawn(move || {
                    server
                        .post(
                            "/v1/decisions",
                            &request(&format!("together-{i}"), q.clone()),
                        )
                        .body
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let batches = metric(&server, "decide_batches_total") - batches_before;
    let jobs = metric(&server, "decide_batched_jobs_total") - jobs_before;
    assert_eq!(jobs, questions.len() as f64);
    // One worker reads the batches: its busy time is some of this phase's wall time, not more.
    let busy = metric(&server, "decide_model_busy_seconds_total") - busy_before;
    let wall = started.elapsed().as_secs_f64();
    assert!(
        busy > 0.0 && busy <= wall,
        "model busy {busy:.3} s in a {wall:.3} s phase"
    );
    assert!(
        batches < jobs,
        "{jobs} concurrent requests ran in {batches} batches"
    );
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        let (pa, pb) = (
            a["answers"][0]["probability"].as_f64().unwrap(),
            b["answers"][0]["probability"].as_f64().expect("an answer"),
        );
        assert!(
            (pa - pb).abs() < 1e-4,
            "request {i}: alone {pa}, batched {pb}"
        );
    }
}

/// Batches per job while `clients` threads each send `rounds` one-question requests one
/// after another (each its next as soon as it has its answer), all starting together.
fn closed_loop_batches_per_job(server: &Server, clients: usize, rounds: usize) -> f64 {
    let batches_before = metric(server, "decide_batches_total");
    let jobs_before = metric(server, "decide_batched_jobs_total");
    let start = std::sync::Barrier::new(clients);
    std::thread::scope(|scope| {
        for client in 0..clients {
            let start = &start;
            scope.spawn(move || {
                start.wait();
                for round in 0..rounds {
                    let question = format!("Ticket {round} of client {client} is about a refund.");
                    let body = request(
                        &format!("client-{client}"),
                        json!([{"type": "predicate", "instructions": question}]),
                    );
                    let reply = server.post("/v1/decisions", &body);
                    assert_eq!(reply.status, 200, "{}", reply.body);
                }
            });
        }
    });
    let jobs = metric(server, "decide_batched_jobs_total") - jobs_before;
    assert_eq!(jobs, (clients * rounds) as f64);
    (metric(server, "decide_batches_total") - batches_before) / jobs
}

#[test]
fn clients_sending_one_request_after_another_share_one_batch_per_round() {
    // Four closed-loop clients. The first arrival is read alone while the other three wait;
    // without a window the worker then reads those three while the first client's next
    // request is on its way, and the two cohorts alternate for good (a batch per two jobs).
    // With `--batch-rejoin-us` the worker learns that the answered clients come back within
    // the window (4 rounds, while the cohorts still alternate), then waits for them, and
    // from then on every round is one batch of four. The cap is long here, so the window is
    // half a read (tens of ms on CPU), which a slow CI machine's turnaround fits.
    let (clients, rounds) = (4, 12);
    let split = Server::ready(&["--batch-rejoin-us", "0"]);
    let alternating = closed_loop_batches_per_job(&split, clients, rounds);
    let split_rounds = metric(&split, "decide_rejoin_rounds_back_total");
    drop(split);
    let merged = Server::ready(&["--batch-rejoin-us", "100000"]);
    let together = closed_loop_batches_per_job(&merged, clients, rounds);
    let back = metric(&merged, "decide_rejoin_rounds_back_total");
    let waited = metric(&merged, "decide_rejoin_wait_seconds_total");
    eprintln!("batches per job: {alternating:.3} without the window, {together:.3} with it ({back} rounds back, {waited:.3} s waited)");
    assert_eq!(split_rounds, 0.0, "no window, no rounds");
    assert!(
        back >= 4.0,
        "{back} rounds back: the window was never trusted"
    );
    assert!(
        alternating >= 0.4,
        "without the window {alternating:.2} batches per job: the cohorts did not alternate"
    );
    assert!(
        together <= 0.35,
        "with the window {together:.2} batches per job (one batch per round after the first few: ~0.3)"
    );
}
