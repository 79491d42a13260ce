//! The ways of loading a target: closed-loop clients, open-loop arrivals, and a sweep of
//! arrival rates up to saturation.
//!
//! Both loops first run `warmup` unrecorded, then record for `duration`, then wait for the
//! units already started, so every started unit is counted (none is cut off at the end, where
//! the slowest would be); rates count the work that ended inside the window (`report`). Units
//! are taken round-robin from one counter shared by all clients, so every unit of the workload
//! is sent equally often whatever the concurrency. Closed loop: each client owns one connection
//! per request of the widest unit, all opened before the clock starts, and sends its next unit
//! as soon as the last one answered. Open loop: units are due on the schedule (paced by a thread
//! of its own, see `open`), each timed from its due time; a unit borrows connections from a free
//! list (opening more when it is empty, so the list grows to the concurrency the server makes),
//! and at most `max_in_flight` units are outstanding: a unit due while that many are is counted
//! as dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;

use crate::client::{send_unit, Conn, Settings, Target};
use crate::report::Figures;
use crate::schedule::{Arrivals, Schedule};
use crate::stats::Stats;
use crate::Error;

/// Connections opened at once before a closed-loop run (the rest wait their turn), below a
/// listener's usual backlog so that none waits on SYN retries.
const CONNECTING_AT_ONCE: usize = 128;

/// What to load and for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: Arc<Target>,
    pub settings: Settings,
    /// Sent but not recorded, before `duration`.
    pub warmup: Duration,
    /// Units started in this window are recorded.
    pub duration: Duration,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Run {
    pub stats: Stats,
    /// The recorded window (`plan.duration`).
    pub window: Duration,
    /// From the window's start to the last response of a unit due in it.
    pub to_last_response: Duration,
}

impl Run {
    /// The run's rates and percentiles.
    pub fn figures(&self) -> Figures {
        Figures::new(&self.stats, self.window, self.to_last_response)
    }
}

/// `clients` closed-loop clients. With `once`, each unit of the workload is sent at most once
/// (a cold-cache scenario whose units each carry their own cache key must not come round
/// again, warm): the run ends when the units run out or the window closes, and when they ran
/// out first the window is the time to the last response.
pub async fn closed(plan: &Plan, clients: usize, once: bool) -> Result<Run, Error> {
    let lanes = plan.target.widest_unit();
    let addr = plan.target.addr;
    let permits = Arc::new(Semaphore::new(CONNECTING_AT_ONCE));
    let mut connecting = JoinSet::new();
    for _ in 0..clients {
        let permits = permits.clone();
        connecting.spawn(async move {
            let _permit = permits
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let mut conns = Vec::with_capacity(lanes);
            for _ in 0..lanes {
                let mut conn = Conn::new(addr);
                conn.connect().await?;
                conns.push(conn);
            }
            Ok::<_, std::io::Error>(conns)
        });
    }
    let mut connected = Vec::with_capacity(clients);
    while let Some(joined) = connecting.join_next().await {
        let conns = joined.expect("a connecting task panicked");
        connected.push(conns.map_err(|source| Error::Connect {
            addr: plan.target.url.clone(),
            source,
        })?);
    }

    let measure_from = Instant::now() + plan.warmup;
    let end = measure_from + plan.duration;
    let next = Arc::new(AtomicUsize::new(0));
    let mut running = JoinSet::new();
    for mut conns in connected {
        let target = plan.target.clone();
        let settings = plan.settings.clone();
        let next = next.clone();
        running.spawn(async move {
            let mut stats = Stats::starting_at(measure_from);
            let mut last = measure_from;
            loop {
                let due = Instant::now();
                if due >= end {
                    break;
                }
                let n = next.fetch_add(1, Ordering::Relaxed);
                if once && n >= target.unit_count() {
                    break;
                }
                let result = send_unit(&mut conns, target.unit(n), &settings, due).await;
                if (measure_from..end).contains(&result.ended) {
                    stats.count_finished(&result);
                }
                if due >= measure_from {
                    stats.record(&result, false);
                    last = result.ended;
                }
            }
            (stats, last)
        });
    }
    let mut stats = Stats::starting_at(measure_from);
    let mut last = measure_from;
    while let Some(joined) = running.join_next().await {
        let (client, client_last) = joined.expect("a client task panicked");
        stats.merge(&client);
        last = last.max(client_last);
    }
    let to_last_response = last - measure_from;
    let ran_out = once && next.load(Ordering::Relaxed) >= plan.target.unit_count();
    Ok(Run {
        stats,
        window: if ran_out {
            plan.duration.min(to_last_response)
        } else {
            plan.duration
        },
        to_last_response,
    })
}

