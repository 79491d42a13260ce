//! What tenancy costs a decision request, in process: the key lookup and the limit checks.
//!
//!     cargo run --release -p decide-server --example tenancy_overhead -- [--tenants 1000] [--reps 200000] [--report FILE.json]
//!
//! Seeds `--tenants` tenants with one key each into a scratch SQLite store, opens the
//! [`Directory`] over it and measures, per request (mean over `--reps`, µs):
//!
//! - `key lookup`: `Directory::authenticate` of a random tenant's `Authorization` header
//!   (SHA-256 of the key, snapshot map lookup, constant-time compare);
//! - `limit checks`: what [`decide_server::frontends`] does per request with every limit set:
//!   `Limiters::of` (the tenant's limiter), `check_request` (requests and decisions buckets),
//!   `admit_tokens`, a concurrent slot (`enter`, then release) and the `x-ratelimit-*` headers;
//! - `limits off`: the same calls for a tenant without limits (what a server without
//!   `--tenant-*` flags pays);
//! - reference, in the same run: one SHA-256 of a key, the floor of any key lookup.
//!
//! Prints the figures and writes them as JSON with `--report`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use axum::http::{header, HeaderMap, HeaderValue};
use decide_server::tenancy::limits::{Defaults, Limiters};
use decide_server::tenancy::sqlite::SqliteStore;
use decide_server::tenancy::{keys, Caller, Directory, KeyRecord, Store, Tenant, TenantLimits};

struct Args {
    tenants: usize,
    reps: usize,
    report: Option<String>,
}

fn args() -> Args {
    let mut args = Args {
        tenants: 1000,
        reps: 200_000,
        report: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--tenants" => args.tenants = value.parse().expect("--tenants N"),
            "--reps" => args.reps = value.parse().expect("--reps N"),
            "--report" => args.report = Some(value),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// Mean µs of `f` over `reps` calls.
fn mean_us(reps: usize, mut f: impl FnMut(usize)) -> f64 {
    for i in 0..reps.min(1000) {
        f(i);
    }
    let started = Instant::now();
    for i in 0..reps {
        f(i);
    }
    started.elapsed().as_secs_f64() * 1e6 / reps as f64
}

fn main() {
    let args = args();
    let dir = std::env::temp_dir().join(format!("decide-tenancy-overhead-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = SqliteStore::open(&dir).expect("open a scratch store");
    let limits = TenantLimits {
        requests_per_minute: Some(u64::from(u32::MAX)),
        decisions_per_minute: Some(u64::from(u32::MAX)),
        input_tokens_per_minute: Some(u64::from(u32::MAX)),
        concurrent_requests: Some(64),
        queued_requests: Some(64),
        ..Default::default()
    };
    let seeding = Instant::now();
    let mut presented = Vec::with_capacity(args.tenants);
    for i in 0..args.tenants {
        let id = keys::new_tenant_id();
        store
            .create_tenant(&Tenant {
                id: id.clone(),
                name: format!("tenant-{i}"),
                // Every other tenant without limits, for `limits off`.
                limits: if i % 2 == 0 {
                    limits.clone()
                } else {
                    TenantLimits::default()
                },
                settings: Default::default(),
                created_at: decide_server::tenancy::now_s(),
            })
            .unwrap();
        let key = keys::new_key();
        store
            .add_key(&KeyRecord {
                id: keys::new_key_id(),
                tenant_id: id,
                prefix: keys::shown_prefix(&key),
                hash: hex::encode(keys::hash(&key)),
                created_at: decide_server::tenancy::now_s(),
                revoked_at: None,
            })
            .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
        );
        presented.push((key, headers));
    }
    let seeded_s = seeding.elapsed().as_secs_f64();
    let store: Arc<dyn Store> = Arc::new(store);
    let directory = Directory::open(store, None).expect("open the directory");
    let callers: Vec<Caller> = presented
        .iter()
        .map(|(_, headers)| directory.authenticate(headers).expect("a valid key"))
        .collect();

    // A fixed pseudo-random order of tenants, the same for every measurement.
    let order: Vec<usize> = (0..args.reps)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % args.tenants)
        .collect();
    let pick = |i: usize| order[i % order.len()];

    let sha_us = mean_us(args.reps, |i| {
        black_box(keys::hash(&presented[pick(i)].0));
    });
    let lookup_us = mean_us(args.reps, |i| {
        black_box(directory.authenticate(&presented[pick(i)].1).unwrap());
    });

    let limiters = Limiters::new(Defaults::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let check = |limited: bool| {
        mean_us(args.reps, |i| {
            let mut tenant = pick(i);
            if (tenant % 2 == 0) != limited {
                tenant = (tenant + 1) % args.tenants;
            }
            let limiter = limiters.of(&callers[tenant]);
            limiter.check_request(2).unwrap();
            limiter.admit_tokens(300).unwrap();
            let slot = runtime.block_on(limiter.enter()).unwrap();
            black_box(limiter.headers());
            drop(slot);
        })
    };
    let limits_us = check(true);
    let off_us = check(false);

    println!(
        "tenancy overhead per request, {} tenants with a key each (seeded in {seeded_s:.1} s), mean of {} calls:",
        args.tenants, args.reps
    );
    println!("  key lookup (Directory::authenticate)      {lookup_us:8.3} µs");
    println!("  limit checks, every limit set             {limits_us:8.3} µs");
    println!("  limit checks, tenant without limits       {off_us:8.3} µs");
    println!("  reference: SHA-256 of one key             {sha_us:8.3} µs");
    println!(
        "  key lookup + limit checks                 {:8.3} µs",
        lookup_us + limits_us
    );
    if let Some(path) = &args.report {
        let report = serde_json::json!({
            "tenants": args.tenants,
            "reps": args.reps,
            "key_lookup_us": lookup_us,
            "limit_checks_us": limits_us,
            "limit_checks_without_limits_us": off_us,
            "reference_sha256_us": sha_us,
            "per_request_us": lookup_us + limits_us,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report).unwrap() + "\n")
            .expect("write the report");
        println!("wrote {path}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
