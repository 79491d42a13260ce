//! The answered batch's window (`--batch-rejoin-us`): after a batch is answered, the worker
//! waits briefly for its clients' next requests, so that they join the next batch instead of
//! making one of their own.
//!
//! This module owns when that wait ends. Why it exists: clients that send their next request
//! as soon as they get an answer (a pipeline working through its queue with N requests in
//! flight) split into cohorts when the worker starts a batch as soon as anything waits. The
//! jobs that arrived during batch A make batch B; A's clients, answered just after B started,
//! make batch C; and so on. Every request then waits for another cohort's whole batch before
//! its own, and each batch pays a pass's fixed cost (kernel launches and tails, the weights'
//! reads: ~2 ms of a pass on an H200 with q15) for half the jobs it could hold. Waiting for
//! the answered clients merges the cohorts into one batch per round.
//!
//! The wait is bounded three ways. It ends once as many jobs wait as were waiting when the
//! batch was answered plus the batch's own jobs (everyone came back), once the waiting tokens
//! fill a batch (`--max-batch-tokens`), and at the latest a quarter of the answered batch's
//! read time after its answer, capped by `--batch-rejoin-us`. So a lone client never waits
//! (its next request is the one job expected), a saturated queue never waits (it fills the
//! batch), and arrivals that are not answered clients (an open-loop stream) wait at most a
//! quarter of a pass more.
//!
//! It is off by default (`--batch-rejoin-us 0`). On an H200 with q15 the worker is idle
//! while it waits, with the other cohort's jobs in the queue, and the clients' turnaround
//! (answer, HTTP, the next request's rendering) outlasted the window: at 8 closed-loop
//! clients batches grew from 4.0 to 4.2 jobs, not 8, the worker's busy share fell from 99%
//! to 77% and throughput by 21%; at 64 clients by 5%
//! (bench/reports/h200-side-by-side-6/). Where passes are long against that turnaround
//! (CPU), it does merge the cohorts (tests/e2e/cache.rs).

use std::time::{Duration, Instant};

/// When waiting for the answered batch's clients ends.
#[derive(Debug, Clone, Copy)]
pub struct Rejoin {
    /// Jobs waiting at which everyone expected is back.
    jobs: usize,
    /// The latest the wait may end.
    until: Instant,
}

impl Rejoin {
    /// No batch answered yet (or the window is off): nothing to wait for.
    pub fn none() -> Rejoin {
        Rejoin {
            jobs: 0,
            until: Instant::now(),
        }
    }

    /// A batch of `answered` jobs, read in `read`, was answered at `at` while `waiting` jobs
    /// waited; `cap` is `--batch-rejoin-us` (zero: no window).
    pub fn after(
        answered: usize,
        waiting: usize,
        read: Duration,
        at: Instant,
        cap: Duration,
    ) -> Rejoin {
        Rejoin {
            jobs: waiting.saturating_add(answered),
            until: at + (read / 4).min(cap),
        }
    }

    /// Until when gathering may wait for more jobs, with `waiting` jobs waiting now: the
    /// window's end while someone expected is not back yet, otherwise none.
    pub fn deadline(&self, waiting: usize) -> Option<Instant> {
        (waiting < self.jobs).then_some(self.until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_micros(2000);

    #[test]
    fn the_window_is_a_quarter_of_the_read_capped() {
        let at = Instant::now();
        let short = Rejoin::after(8, 0, Duration::from_millis(4), at, CAP);
        assert_eq!(short.deadline(0), Some(at + Duration::from_millis(1)));
        let long = Rejoin::after(8, 0, Duration::from_millis(300), at, CAP);
        assert_eq!(long.deadline(0), Some(at + CAP));
        let off = Rejoin::after(8, 0, Duration::from_millis(300), at, Duration::ZERO);
        assert_eq!(
            off.deadline(0),
            Some(at),
            "a zero cap ends the wait at the answer"
        );
    }

    #[test]
    fn the_wait_ends_once_the_answered_jobs_and_those_waiting_are_back() {
        let at = Instant::now();
        // Batch A (32 jobs) answered while cohort B (32) waits: wait for A's 32 as well.
        let rejoin = Rejoin::after(32, 32, Duration::from_millis(8), at, CAP);
        assert!(rejoin.deadline(32).is_some());
        assert!(rejoin.deadline(63).is_some());
        assert_eq!(rejoin.deadline(64), None);
        assert_eq!(rejoin.deadline(100), None);
    }

    #[test]
    fn a_lone_client_never_waits_for_anyone() {
        let rejoin = Rejoin::after(1, 0, Duration::from_millis(3), Instant::now(), CAP);
        assert_eq!(
            rejoin.deadline(1),
            None,
            "its next request is the one expected"
        );
        assert_eq!(Rejoin::none().deadline(0), None);
        assert_eq!(Rejoin::none().deadline(1), None);
    }
}
