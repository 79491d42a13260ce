//! Per-tenant limits on decision requests: three rates (token buckets), how many requests
//! are answered at once, and how many may wait for that.
//!
//! This module owns the limiter state of every tenant, keyed by tenant id and kept across
//! directory reloads, so a reload (a key created, another tenant changed) does not refill
//! anyone's buckets; a tenant's limiter is rebuilt (full buckets, fresh slots) only when its
//! effective limits change. An effective limit is the tenant's own value, else the
//! server-wide default flag (`--tenant-*`); 0 means no limit.
//!
//! The default tenant (no tenants configured, or the operator's `--api-key`) gets the
//! server-wide defaults too: the flags then rate-limit a single-key server the same way, and
//! no caller escapes them by presenting the operator's key.
//!
//! - Rates are GCRA token buckets from the `governor` crate with a burst of the whole
//!   minute: `requests_per_minute` and `decisions_per_minute` are taken before any model
//!   work ([`TenantLimiter::check_request`]), `input_tokens_per_minute` when the pipeline
//!   hands prompt tokens to the model worker ([`TenantLimiter::admit_tokens`]). A request
//!   that needs more than a whole minute's budget can never pass and gets a 413 naming the
//!   limit instead of a 429 to retry forever.
//! - Concurrency is a tokio semaphore of `concurrent_requests` slots; up to
//!   `queued_requests` requests wait for one, asynchronously ([`TenantLimiter::enter`]);
//!   beyond that a request gets 429 at once.
//! - Every 429 carries `Retry-After` and OpenAI's `x-ratelimit-{limit,remaining,reset}-*`
//!   headers (`-requests`, `-tokens` for input tokens, and our own `-decisions`), and so do
//!   successful responses ([`TenantLimiter::headers`]), as OpenAI's do.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::shared_rates::{SharedRates, Take};
use crate::Refused;
use crate::{Caller, TenantLimits};

/// Seconds a request refused for concurrency is told to wait: slots free up as requests
/// finish, typically well within a second.
const BUSY_RETRY_AFTER_S: u64 = 1;

/// The server-wide defaults (`--tenant-*` flags); 0: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defaults {
    pub requests_per_minute: u64,
    pub decisions_per_minute: u64,
    pub input_tokens_per_minute: u64,
    pub concurrent_requests: u64,
    pub queued_requests: u64,
}

/// One limit as it applies: its value (0: none) and whether the tenant's record set it
/// (else it is the server-wide default), which decides what a message tells to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Value {
    value: u64,
    from_tenant: bool,
}

/// A tenant's effective limits; a change rebuilds its limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Effective {
    requests: Value,
    decisions: Value,
    tokens: Value,
    concurrent: Value,
    queued: Value,
}

impl Effective {
    fn of(limits: Option<&TenantLimits>, defaults: &Defaults) -> Effective {
        let pick = |own: Option<u64>, default: u64| match own {
            Some(value) => Value {
                value,
                from_tenant: true,
            },
            None => Value {
                value: default,
                from_tenant: false,
            },
        };
        let l = limits.cloned().unwrap_or_default();
        Effective {
            requests: pick(l.requests_per_minute, defaults.requests_per_minute),
            decisions: pick(l.decisions_per_minute, defaults.decisions_per_minute),
            tokens: pick(l.input_tokens_per_minute, defaults.input_tokens_per_minute),
            concurrent: pick(l.concurrent_requests, defaults.concurrent_requests),
            queued: pick(l.queued_requests, defaults.queued_requests),
        }
    }
}

/// Which rate a bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requests,
    Decisions,
    Tokens,
}

impl Kind {
    /// The limit's name in the tenant record and in messages.
    fn setting(self) -> &'static str {
        match self {
            Kind::Requests => "requests_per_minute",
            Kind::Decisions => "decisions_per_minute",
            Kind::Tokens => "input_tokens_per_minute",
        }
    }

    /// The server-wide default's flag and environment variable.
    fn flag(self) -> &'static str {
        match self {
            Kind::Requests => "--tenant-requests-per-minute / DECIDE_TENANT_REQUESTS_PER_MINUTE",
            Kind::Decisions => "--tenant-decisions-per-minute / DECIDE_TENANT_DECISIONS_PER_MINUTE",
            Kind::Tokens => {
                "--tenant-input-tokens-per-minute / DECIDE_TENANT_INPUT_TOKENS_PER_MINUTE"
            }
        }
    }

    /// The suffix of its `x-ratelimit-*` headers.
    fn header(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Decisions => "decisions",
            Kind::Tokens => "tokens",
        }
    }

    /// What one unit of it is, for messages.
    fn unit(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Decisions => "questions",
            Kind::Tokens => "prompt tokens",
        }
    }
}

