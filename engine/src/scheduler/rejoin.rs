//! The answered batch's window (`--batch-rejoin-us`): after a batch is answered, the worker
//! waits briefly for its clients' next requests, so that they join the next batch instead of
//! making one of their own, but only while recent rounds show that they come back in time.
//!
//! This module owns whether and how long the worker waits. Why it exists: clients that send
//! their next request as soon as they get an answer (a pipeline working through its queue
//! with N requests in flight) split into cohorts when the worker starts a batch as soon as
//! anything waits. The jobs that arrived during batch A make batch B; A's clients, answered
//! just after B started, make batch C; and so on. Every request then waits for another
//! cohort's whole batch before its own (two passes at p50), and each batch pays a pass's
//! fixed cost for half the jobs it could hold. One batch per round pays it once, and a
//! request waits for its clients' turnaround and one pass. On an H200 with q15, 64
//! closed-loop clients made batches of 32 in 8.6 ms each without the window and of 64 in
//! 13.3 ms with an 8 ms cap (measured before the half-read bound below): 3,976 decisions/s
//! instead of 3,568, p99 17.6 ms instead of 19.5 (bench/reports/h200-side-by-side-7/).
//!
//! The window is learnt, not fixed. After each answer the worker counts the jobs sent since
//! (each job carries when its request sent it), and a round is *back* once as many arrived
//! as the batch answered. It is back *in time* when that took at most the round's window:
//! half the answered batch's read time, at most `--batch-rejoin-us`. The worker waits only
//! while each of the last [`ROUNDS`] rounds was back in time, and for at most the window.
//! So it does not wait for
//! - clients whose turnaround outlasts the window (the first version waited a quarter of the
//!   read whatever the clients did: at 8 clients they took longer, and it idled the worker
//!   23% of the time and merged nothing, bench/reports/h200-side-by-side-6/);
//! - an open-loop stream, whose arrivals come at the pace of the reads (as many as a batch
//!   holds take about a read), not in a burst right after each answer;
//! - clients that went away: one round not back in time stops the waiting, and the rounds
//!   are learnt again from the arrivals during the following reads, without waiting.
//!
//! The wait itself ends once the answered batch's jobs are all back, once the waiting tokens
//! fill a batch (`--max-batch-tokens`: a saturated queue never waits), and at the end of the
//! window. A lone client never waits: its next request is the one job expected.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Rounds that must each have been back in time before the worker waits again.
pub const ROUNDS: usize = 4;

/// One answered batch whose clients are awaited.
#[derive(Debug, Clone, Copy)]
struct Round {
    answered_at: Instant,
    /// How long its clients may take: half its read time, at most the cap.
    window: Duration,
    /// Jobs answered: the arrivals that make the round back.
    expected: usize,
    /// Jobs sent at or after `answered_at` (and before the next answer) so far.
    arrived: usize,
}

/// Whether, and until when, gathering waits for the last batch's clients.
#[derive(Debug)]
pub struct Rejoin {
    /// `--batch-rejoin-us` (zero: never wait).
    cap: Duration,
    /// The last answer's round, while the worker may wait for it.
    current: Option<Round>,
    /// The round before it, until its arrivals up to the last answer are counted
    /// ([`Rejoin::settle`]).
    previous: Option<Round>,
    /// How long the last rounds took to be back (`None`: not back in time, or not before
    /// the next answer).
    recent: VecDeque<Option<Duration>>,
    /// Rounds back in time, and not, since the start (for `/metrics`).
    back: u64,
    late: u64,
}

impl Rejoin {
    /// Nothing learnt yet; `cap` is `--batch-rejoin-us` (zero: no window).
    pub fn new(cap: Duration) -> Rejoin {
        Rejoin {
            cap,
            current: None,
            previous: None,
            recent: VecDeque::with_capacity(ROUNDS),
            back: 0,
            late: 0,
        }
    }

    /// Rounds back in time, and rounds not, since the start.
    pub fn rounds(&self) -> (u64, u64) {
        (self.back, self.late)
    }

    /// A batch of `expected` jobs read for one tenant alone in `read` is answered at `at`.
    /// Call before its replies go out, then [`Rejoin::settle`] once the jobs sent meanwhile
    /// are counted ([`Rejoin::arrived`]).
    pub fn answered(&mut self, expected: usize, read: Duration, at: Instant) {
        self.close_previous();
        self.previous = self.current.take();
        if !self.cap.is_zero() {
            self.current = Some(Round {
                answered_at: at,
                window: (read / 2).min(self.cap),
                expected,
                arrived: 0,
            });
        }
    }

