//! What a run counted: units, requests, decisions, statuses, transport errors, and latency
//! histograms of units, requests, the server's own time and the generator's start lag.
//!
//! Histograms are HdrHistogram (microseconds, 1 µs to 1 hour, 3 significant digits): fixed
//! memory, constant-time recording and exact merging, so each client records into its own and
//! the run adds them up at the end. Latencies are recorded for successful requests and units
//! only, so a server that answers errors fast does not look fast; errors are counted beside them.
//! Rates count apart from both: the successful work that *ended* inside the recorded window,
//! whenever it was due, so one straggler after the window does not stretch the time a rate is
//! divided by.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::client::{Outcome, UnitResult};
use crate::timeline::Timeline;

/// Successful work that ended inside the recorded window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Finished {
    pub units_ok: u64,
    pub requests_ok: u64,
    pub decisions: u64,
}

/// Counts and histograms of one run (or of one client's share of it).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Successful work that ended in the window (due in it or in the warmup): what rates count.
    pub finished: Finished,
    /// Units finished (successful or not).
    pub units: u64,
    /// Units whose every request succeeded.
    pub units_ok: u64,
    /// Requests finished: a response of any status or a transport error.
    pub requests: u64,
    /// Requests answered with the expected status.
    pub requests_ok: u64,
    /// Decisions carried by successful requests.
    pub decisions: u64,
    /// Responses by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests without a whole response, by kind (`connect`, `request`, `body`, `timeout`).
    pub transport_errors: BTreeMap<&'static str, u64>,
    /// Open loop: units not sent because `--max-in-flight` units were outstanding.
    pub dropped: u64,
    /// Successful units, from due time to last response.
    pub unit_latency: Histogram<u64>,
    /// Successful requests, from send to the end of the response body.
    pub request_latency: Histogram<u64>,
    /// The server-time header of successful requests, when asked for.
    pub server_time: Histogram<u64>,
    /// Open loop: how late each unit went out after its due time.
    pub start_lag: Histogram<u64>,
    /// When in the window successful units ended, and the slowest per 100 ms.
    pub timeline: Timeline,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid")
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            finished: Finished::default(),
            units: 0,
            units_ok: 0,
            requests: 0,
            requests_ok: 0,
            decisions: 0,
            statuses: BTreeMap::new(),
            transport_errors: BTreeMap::new(),
            dropped: 0,
            unit_latency: histogram(),
            request_latency: histogram(),
            server_time: histogram(),
            start_lag: histogram(),
            timeline: Timeline::default(),
        }
    }
}

impl Stats {
    /// Empty stats whose timeline counts from `window_start`.
    pub fn starting_at(window_start: Instant) -> Self {
        Stats {
            timeline: Timeline::starting(window_start),
            ..Stats::default()
        }
    }

    /// Counts the successful part of a unit that ended inside the window.
    pub fn count_finished(&mut self, unit: &UnitResult) {
        for request in unit.requests.iter().filter(|r| r.ok) {
            self.finished.requests_ok += 1;
            self.finished.decisions += request.decisions;
        }
        self.finished.units_ok += u64::from(unit.ok());
    }

    /// Counts and times one unit that was due in the window; `open` also records its start lag.
    pub fn record(&mut self, unit: &UnitResult, open: bool) {
        self.units += 1;
        for request in &unit.requests {
            self.requests += 1;
            match &request.outcome {
                Outcome::Response { status, server } => {
                    *self.statuses.entry(*status).or_default() += 1;
                    if request.ok {
                        if let Some(server) = server {
                            self.server_time.saturating_record(micros(*server));
                        }
                    }
                }
                Outcome::Transport(kind) => *self.transport_errors.entry(kind).or_default() += 1,
            }
            if request.ok {
                self.requests_ok += 1;
                self.decisions += request.decisions;
                self.request_latency
                    .saturating_record(micros(request.latency));
            }
        }
        if unit.ok() {
            self.units_ok += 1;
            self.unit_latency.saturating_record(micros(unit.latency));
            self.timeline.record(unit.ended, unit.latency);
        }
        if open {
            self.start_lag.saturating_record(micros(unit.lag));
        }
    }

    /// Requests that failed: an unexpected status or a transport error.
    pub fn errors(&self) -> u64 {
        self.requests - self.requests_ok
    }

    /// Adds another client's counts and histograms to these.
    pub fn merge(&mut self, other: &Stats) {
        self.finished.units_ok += other.finished.units_ok;
        self.finished.requests_ok += other.finished.requests_ok;
        self.finished.decisions += other.finished.decisions;
        self.units += other.units;
        self.units_ok += other.units_ok;
        self.requests += other.requests;
        self.requests_ok += other.requests_ok;
        self.decisions += other.decisions;
        for (status, n) in &other.statuses {
            *self.statuses.entry(*status).or_default() += n;
        }
        for (kind, n) in &other.transport_errors {
            *self.transport_errors.entry(kind).or_default() += n;
        }
        self.dropped += other.dropped;
        self.timeline.merge(&other.timeline);
        for (mine, theirs) in [
            (&mut self.unit_latency, &other.unit_latency),
            (&mut self.request_latency, &other.request_latency),
            (&mut self.server_time, &other.server_time),
            (&mut self.start_lag, &other.start_lag),
        ] {
            mine.add(theirs).expect("histograms of one bound add up");
        }
    }
}