type Bucket = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

/// One per-minute token bucket with a burst of the whole minute.
struct Rate {
    kind: Kind,
    limit: Value,
    per_minute: u32,
    bucket: Bucket,
    /// What the bucket held after the last cell taken, and when: with the refill rate, what
    /// it holds now (governor has no look without taking).
    last: Mutex<Option<(u32, Instant)>>,
}

impl Rate {
    fn new(kind: Kind, limit: Value) -> Option<Rate> {
        let per_minute = u32::try_from(limit.value).unwrap_or(u32::MAX);
        let quota = Quota::per_minute(NonZeroU32::new(per_minute)?);
        Some(Rate {
            kind,
            limit,
            per_minute,
            bucket: RateLimiter::direct(quota).with_middleware::<StateInformationMiddleware>(),
            last: Mutex::new(None),
        })
    }

    /// Time to refill one cell.
    fn period(&self) -> Duration {
        Duration::from_secs(60) / self.per_minute
    }

    /// Takes `n` cells, or says why not: 429 to retry later, or 413 when `n` exceeds the
    /// whole minute.
    fn take(&self, n: usize, limiter: &TenantLimiter) -> Result<(), Refused> {
        let Some(cells) = NonZeroU32::new(u32::try_from(n).unwrap_or(u32::MAX)) else {
            return Ok(());
        };
        match self.bucket.check_n(cells) {
            Ok(Ok(snapshot)) => {
                self.record(snapshot.remaining_burst_capacity());
                Ok(())
            }
            Ok(Err(not_until)) => Err(self.refused(
                n,
                not_until.wait_time_from(DefaultClock::default().now()),
                limiter,
            )),
            Err(_) => Err(self.too_large(n, limiter)),
        }
    }

    /// [`take`](Self::take) from the bucket the replicas share; the replica's own bucket
    /// when the shared one cannot be reached.
    async fn take_shared(
        &self,
        n: usize,
        limiter: &TenantLimiter,
        shared: &dyn SharedRates,
    ) -> Result<(), Refused> {
        let Ok(cells) = u32::try_from(n) else {
            return Err(self.too_large(n, limiter));
        };
        if cells == 0 {
            return Ok(());
        }
        if cells > self.per_minute {
            return Err(self.too_large(n, limiter));
        }
        // The limit is part of the name: a changed limit starts a full bucket, as a rebuilt
        // local limiter does.
        let bucket = format!(
            "{}/{}/{}",
            limiter.tenant.as_deref().unwrap_or("default"),
            self.kind.setting(),
            self.per_minute
        );
        match shared.take(bucket, cells, self.per_minute).await {
            Ok(Take::Taken { remaining }) => {
                self.record(remaining);
                Ok(())
            }
            Ok(Take::Refused { wait }) => {
                self.record(0);
                Err(self.refused(n, wait, limiter))
            }
            Err(error) => {
                tracing::warn!(%error, limit = self.kind.setting(), "the shared rate limit cannot be read; this replica's own bucket applies");
                self.take(n, limiter)
            }
        }
    }

    /// Remembers what the bucket holds after a take, for the `x-ratelimit-*` headers.
    fn record(&self, remaining: u32) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((remaining, Instant::now()));
    }

    /// The 429 of a take refused for `wait`.
    fn refused(&self, n: usize, wait: Duration, limiter: &TenantLimiter) -> Refused {
        let retry_after_s = wait.as_secs_f64().ceil().max(1.0) as u64;
        let mut headers = limiter.headers();
        // The refused bucket: what it lacks, and when this request would fit.
        set_header(
            &mut headers,
            "remaining",
            self.kind,
            self.remaining().to_string(),
        );
        set_header(&mut headers, "reset", self.kind, duration_text(wait));
        Refused::RateLimited {
            message: format!(
                "tenant limit {} = {} reached: this request needs {n} {}; retry in {retry_after_s} s ({})",
                self.kind.setting(),
                self.limit.value,
                self.kind.unit(),
                limiter.how_to_change(self.limit, self.kind.flag()),
            ),
            retry_after_s,
            headers,
        }
    }

    /// The 413 of a take larger than the whole minute.
    fn too_large(&self, n: usize, limiter: &TenantLimiter) -> Refused {
        Refused::TooLarge {
            message: format!(
                "this request needs {n} {} but tenant limit {} = {} allows at most that many in a whole minute, so it can never pass; send a smaller request ({})",
                self.kind.unit(),
                self.kind.setting(),
                self.limit.value,
                limiter.how_to_change(self.limit, self.kind.flag()),
            ),
        }
    }

    /// Cells in the bucket now.
    fn remaining(&self) -> u32 {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        match last {
            None => self.per_minute,
            Some((left, at)) => {
                let refilled = at.elapsed().as_nanos() / self.period().as_nanos().max(1);
                (u128::from(left) + refilled).min(u128::from(self.per_minute)) as u32
            }
        }
    }

    /// Time until the bucket is full again.
    fn reset(&self) -> Duration {
        self.period() * (self.per_minute - self.remaining())
    }
}

