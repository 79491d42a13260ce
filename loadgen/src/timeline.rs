//! When in the recorded window the slow units ended: per 100 ms of the window, how many units
//! ended and the slowest one's latency, with the window's start in wall-clock time.
//!
//! Why: percentiles say *how many* requests were slow, not *when*. A tail made of a few
//! stalls (every client's request ending late in the same 100 ms) has another cause than one
//! spread evenly over the run, and a stall's wall-clock time can be set beside other records of
//! the machine (the GPU clock sampler's timestamps, /proc/stat samples). Buckets are fixed, so
//! memory is bounded by the window's length, and clients' timelines add up exactly.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The width of one bucket.
pub const BUCKET: Duration = Duration::from_millis(100);

/// Units ended and the slowest unit's latency per [`BUCKET`] after `origin`.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// The window's start; nothing is recorded without one.
    origin: Option<(Instant, SystemTime)>,
    /// Per bucket: units ended, the slowest one's latency in µs.
    buckets: Vec<(u64, u64)>,
}

impl Timeline {
    /// A timeline whose buckets count from `origin` (the recorded window's start).
    pub fn starting(origin: Instant) -> Self {
        let (now, wall_now) = (Instant::now(), SystemTime::now());
        // `origin` in wall-clock time (it is usually still ahead: the warmup runs first).
        let wall = if origin >= now {
            wall_now + (origin - now)
        } else {
            wall_now - (now - origin)
        };
        Timeline {
            origin: Some((origin, wall)),
            buckets: Vec::new(),
        }
    }

    /// Records a unit that ended at `ended` after taking `latency`.
    pub fn record(&mut self, ended: Instant, latency: Duration) {
        let Some((origin, _)) = self.origin else {
            return;
        };
        let index =
            (ended.saturating_duration_since(origin).as_micros() / BUCKET.as_micros()) as usize;
        if self.buckets.len() <= index {
            self.buckets.resize(index + 1, (0, 0));
        }
        let bucket = &mut self.buckets[index];
        bucket.0 += 1;
        bucket.1 = bucket
            .1
            .max(latency.as_micros().min(u64::MAX as u128) as u64);
    }

    /// Adds another client's timeline (of the same origin) to this one.
    pub fn merge(&mut self, other: &Timeline) {
        if self.origin.is_none() {
            self.origin = other.origin;
        }
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), (0, 0));
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            mine.0 += theirs.0;
            mine.1 = mine.1.max(theirs.1);
        }
    }

    /// The report's form; `None` when nothing was recorded.
    pub fn figures(&self) -> Option<TimelineFigures> {
        let (_, wall) = self.origin?;
        if self.buckets.is_empty() {
            return None;
        }
        Some(TimelineFigures {
            start_unix_s: wall
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            bucket_ms: BUCKET.as_millis() as u64,
            units_ended: self.buckets.iter().map(|b| b.0).collect(),
            slowest_ms: self.buckets.iter().map(|b| b.1 as f64 / 1000.0).collect(),
        })
    }
}

/// A timeline in the report: bucket i covers [start + i x bucket, start + (i + 1) x bucket).
#[derive(Debug, Clone, Serialize)]
pub struct TimelineFigures {
    /// The recorded window's start, seconds since the Unix epoch (UTC).
    pub start_unix_s: f64,
    pub bucket_ms: u64,
    /// Successful units that ended in each bucket.
    pub units_ended: Vec<u64>,
    /// The slowest of them, ms (0 where none ended).
    pub slowest_ms: Vec<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_land_in_the_bucket_they_ended_in_and_clients_add_up() {
        let origin = Instant::now();
        let mut a = Timeline::starting(origin);
        a.record(origin + Duration::from_millis(5), Duration::from_millis(3));
        a.record(
            origin + Duration::from_millis(250),
            Duration::from_millis(40),
        );
        let mut b = Timeline::starting(origin);
        b.record(origin + Duration::from_millis(99), Duration::from_millis(7));
        b.record(
            origin + Duration::from_millis(420),
            Duration::from_millis(2),
        );
        a.merge(&b);
        let figures = a.figures().expect("recorded");
        assert_eq!(figures.units_ended, [2, 0, 1, 0, 1]);
        assert_eq!(figures.slowest_ms, [7.0, 0.0, 40.0, 0.0, 2.0]);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            (now - figures.start_unix_s).abs() < 1.0,
            "{}",
            figures.start_unix_s
        );
    }

    #[test]
    fn a_timeline_without_an_origin_records_nothing() {
        let mut timeline = Timeline::default();
        timeline.record(Instant::now(), Duration::from_millis(1));
        assert!(timeline.figures().is_none());
    }
}