    /// A batch read while several tenants shared the worker is answered: nobody is waited
    /// for (a sparse tenant's request must not wait for a busy one's clients).
    pub fn shared(&mut self) {
        self.close_previous();
        self.previous = self.current.take();
        self.close_previous();
    }

    /// A job sent at `sent` reached the worker's queue.
    pub fn arrived(&mut self, sent: Instant) {
        let round = match (&mut self.current, &mut self.previous) {
            (Some(current), _) if sent >= current.answered_at => current,
            (_, Some(previous)) if sent >= previous.answered_at => previous,
            _ => return,
        };
        if round.arrived == round.expected {
            return;
        }
        round.arrived += 1;
        if round.arrived == round.expected {
            let took = sent.saturating_duration_since(round.answered_at);
            let in_time = (took <= round.window).then_some(took);
            self.record(in_time);
        }
    }

    /// The jobs sent before the last answer are counted: the round before it is over.
    pub fn settle(&mut self) {
        self.close_previous();
    }

    /// Until when gathering may wait for more jobs: the end of the last answer's window
    /// while its jobs are not all back and every recent round was back in time; else none.
    pub fn deadline(&self) -> Option<Instant> {
        let round = self.current?;
        let trusted = self.recent.len() == ROUNDS && self.recent.iter().all(Option::is_some);
        (trusted && round.arrived < round.expected).then(|| round.answered_at + round.window)
    }

    /// The previous round ends: not back by now counts as not back in time.
    fn close_previous(&mut self) {
        if let Some(round) = self.previous.take() {
            if round.arrived < round.expected {
                self.record(None);
            }
        }
    }