/// Sets `x-ratelimit-{what}-{kind}` in a header list.
fn set_header(headers: &mut Vec<(String, String)>, what: &str, kind: Kind, value: String) {
    let name = format!("x-ratelimit-{what}-{}", kind.header());
    match headers.iter_mut().find(|(n, _)| *n == name) {
        Some(entry) => entry.1 = value,
        None => headers.push((name, value)),
    }
}

/// A duration as OpenAI's headers write it (Go's format): `20ms`, `1s`, `6m0s`, `1h2m3s`.
pub fn duration_text(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        return format!("{}ms", duration.as_millis());
    }
    let total = duration.as_secs_f64().ceil() as u64;
    let (hours, minutes, seconds) = (total / 3600, total % 3600 / 60, total % 60);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, _) => format!("{minutes}m{seconds}s"),
        _ => format!("{hours}h{minutes}m{seconds}s"),
    }
}

/// A tenant's limiter: its buckets and slots.
pub struct TenantLimiter {
    /// The tenant's id (`None`: the default tenant), for messages.
    tenant: Option<String>,
    effective: Effective,
    requests: Option<Rate>,
    decisions: Option<Rate>,
    tokens: Option<Rate>,
    /// `concurrent_requests` slots (none: no limit).
    slots: Option<Arc<Semaphore>>,
    /// Requests waiting for a slot now.
    waiting: AtomicUsize,
}

impl std::fmt::Debug for TenantLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantLimiter")
            .field("tenant", &self.tenant)
            .field("effective", &self.effective)
            .finish_non_exhaustive()
    }
}

impl TenantLimiter {
    fn new(tenant: Option<String>, effective: Effective) -> TenantLimiter {
        let slots = usize::try_from(effective.concurrent.value)
            .ok()
            .filter(|&n| n > 0)
            .map(|n| Arc::new(Semaphore::new(n.min(Semaphore::MAX_PERMITS))));
        TenantLimiter {
            tenant,
            requests: Rate::new(Kind::Requests, effective.requests),
            decisions: Rate::new(Kind::Decisions, effective.decisions),
            tokens: Rate::new(Kind::Tokens, effective.tokens),
            effective,
            slots,
            waiting: AtomicUsize::new(0),
        }
    }

    /// What a message tells to change a limit: the tenant's record, or the server-wide flag.
    fn how_to_change(&self, limit: Value, flag: &str) -> String {
        match (&self.tenant, limit.from_tenant) {
            (Some(id), true) => {
                format!("the operator sets it with PATCH /admin/v1/tenants/{id}")
            }
            (Some(id), false) => format!(
                "the server-wide default, setting {flag}; the operator sets the tenant's own with PATCH /admin/v1/tenants/{id}"
            ),
            (None, _) => format!("the server-wide default, setting {flag}"),
        }
    }

    /// Takes one request and `questions` decisions from the tenant's rates, before any model
    /// work. A request with more questions than a whole minute allows is refused (413)
    /// before it takes anything.
    pub fn check_request(&self, questions: usize) -> Result<(), Refused> {
        if let Some(decisions) = &self.decisions {
            if questions > decisions.per_minute as usize {
                return decisions.take(questions, self);
            }
        }
        if let Some(requests) = &self.requests {
            requests.take(1, self)?;
        }
        if let Some(decisions) = &self.decisions {
            decisions.take(questions, self)?;
        }
        Ok(())
    }

