//! Tenants never share cached work: the prefix and token caches are salted by tenant id, so
//! a tenant's keys share its cache and another tenant with the same input starts cold.

use serde_json::{json, Value};

use crate::server::{scratch_dir, Server};
use crate::tenant_fixture::{add_key, seed_tenant};

/// Long enough that its prefix spans several 32-token cache blocks.
const STATE: &str = "Order 5512 was placed on March 3rd. The customer paid by card, asked for express \
shipping to Oslo, and wrote twice since then: the parcel has not arrived, tracking has not moved for \
nine days, and they want either the parcel by Friday or their money back. They also mention that a \
previous order, 5379, arrived damaged and was replaced only after three weeks of emails.";

fn ask(server: &Server, key: &str) -> u64 {
    let reply = server.post_as(
        "/v1/decisions",
        key,
        &json!({"model": "smol", "input": STATE, "questions": [
            {"type": "predicate", "instructions": "The customer wants a refund or the parcel."},
            {"type": "predicate", "instructions": "The customer is angry."}
        ]}),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    cached(&reply.body)
}

fn cached(reply: &Value) -> u64 {
    reply["usage"]["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .expect("cached_tokens")
}

#[test]
fn tenant_b_never_hits_tenant_as_cache_but_as_keys_share_it() {
    let data = scratch_dir("isolation");
    let a = seed_tenant(&data, "alpha", Default::default());
    let b = seed_tenant(&data, "beta", Default::default());
    let a2 = {
        let store = decide_tenancy::sqlite::SqliteStore::open(&data).unwrap();
        add_key(&store, &a.id)
    };
    // Two questions share the input: their shared prefix is prefilled once and stored, so
    // one request warms its tenant's cache (the second question's cached tokens count too).
    let server = Server::ready(&["--data-dir", data.to_str().unwrap()]);
    let cold = ask(&server, &a.key);
    let warm = ask(&server, &a.key);
    assert!(
        warm >= cold + 32,
        "tenant a's repeat is served from its cache: {cold} -> {warm}"
    );
    assert_eq!(
        ask(&server, &a2),
        warm,
        "a tenant's second key shares its cache"
    );
    let other = ask(&server, &b.key);
    assert_eq!(other, cold, "tenant b starts cold on the same input");
    assert!(
        ask(&server, &b.key) >= cold + 32,
        "and then has its own cache"
    );

    // Metrics carry ids, never names.
    let metrics = server.get("/metrics").body;
    let metrics = metrics.as_str().unwrap();
    assert!(
        metrics.contains(&format!("tenant=\"{}\"", a.id)),
        "{metrics}"
    );
    assert!(!metrics.contains("alpha") && !metrics.contains("beta"));
}
