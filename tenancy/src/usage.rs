//! What each tenant used: requests, decisions, tokens, model time; and what it was refused.
//!
//! Counters live in memory, per tenant id (`default` for the implicit tenant), and are read
//! by `GET /admin/v1/tenants/{id}/usage` and rendered into `/metrics` with a `tenant` label.
//! Labels are ids, never tenant names, so a metrics reader learns no team's name.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::Serialize;

/// One tenant's counters since the server started.
#[derive(Debug, Default)]
pub struct Counters {
    requests: AtomicU64,
    decisions: AtomicU64,
    refusals: AtomicU64,
    input_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    model_micros: AtomicU64,
    rejected: AtomicU64,
    rate_limited: AtomicU64,
}

/// A copy of one tenant's counters, as the admin API returns it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct UsageReport {
    /// Decision requests answered (at least one question decided or refused by a plugin).
    pub requests: u64,
    /// Questions answered.
    pub decisions: u64,
    /// Questions refused (plugin failure, readout capacity, prompt too long).
    pub refusals: u64,
    /// Prompt tokens read, cached ones included.
    pub input_tokens: u64,
    /// Of those, tokens whose KV came from a cache.
    pub cached_tokens: u64,
    /// Time the requests spent on the model worker (waiting included), ms.
    pub model_ms: u64,
    /// Requests refused before the model (bad input, limits of size), 4xx.
    pub rejected: u64,
    /// Requests refused by a rate, concurrency or queue limit (429).
    pub rate_limited: u64,
}

/// What one decided request (or batch item) used, as the server counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestUse {
    /// Questions answered.
    pub answers: u64,
    /// Questions refused (plugin failure, readout capacity, prompt too long).
    pub refusals: u64,
    /// Prompt tokens read, cached ones included.
    pub input_tokens: u64,
    /// Of those, tokens whose KV came from a cache.
    pub cached_tokens: u64,
    /// Time the request spent on the model worker (waiting included).
    pub model: std::time::Duration,
}

/// How a request that failed as a whole is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Refused by a rate, concurrency or queue limit (429).
    RateLimited,
    /// Refused for anything else (bad input, limits of size, deadlines).
    Rejected,
}

impl Counters {
    /// Records a decided request.
    pub fn record_decided(&self, used: &RequestUse) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.decisions.fetch_add(used.answers, Ordering::Relaxed);
        self.refusals.fetch_add(used.refusals, Ordering::Relaxed);
        self.input_tokens
            .fetch_add(used.input_tokens, Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(used.cached_tokens, Ordering::Relaxed);
        self.model_micros
            .fetch_add(used.model.as_micros() as u64, Ordering::Relaxed);
    }

    /// Records prompt tokens read for the tenant outside a request (its calibration fit).
    pub fn record_background_tokens(&self, tokens: usize) {
        self.input_tokens
            .fetch_add(tokens as u64, Ordering::Relaxed);
    }

    /// Records a request that failed as a whole.
    pub fn record_failure(&self, failure: Failure) {
        let counter = match failure {
            Failure::RateLimited => &self.rate_limited,
            Failure::Rejected => &self.rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn report(&self) -> UsageReport {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        UsageReport {
            requests: get(&self.requests),
            decisions: get(&self.decisions),
            refusals: get(&self.refusals),
            input_tokens: get(&self.input_tokens),
            cached_tokens: get(&self.cached_tokens),
            model_ms: get(&self.model_micros) / 1000,
            rejected: get(&self.rejected),
            rate_limited: get(&self.rate_limited),
        }
    }
}

/// One `/metrics` counter: its name, help text and how to read it from a report.
type Series = (&'static str, &'static str, fn(&UsageReport) -> u64);

/// Every tenant's counters.
#[derive(Debug, Default)]
pub struct Usage {
    tenants: RwLock<HashMap<String, Arc<Counters>>>,
}

impl Usage {
    /// The counters of `tenant` (an id or `default`), created on first use.
    pub fn of(&self, tenant: &str) -> Arc<Counters> {
        if let Some(counters) = self
            .tenants
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
        {
            return counters.clone();
        }
        self.tenants
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tenant.to_string())
            .or_default()
            .clone()
    }

    /// The counters of `tenant` now (zeros for a tenant that sent nothing yet).
    pub fn report(&self, tenant: &str) -> UsageReport {
        self.tenants
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
            .map(|c| c.report())
            .unwrap_or_default()
    }

    /// Drops a deleted tenant's counters, so its id leaves `/metrics`.
    pub fn forget(&self, tenant: &str) {
        self.tenants
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant);
    }

    /// Prometheus text: one series per counter and tenant.
    pub fn render(&self) -> String {
        let tenants = self.tenants.read().unwrap_or_else(|p| p.into_inner());
        let mut ids: Vec<&String> = tenants.keys().collect();
        ids.sort();
        let reports: Vec<(&String, UsageReport)> = ids
            .into_iter()
            .map(|id| (id, tenants[id].report()))
            .collect();
        let mut out = String::new();
        let series: [Series; 8] = [
            (
                "decide_tenant_requests_total",
                "Decision requests answered, per tenant.",
                |r| r.requests,
            ),
            (
                "decide_tenant_decisions_total",
                "Questions answered, per tenant.",
                |r| r.decisions,
            ),
            (
                "decide_tenant_refusals_total",
                "Questions refused, per tenant.",
                |r| r.refusals,
            ),
            (
                "decide_tenant_input_tokens_total",
                "Prompt tokens read, per tenant.",
                |r| r.input_tokens,
            ),
            (
                "decide_tenant_cached_tokens_total",
                "Prompt tokens served from a cache, per tenant.",
                |r| r.cached_tokens,
            ),
            (
                "decide_tenant_model_ms_total",
                "Milliseconds on the model worker, per tenant.",
                |r| r.model_ms,
            ),
            (
                "decide_tenant_rejected_requests_total",
                "Requests refused before the model, per tenant.",
                |r| r.rejected,
            ),
            (
                "decide_tenant_rate_limited_requests_total",
                "Requests refused by a tenant limit (429), per tenant.",
                |r| r.rate_limited,
            ),
        ];
        for (name, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (id, report) in &reports {
                let _ = writeln!(out, "{name}{{tenant=\"{id}\"}} {}", value(report));
            }
        }
        out
    }
}