    /// [`check_request`](Self::check_request) against the buckets the replicas share
    /// ([`SharedRates`]), so the tenant's request and decision rates hold across replicas.
    pub async fn check_request_shared(
        &self,
        questions: usize,
        shared: &dyn SharedRates,
    ) -> Result<(), Refused> {
        if let Some(decisions) = &self.decisions {
            if questions > decisions.per_minute as usize {
                return Err(decisions.too_large(questions, self));
            }
        }
        if let Some(requests) = &self.requests {
            requests.take_shared(1, self, shared).await?;
        }
        if let Some(decisions) = &self.decisions {
            decisions.take_shared(questions, self, shared).await?;
        }
        Ok(())
    }

    /// Takes `tokens` prompt tokens from the tenant's input-token rate (the pipeline calls
    /// it before each read on the model worker).
    pub fn admit_tokens(&self, tokens: usize) -> Result<(), Refused> {
        match &self.tokens {
            Some(rate) => rate.take(tokens, self),
            None => Ok(()),
        }
    }

    /// Whether prompt tokens are limited at all (no hook is installed otherwise).
    pub fn limits_tokens(&self) -> bool {
        self.tokens.is_some()
    }

    /// Waits for one of the tenant's concurrent slots, or refuses (429) when
    /// `queued_requests` are waiting already. The slot is held until the permit drops.
    pub async fn enter(&self) -> Result<Option<OwnedSemaphorePermit>, Refused> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Ok(Some(permit));
        }
        let queued = usize::try_from(self.effective.queued.value).unwrap_or(usize::MAX);
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= queued {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            let (concurrent, queue) = (self.effective.concurrent, self.effective.queued);
            return Err(Refused::RateLimited {
                message: format!(
                    "tenant limit concurrent_requests = {} reached and queued_requests = {} are waiting already; retry in {BUSY_RETRY_AFTER_S} s (concurrent_requests: {}; queued_requests: {})",
                    concurrent.value,
                    queue.value,
                    self.how_to_change(concurrent, "--tenant-concurrent-requests / DECIDE_TENANT_CONCURRENT_REQUESTS"),
                    self.how_to_change(queue, "--tenant-queued-requests / DECIDE_TENANT_QUEUED_REQUESTS"),
                ),
                retry_after_s: BUSY_RETRY_AFTER_S,
                headers: self.headers(),
            });
        }
        /// Leaves the queue however the wait ends (a slot, or the client went away).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _waiting = Waiting(&self.waiting);
        slots
            .clone()
            .acquire_owned()
            .await
            .map(Some)
            .map_err(|_| Refused::Internal("the tenant's slots were closed".into()))
    }

    /// OpenAI's `x-ratelimit-*` headers for every rate the tenant has: limit, what remains
    /// now, and when the bucket is full again.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut headers = Vec::new();
        for rate in [&self.requests, &self.tokens, &self.decisions]
            .into_iter()
            .flatten()
        {
            set_header(
                &mut headers,
                "limit",
                rate.kind,
                rate.per_minute.to_string(),
            );
            set_header(
                &mut headers,
                "remaining",
                rate.kind,
                rate.remaining().to_string(),
            );
            set_header(
                &mut headers,
                "reset",
                rate.kind,
                duration_text(rate.reset()),
            );
        }
        headers
    }
}

/// Every tenant's limiter.
#[derive(Default)]
pub struct Limiters {
    defaults: Defaults,
    tenants: RwLock<HashMap<String, Arc<TenantLimiter>>>,
    /// The request and decision buckets the replicas share (a Postgres store), if any.
    shared: Option<Arc<dyn SharedRates>>,
}

impl std::fmt::Debug for Limiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiters")
            .field("defaults", &self.defaults)
            .field("shared", &self.shared.is_some())
            .finish_non_exhaustive()
    }
}

impl Limiters {
    pub fn new(defaults: Defaults) -> Limiters {
        Limiters {
            defaults,
            tenants: RwLock::new(HashMap::new()),
            shared: None,
        }
    }

    /// Limiters whose request and decision rates are taken from `shared` buckets.
    pub fn with_shared(defaults: Defaults, shared: Option<Arc<dyn SharedRates>>) -> Limiters {
        Limiters {
            shared,
            ..Limiters::new(defaults)
        }
    }

    /// Takes one request and `questions` decisions from `limiter`'s rates: from the shared
    /// buckets when the store has them, else from the limiter's own.
    pub async fn check_request(
        &self,
        limiter: &TenantLimiter,
        questions: usize,
    ) -> Result<(), Refused> {
        match &self.shared {
            Some(shared) => {
                limiter
                    .check_request_shared(questions, shared.as_ref())
                    .await
            }
            None => limiter.check_request(questions),
        }
    }