/// Units due at `rate` per second, spaced by `arrivals`, at most `max_in_flight` outstanding.
///
/// The schedule is paced by a thread of its own (tokio's blocking pool) that sleeps with the
/// operating system's timer, tens of microseconds late at most, and spawns each unit onto the
/// runtime when it is due: tokio's own timer ticks in whole milliseconds, which would add up to
/// a millisecond of the generator's lateness to every unit's latency.
pub async fn open(plan: &Plan, rate: f64, arrivals: Arrivals, max_in_flight: usize) -> Run {
    let start = Instant::now();
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.duration;
    let recorded = Arc::new(Mutex::new((Stats::starting_at(measure_from), measure_from)));
    let free: Arc<Mutex<Vec<Conn>>> = Arc::new(Mutex::new(Vec::new()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    // Every unit task holds a sender; `recv` answers `None` once the pacer and all have ended.
    let (done, mut all_done) = mpsc::channel::<()>(1);
    let target = plan.target.clone();
    let settings = plan.settings.clone();
    let runtime = tokio::runtime::Handle::current();
    let recorder = recorded.clone();
    let pacer = tokio::task::spawn_blocking(move || {
        let mut dropped = 0;
        let mut next = 0;
        for offset in Schedule::new(rate, arrivals) {
            let due = start + offset;
            if due >= end {
                break;
            }
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let measured = due >= measure_from;
            if in_flight.load(Ordering::Acquire) >= max_in_flight {
                dropped += u64::from(measured);
                continue;
            }
            in_flight.fetch_add(1, Ordering::AcqRel);
            let index = next;
            next += 1;
            let (target, settings, free, recorded, in_flight, done) = (
                target.clone(),
                settings.clone(),
                free.clone(),
                recorder.clone(),
                in_flight.clone(),
                done.clone(),
            );
            runtime.spawn(async move {
                let unit = target.unit(index);
                let mut conns = {
                    let mut free = free.lock().expect("no task panics holding the list");
                    let keep = free.len().saturating_sub(unit.len());
                    free.split_off(keep)
                };
                while conns.len() < unit.len() {
                    conns.push(Conn::new(target.addr));
                }
                let result = send_unit(&mut conns, unit, &settings, due).await;
                free.lock()
                    .expect("no task panics holding the list")
                    .extend(conns);
                in_flight.fetch_sub(1, Ordering::AcqRel);
                let mut recorded = recorded.lock().expect("no task panics recording");
                if (measure_from..end).contains(&result.ended) {
                    recorded.0.count_finished(&result);
                }
                if measured {
                    recorded.0.record(&result, true);
                    recorded.1 = recorded.1.max(result.ended);
                }
                drop(recorded);
                drop(done);
            });
        }
        dropped
    });
    let dropped = pacer.await.expect("the pacer panicked");
    let _ = all_done.recv().await;
    let (mut stats, last) = recorded.lock().expect("all tasks have ended").clone();
    stats.dropped = dropped;
    Run {
        stats,
        window: plan.duration,
        to_last_response: last - measure_from,
    }
}

/// One rate of a sweep.
#[derive(Debug, Clone)]
pub struct SweepPoint {
    pub rate: f64,
    pub run: Run,
    /// The same rate against the trivial server, when one is given.
    pub ceiling: Option<Run>,
}

/// Open-loop runs at each rate (each after its ceiling run, if `ceiling` is given), stopping
/// once two rates have fallen below `report::SATURATION` of what they offered. `each` sees every
/// point as it is measured. Returns the points and the first saturated rate.
pub async fn sweep(
    plan: &Plan,
    ceiling: Option<&Plan>,
    rates: &[f64],
    arrivals: Arrivals,
    max_in_flight: usize,
    mut each: impl FnMut(&SweepPoint),
) -> (Vec<SweepPoint>, Option<f64>) {
    let mut points = Vec::new();
    let mut saturated_at = None;
    let mut saturated = 0;
    for &rate in rates {
        let ceiling = match ceiling {
            Some(ceiling) => Some(open(ceiling, rate, arrivals, max_in_flight).await),
            None => None,
        };
        let run = open(plan, rate, arrivals, max_in_flight).await;
        let point = SweepPoint { rate, run, ceiling };
        each(&point);
        let below = point.run.figures().saturated(rate);
        points.push(point);
        if below {
            saturated_at.get_or_insert(rate);
            saturated += 1;
            if saturated == 2 {
                break;
            }
        }
    }
    (points, saturated_at)
}
