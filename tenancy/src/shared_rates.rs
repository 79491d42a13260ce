//! Rate limits that hold across replicas: each tenant's `requests_per_minute` and
//! `decisions_per_minute` buckets kept in the shared store, so N replicas together let a
//! tenant through at its limit, not N times it.
//!
//! The bucket is the same GCRA as the in-process one ([`super::limits`], governor): a
//! theoretical arrival time per bucket, one emission interval (60 s / limit) added per cell,
//! a burst of the whole minute. In Postgres a take is one atomic `INSERT ... ON CONFLICT DO
//! UPDATE ... WHERE ... RETURNING` on the database's clock, so replicas' clocks do not matter.
//! It runs on the store's own runtime and is awaited, never blocking a request's thread.
//!
//! What stays per replica: `input_tokens_per_minute` (taken on the model worker, before each
//! read, where a database round trip would stall every tenant's passes), and concurrency
//! (`concurrent_requests`, `queued_requests`: slots of one replica's worker). When the store
//! cannot be reached a replica falls back to its own buckets and says so in its log.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::StoreError;

/// The answer of one take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Take {
    /// Taken; the bucket holds this many whole cells now.
    Taken { remaining: u32 },
    /// Refused: the cells fit after this wait.
    Refused { wait: Duration },
}

/// A future of a take.
pub type Taking = Pin<Box<dyn Future<Output = Result<Take, StoreError>> + Send>>;

/// Token buckets shared by every replica on one store.
pub trait SharedRates: Send + Sync {
    /// Takes `cells` from `bucket`, which refills `per_minute` cells a minute and holds at
    /// most a minute's worth. `cells` never exceeds `per_minute` (the caller refuses such a
    /// request with 413 first).
    fn take(&self, bucket: String, cells: u32, per_minute: u32) -> Taking;
}

/// The cells a bucket holds when its theoretical arrival time is `backlog_s` ahead of now.
pub fn remaining_cells(backlog_s: f64, per_minute: u32) -> u32 {
    let interval = 60.0 / f64::from(per_minute);
    ((60.0 - backlog_s.max(0.0)) / interval).floor().max(0.0) as u32
}

/// How long until `cells` fit in a bucket whose backlog is `backlog_s`.
pub fn wait_for(backlog_s: f64, cells: u32, per_minute: u32) -> Duration {
    let interval = 60.0 / f64::from(per_minute);
    Duration::from_secs_f64((backlog_s + f64::from(cells) * interval - 60.0).max(0.001))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_and_waits_follow_the_emission_interval() {
        // 60 a minute: one cell a second.
        assert_eq!(remaining_cells(0.0, 60), 60);
        assert_eq!(remaining_cells(59.5, 60), 0);
        assert_eq!(remaining_cells(30.0, 60), 30);
        let wait = wait_for(59.5, 1, 60);
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
    }
}