    /// The limiter of a caller, built on first use and rebuilt when its limits changed.
    pub fn of(&self, caller: &Caller) -> Arc<TenantLimiter> {
        let effective = Effective::of(caller.tenant().map(|t| &t.limits), &self.defaults);
        let key = caller.label();
        if let Some(limiter) = self
            .tenants
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .filter(|l| l.effective == effective)
        {
            return limiter.clone();
        }
        let mut tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        match tenants.get(key) {
            // Another request rebuilt it meanwhile.
            Some(limiter) if limiter.effective == effective => limiter.clone(),
            _ => {
                let limiter = Arc::new(TenantLimiter::new(
                    caller.tenant_id().map(str::to_string),
                    effective,
                ));
                tenants.insert(key.to_string(), limiter.clone());
                limiter
            }
        }
    }

    /// Drops a deleted tenant's limiter.
    pub fn forget(&self, tenant: &str) {
        self.tenants
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(limits: TenantLimits) -> TenantLimiter {
        TenantLimiter::new(
            Some("tn_test".into()),
            Effective::of(Some(&limits), &Defaults::default()),
        )
    }

    #[test]
    fn durations_are_written_as_openai_does() {
        assert_eq!(duration_text(Duration::from_millis(20)), "20ms");
        assert_eq!(duration_text(Duration::from_secs(1)), "1s");
        assert_eq!(duration_text(Duration::from_secs(360)), "6m0s");
        assert_eq!(duration_text(Duration::from_secs(3723)), "1h2m3s");
    }

    #[test]
    fn a_rate_allows_its_minute_then_refuses_with_headers() {
        let limiter = limiter(TenantLimits {
            requests_per_minute: Some(3),
            ..Default::default()
        });
        for _ in 0..3 {
            limiter.check_request(1).expect("within the minute");
        }
        match limiter.check_request(1) {
            Err(Refused::RateLimited {
                message,
                retry_after_s,
                headers,
            }) => {
                assert!(message.contains("requests_per_minute = 3"), "{message}");
                assert!(
                    message.contains("PATCH /admin/v1/tenants/tn_test"),
                    "{message}"
                );
                assert!((1..=20).contains(&retry_after_s), "{retry_after_s}");
                let get = |name: &str| {
                    headers
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.clone())
                };
                assert_eq!(get("x-ratelimit-limit-requests").as_deref(), Some("3"));
                assert_eq!(get("x-ratelimit-remaining-requests").as_deref(), Some("0"));
                assert!(get("x-ratelimit-reset-requests").is_some());
            }
            other => panic!("expected a 429, got {other:?}"),
        }
    }

    #[test]
    fn more_than_a_minute_is_a_413_and_takes_nothing() {
        let limiter = limiter(TenantLimits {
            requests_per_minute: Some(5),
            decisions_per_minute: Some(4),
            ..Default::default()
        });
        assert!(matches!(
            limiter.check_request(5),
            Err(Refused::TooLarge { .. })
        ));
        assert_eq!(limiter.requests.as_ref().unwrap().remaining(), 5);
        assert!(matches!(
            limiter.admit_tokens(1_000_000),
            Ok(()) // no token limit set
        ));
    }

    #[test]
    fn the_default_tenant_gets_the_server_wide_defaults() {
        let limiters = Limiters::new(Defaults {
            requests_per_minute: 1,
            ..Default::default()
        });
        let default = limiters.of(&Caller::Default);
        default.check_request(1).unwrap();
        let Err(Refused::RateLimited { message, .. }) = default.check_request(1) else {
            panic!("the default tenant is limited too");
        };
        assert!(
            message.contains("--tenant-requests-per-minute"),
            "{message}"
        );
        assert!(Arc::ptr_eq(&default, &limiters.of(&Caller::Default)));
    }

    #[tokio::test]
    async fn beyond_the_queue_a_request_is_refused_at_once() {
        let limiter = Arc::new(limiter(TenantLimits {
            concurrent_requests: Some(1),
            queued_requests: Some(1),
            ..Default::default()
        }));
        let first = limiter.enter().await.unwrap();
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.enter().await.map(|p| p.is_some()) })
        };
        while limiter.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let Err(Refused::RateLimited { message, .. }) = limiter.enter().await else {
            panic!("the queue is full");
        };
        assert!(message.contains("concurrent_requests = 1"), "{message}");
        drop(first);
        assert!(waiter.await.unwrap().unwrap(), "the waiter gets the slot");
        assert_eq!(limiter.waiting.load(Ordering::SeqCst), 0);
    }
}