    /// A round was back after `took` (`None`: not in time).
    fn record(&mut self, took: Option<Duration>) {
        match took {
            Some(_) => self.back += 1,
            None => self.late += 1,
        }
        if self.recent.len() == ROUNDS {
            self.recent.pop_front();
        }
        self.recent.push_back(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_micros(2000);
    const MS: Duration = Duration::from_millis(1);
    /// A read long enough that the window is the cap.
    const READ: Duration = Duration::from_millis(8);

    /// Runs `rounds` answers of `clients` jobs, each back `turnaround` after its answer, with
    /// the next answer `pass` later; returns the deadline after the last answer.
    fn learn(rejoin: &mut Rejoin, clients: usize, turnaround: Duration, rounds: usize) -> Instant {
        let mut at = Instant::now();
        for _ in 0..rounds {
            rejoin.answered(clients, READ, at);
            rejoin.settle();
            for _ in 0..clients {
                rejoin.arrived(at + turnaround);
            }
            at += 10 * MS;
        }
        at - 10 * MS
    }

    #[test]
    fn it_waits_once_recent_rounds_came_back_in_time() {
        let mut rejoin = Rejoin::new(CAP);
        let at = Instant::now();
        rejoin.answered(8, READ, at);
        rejoin.settle();
        assert_eq!(rejoin.deadline(), None, "nothing learnt yet");
        let last = learn(&mut rejoin, 8, MS, ROUNDS + 1);
        // The last round's clients are back: nothing to wait for.
        assert_eq!(rejoin.deadline(), None);
        rejoin.answered(8, READ, last + 10 * MS);
        rejoin.settle();
        assert_eq!(rejoin.deadline(), Some(last + 10 * MS + CAP));
        for _ in 0..7 {
            rejoin.arrived(last + 11 * MS);
        }
        assert!(rejoin.deadline().is_some(), "one of eight is not back yet");
        rejoin.arrived(last + 11 * MS);
        assert_eq!(rejoin.deadline(), None, "everyone is back");
        assert_eq!(
            rejoin.rounds(),
            (ROUNDS as u64 + 2, 1),
            "the first round was never back"
        );
    }

    #[test]
    fn clients_slower_than_the_cap_are_not_waited_for() {
        let mut rejoin = Rejoin::new(CAP);
        let last = learn(&mut rejoin, 8, 3 * MS, ROUNDS + 1);
        rejoin.answered(8, READ, last + 10 * MS);
        rejoin.settle();
        assert_eq!(rejoin.deadline(), None);
        assert_eq!(rejoin.rounds(), (0, ROUNDS as u64 + 1));
    }

    #[test]
    fn one_round_not_back_stops_the_waiting_until_rounds_are_back_again() {
        let mut rejoin = Rejoin::new(CAP);
        let last = learn(&mut rejoin, 4, MS, ROUNDS);
        // Answered again, but only three of the four come back before the next answer.
        let at = last + 10 * MS;
        rejoin.answered(4, READ, at);
        rejoin.settle();
        for _ in 0..3 {
            rejoin.arrived(at + MS);
        }
        rejoin.answered(4, READ, at + 10 * MS);
        rejoin.settle();
        assert_eq!(rejoin.deadline(), None, "the round before was not back");
        learn(&mut rejoin, 4, MS, ROUNDS);
        rejoin.answered(4, READ, Instant::now() + 100 * MS);
        assert!(rejoin.deadline().is_some(), "{ROUNDS} rounds back again");
    }

    #[test]
    fn arrivals_during_the_next_read_count_for_the_round_they_follow() {
        // Two cohorts: A answered at 0 while B waits; A's jobs arrive during B's read, and
        // the worker counts them after B's answer (at 9 ms), sent at 1 ms.
        let mut rejoin = Rejoin::new(CAP);
        let zero = Instant::now();
        let mut at = zero;
        for _ in 0..ROUNDS + 1 {
            rejoin.answered(32, READ, at);
            // Jobs sent before this answer belong to the round before it.
            for _ in 0..32 {
                rejoin.arrived(at - 8 * MS);
            }
            rejoin.settle();
            at += 9 * MS;
        }
        assert!(rejoin.deadline().is_some());
        // A round whose jobs were all sent before its answer (B's, already waiting) is not
        // back: those are the other cohort.
        let mut other = Rejoin::new(CAP);
        learn(&mut other, 32, MS, ROUNDS);
        let at = zero + 100 * MS;
        other.answered(32, READ, at);
        other.settle();
        for _ in 0..32 {
            other.arrived(at - MS);
        }
        assert!(
            other.deadline().is_some(),
            "jobs sent before the answer are not its"
        );
    }

    #[test]
    fn a_zero_cap_never_waits_and_a_shared_batch_waits_for_nobody() {
        let mut off = Rejoin::new(Duration::ZERO);
        learn(&mut off, 8, Duration::ZERO, ROUNDS + 1);
        off.answered(8, READ, Instant::now());
        assert_eq!(off.deadline(), None);
        let mut rejoin = Rejoin::new(CAP);
        learn(&mut rejoin, 8, MS, ROUNDS + 1);
        rejoin.shared();
        assert_eq!(rejoin.deadline(), None);
    }

    #[test]
    fn the_window_is_half_the_read_at_most_the_cap() {
        // Closed-loop clients back 1 ms after each answer of a 3 ms read: in time (1.5 ms).
        let mut rejoin = Rejoin::new(8 * MS);
        let mut at = Instant::now();
        for _ in 0..ROUNDS {
            rejoin.answered(8, 3 * MS, at);
            rejoin.settle();
            for _ in 0..8 {
                rejoin.arrived(at + MS);
            }
            at += 4 * MS;
        }
        rejoin.answered(8, 3 * MS, at);
        rejoin.settle();
        assert_eq!(rejoin.deadline(), Some(at + 3 * MS / 2));
        for _ in 0..8 {
            rejoin.arrived(at + MS);
        }
        rejoin.answered(8, 100 * MS, at + 10 * MS);
        rejoin.settle();
        assert_eq!(rejoin.deadline(), Some(at + 10 * MS + 8 * MS), "capped");
    }

    #[test]
    fn an_open_loop_stream_is_not_waited_for() {
        // Arrivals at 2 per ms, batches of what arrived during a 4 ms read: as many jobs as a
        // batch held take about a read to arrive, past half of it.
        let mut rejoin = Rejoin::new(8 * MS);
        let mut at = Instant::now();
        for _ in 0..3 * ROUNDS {
            rejoin.answered(8, 4 * MS, at);
            rejoin.settle();
            for arrival in 1..=8u32 {
                rejoin.arrived(at + arrival * MS / 2);
            }
            at += 4 * MS;
            assert_eq!(rejoin.deadline(), None);
        }
        assert_eq!(rejoin.rounds().0, 0);
    }

    #[test]
    fn a_lone_client_never_waits_for_anyone() {
        let mut rejoin = Rejoin::new(CAP);
        let last = learn(&mut rejoin, 1, MS, ROUNDS + 1);
        rejoin.answered(1, READ, last + 10 * MS);
        rejoin.settle();
        assert!(rejoin.deadline().is_some(), "waiting for its next request");
        rejoin.arrived(last + 11 * MS);
        assert_eq!(
            rejoin.deadline(),
            None,
            "its next request is the one expected"
        );
    }
}
