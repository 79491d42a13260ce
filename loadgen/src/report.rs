//! The report: a run's counts turned into rates and percentiles, beside the generator's ceiling,
//! as a human table and as JSON (`--report`).
//!
//! Counts and latencies are of the units due in the recorded window, every one awaited to its
//! end. Rates are of successful work only (requests, decisions and units answered with the
//! expected status) that ended inside the window, per second of the window: a server that keeps
//! up is credited the offered rate, one that queues what it answered, and neither a run that
//! fails fast nor one straggler after the window moves the figure. Every figure carries the ceiling
//! measured the same way against the trivial server, so the reader can tell whether a figure is
//! the server's or the generator's limit.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::stats::Stats;
use crate::timeline::TimelineFigures;

/// Below this share of the offered rate an open-loop run is saturated: the server (or, against
/// the trivial server, the generator) no longer keeps up.
pub const SATURATION: f64 = 0.9;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    /// Percentiles of a microsecond histogram; `None` when it holds nothing.
    pub fn of(histogram: &Histogram<u64>) -> Option<Self> {
        if histogram.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Percentiles {
            count: histogram.len(),
            p50: ms(histogram.value_at_quantile(0.50)),
            p90: ms(histogram.value_at_quantile(0.90)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p99_9: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
            mean: histogram.mean() / 1000.0,
        })
    }
}

/// Latencies of successful units and requests, the server's own time, the start lag.
#[derive(Debug, Clone, Serialize)]
pub struct Latencies {
    pub unit: Option<Percentiles>,
    pub request: Option<Percentiles>,
    /// From `--server-ms-header`.
    pub server: Option<Percentiles>,
    /// Open loop only: the generator's lateness against the schedule.
    pub start_lag: Option<Percentiles>,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// The recorded window (what rates are per second of).
    pub duration_s: f64,
    /// From the window's start to the last response of a unit due in it.
    pub last_response_s: f64,
    pub units: u64,
    pub units_ok: u64,
    pub requests: u64,
    pub requests_ok: u64,
    /// Decisions of successful requests.
    pub decisions: u64,
    /// Requests with an unexpected status or a transport error.
    pub errors: u64,
    pub statuses: BTreeMap<String, u64>,
    pub transport_errors: BTreeMap<String, u64>,
    pub dropped: u64,
    pub requests_per_s: f64,
    pub decisions_per_s: f64,
    pub units_per_s: f64,
    pub latency_ms: Latencies,
    /// When the successful units ended and the slowest per 100 ms (`crate::timeline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<TimelineFigures>,
}

impl Figures {
    /// Rates over a `window` and percentiles of `stats`, whose last response came
    /// `to_last_response` after the window's start.
    pub fn new(stats: &Stats, window: Duration, to_last_response: Duration) -> Self {
        let seconds = window.as_secs_f64();
        let per_s = |n: u64| {
            if seconds > 0.0 {
                n as f64 / seconds
            } else {
                0.0
            }
        };
        Figures {
            duration_s: seconds,
            last_response_s: to_last_response.as_secs_f64(),
            units: stats.units,
            units_ok: stats.units_ok,
            requests: stats.requests,
            requests_ok: stats.requests_ok,
            decisions: stats.decisions,
            errors: stats.errors(),
            statuses: stats
                .statuses
                .iter()
                .map(|(s, n)| (s.to_string(), *n))
                .collect(),
            transport_errors: stats
                .transport_errors
                .iter()
                .map(|(k, n)| (k.to_string(), *n))
                .collect(),
            dropped: stats.dropped,
            requests_per_s: per_s(stats.finished.requests_ok),
            decisions_per_s: per_s(stats.finished.decisions),
            units_per_s: per_s(stats.finished.units_ok),
            latency_ms: Latencies {
                unit: Percentiles::of(&stats.unit_latency),
                request: Percentiles::of(&stats.request_latency),
                server: Percentiles::of(&stats.server_time),
                start_lag: Percentiles::of(&stats.start_lag),
            },
            timeline: stats.timeline.figures(),
        }
    }

    /// Whether an open-loop run at `rate` units/s fell below `SATURATION` of it.
    pub fn saturated(&self, rate: f64) -> bool {
        self.units_per_s < SATURATION * rate
    }
}

/// The same run against the trivial server: the generator's own limit.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    #[serde(flatten)]
    pub figures: Figures,
    /// Open loop: whether the generator alone kept the offered rate (not saturated, nothing
    /// dropped, no errors); if not, the run's figures at this rate are the generator's limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sustained: Option<bool>,
}

impl Ceiling {
    /// A closed-loop ceiling.
    pub fn closed(figures: Figures) -> Self {
        Ceiling {
            figures,
            sustained: None,
        }
    }

    /// An open-loop ceiling at `rate` units/s.
    pub fn open(figures: Figures, rate: f64) -> Self {
        let sustained = !figures.saturated(rate) && figures.dropped == 0 && figures.errors == 0;
        Ceiling {
            figures,
            sustained: Some(sustained),
        }
    }
}

/// One concurrency or one rate: the run and its ceiling.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<usize>,
    /// Offered units per second (open loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    #[serde(flatten)]
    pub run: Figures,
    /// `None` with `--no-ceiling`.
    pub ceiling: Option<Ceiling>,
}

/// The workload file a report is about.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadInfo {
    pub path: String,
    pub lines: usize,
    pub units: usize,
}

/// A whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: &'static str,
    pub url: String,
    pub workload: WorkloadInfo,
    pub threads: usize,
    pub warmup_s: f64,
    pub expect_status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<&'static str>,
    #[serde(flatten)]
    pub body: Body,
}

/// One point (closed, open) or a sweep's points.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Body {
    Single(Box<Point>),
    Sweep {
        points: Vec<Point>,
        /// The first rate the run fell below `SATURATION` of; the sweep stops at the second.
        saturated_at: Option<f64>,
    },
}

/// A number of milliseconds with about three significant digits.
fn ms(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.3}")
    } else if value < 100.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.1}")
    }
}

fn spread(p: &Option<Percentiles>) -> String {
    match p {
        None => "-".to_string(),
        Some(p) => [p.p50, p.p90, p.p99, p.p99_9, p.max]
            .iter()
            .map(|v| ms(*v))
            .collect::<Vec<_>>()
            .join(" / "),
    }
}

fn counts<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
    if map.is_empty() {
        return "-".to_string();
    }
    map.iter()
        .map(|(k, n)| format!("{k}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn rows(f: &Figures) -> Vec<(&'static str, String)> {
    vec![
        (
            "window s (to last response)",
            format!("{:.2} ({:.2})", f.duration_s, f.last_response_s),
        ),
        ("units ok/all", format!("{}/{}", f.units_ok, f.units)),
        (
            "requests ok/all",
            format!("{}/{}", f.requests_ok, f.requests),
        ),
        ("decisions", f.decisions.to_string()),
        ("statuses", counts(&f.statuses)),
        ("transport errors", counts(&f.transport_errors)),
        ("dropped", f.dropped.to_string()),
        ("requests/s", format!("{:.1}", f.requests_per_s)),
        ("decisions/s", format!("{:.1}", f.decisions_per_s)),
        ("units/s", format!("{:.1}", f.units_per_s)),
        ("unit ms p50/90/99/99.9/max", spread(&f.latency_ms.unit)),
        ("request ms", spread(&f.latency_ms.request)),
        ("server ms", spread(&f.latency_ms.server)),
        ("start lag ms", spread(&f.latency_ms.start_lag)),
    ]
}

/// The human table of a report.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    match &report.body {
        Body::Single(point) => {
            let run = rows(&point.run);
            let ceiling = point.ceiling.as_ref().map(|c| rows(&c.figures));
            let width = run.iter().map(|(_, v)| v.len()).max().unwrap_or(0).max(3);
            let _ = writeln!(out, "{:<28}{:<width$}   ceiling", "", "run");
            for (i, (label, value)) in run.iter().enumerate() {
                let beside = ceiling.as_ref().map_or("-", |c| c[i].1.as_str());
                let _ = writeln!(out, "{label:<28}{value:<width$}   {beside}");
            }
            if let Some(Ceiling {
                sustained: Some(s), ..
            }) = &point.ceiling
            {
                let _ = writeln!(
                    out,
                    "ceiling: the generator alone {} the offered rate",
                    if *s { "sustains" } else { "does NOT sustain" }
                );
            }
        }
        Body::Sweep {
            points,
            saturated_at,
        } => {
            let _ = writeln!(
                out,
                "{:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7} | {:>10} {:>9} {:>9} {:>9}",
                "rate",
                "units/s",
                "req/s",
                "dec/s",
                "p50 ms",
                "p99 ms",
                "errors",
                "dropped",
                "ceil u/s",
                "ceil p50",
                "ceil p99",
                "sustained"
            );
            for p in points {
                let (cu, c50, c99, sustained) = match &p.ceiling {
                    None => ("-".into(), "-".into(), "-".into(), "-".into()),
                    Some(c) => {
                        let u = c.figures.latency_ms.unit.as_ref();
                        (
                            format!("{:.1}", c.figures.units_per_s),
                            u.map_or("-".into(), |u| ms(u.p50)),
                            u.map_or("-".into(), |u| ms(u.p99)),
                            c.sustained.map_or("-".into(), |s| s.to_string()),
                        )
                    }
                };
                let u = p.run.latency_ms.unit.as_ref();
                let _ = writeln!(
                    out,
                    "{:>10.1} {:>10.1} {:>8.1} {:>8.1} {:>9} {:>9} {:>7} {:>7} | {:>10} {:>9} {:>9} {:>9}",
                    p.rate.unwrap_or(0.0),
                    p.run.units_per_s,
                    p.run.requests_per_s,
                    p.run.decisions_per_s,
                    u.map_or("-".into(), |u| ms(u.p50)),
                    u.map_or("-".into(), |u| ms(u.p99)),
                    p.run.errors,
                    p.run.dropped,
                    cu,
                    c50,
                    c99,
                    sustained
                );
            }
            match saturated_at {
                Some(rate) => {
                    let _ = writeln!(
                        out,
                        "saturated: below {SATURATION} of the offered rate from {rate}/s"
                    );
                }
                None => {
                    let _ = writeln!(out, "not saturated at any rate offered");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Outcome, RequestResult, UnitResult};
    use std::time::Instant;

    fn request(status: u16, ok: bool, ms: u64, decisions: u64) -> RequestResult {
        RequestResult {
            outcome: Outcome::Response {
                status,
                server: Some(Duration::from_micros(ms * 500)),
            },
            ok,
            latency: Duration::from_millis(ms),
            decisions,
        }
    }

    /// 100 successful units of two requests, latencies 1..=100 ms.
    fn clean() -> Stats {
        let mut stats = Stats::default();
        for ms in 1..=100u64 {
            let unit = UnitResult {
                requests: vec![request(200, true, ms, 3), request(200, true, ms, 3)],
                latency: Duration::from_millis(ms),
                lag: Duration::from_micros(ms),
                ended: Instant::now(),
            };
            stats.record(&unit, true);
            stats.count_finished(&unit);
        }
        stats
    }

    /// `clean()`, then 4 failing units (one of them with a successful 1 s request).
    fn sample() -> Stats {
        let mut stats = clean();
        for _ in 0..2 {
            let unit = UnitResult {
                requests: vec![
                    request(200, true, 1000, 3),
                    RequestResult {
                        outcome: Outcome::Transport("timeout"),
                        ok: false,
                        latency: Duration::from_secs(60),
                        decisions: 3,
                    },
                ],
                latency: Duration::from_secs(60),
                lag: Duration::ZERO,
                ended: Instant::now(),
            };
            // Due in the window, ended after it: counted and timed, not in the rates.
            stats.record(&unit, true);
            let unit = UnitResult {
                requests: vec![request(503, false, 1, 3), request(503, false, 1, 3)],
                latency: Duration::from_millis(1),
                lag: Duration::ZERO,
                ended: Instant::now(),
            };
            stats.record(&unit, true);
            stats.count_finished(&unit);
        }
        stats
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 0.002 + 1e-9
    }

    #[test]
    fn counts_add_up_and_errors_are_not_timed() {
        let stats = sample();
        assert_eq!(stats.units, 104);
        assert_eq!(stats.units_ok, 100);
        assert_eq!(stats.requests, 208);
        assert_eq!(stats.requests_ok, 202);
        assert_eq!(stats.errors(), 6);
        assert_eq!(stats.decisions, 202 * 3);
        let finished = crate::stats::Finished {
            units_ok: 100,
            requests_ok: 200,
            decisions: 600,
        };
        assert_eq!(stats.finished, finished);
        assert_eq!(stats.statuses[&200], 202);
        assert_eq!(stats.statuses[&503], 4);
        assert_eq!(stats.transport_errors["timeout"], 2);
        assert_eq!(
            stats.statuses.values().sum::<u64>() + stats.transport_errors["timeout"],
            stats.requests
        );
        assert_eq!(stats.unit_latency.len(), 100);
        assert_eq!(stats.request_latency.len(), 202);
        assert_eq!(stats.start_lag.len(), 104);
    }

    #[test]
    fn percentiles_and_rates() {
        let figures = Figures::new(&sample(), Duration::from_secs(4), Duration::from_secs(5));
        let unit = figures.latency_ms.unit.as_ref().unwrap();
        assert_eq!(unit.count, 100);
        assert!(close(unit.p50, 50.0), "{unit:?}");
        assert!(close(unit.p90, 90.0), "{unit:?}");
        assert!(close(unit.p99, 99.0), "{unit:?}");
        assert!(close(unit.max, 100.0), "{unit:?}");
        assert!(close(unit.mean, 50.5), "{unit:?}");
        let request = figures.latency_ms.request.as_ref().unwrap();
        // 200 requests of 1..=100 ms and two of 1 s: the top 1% is the slow pair.
        assert!(close(request.max, 1000.0), "{request:?}");
        assert!(close(request.p99, 100.0), "{request:?}");
        let server = figures.latency_ms.server.as_ref().unwrap();
        // Half of each request time: 1..=100 ms twice each, the 101st of 202 is 51 ms.
        assert!(close(server.p50, 25.5), "{server:?}");
        assert!(close(server.max, 500.0), "{server:?}");
        assert!(close(
            figures.latency_ms.start_lag.as_ref().unwrap().max,
            0.1
        ));
        // The timed-out units ended after the window: their successful request is counted and
        // timed (202 ok) but not in the rates (200 ok ended in the window).
        assert_eq!(figures.requests_ok, 202);
        assert_eq!(figures.requests_per_s, 200.0 / 4.0);
        assert_eq!(figures.decisions_per_s, 600.0 / 4.0);
        assert_eq!(figures.units_per_s, 25.0);
        assert_eq!((figures.duration_s, figures.last_response_s), (4.0, 5.0));
        assert_eq!(figures.errors, 6);
        assert_eq!(figures.statuses["503"], 4);
        assert!(!figures.saturated(27.0));
        assert!(figures.saturated(28.0));
    }

    #[test]
    fn merged_stats_equal_one_recording() {
        let whole = sample();
        let mut a = Stats::default();
        a.merge(&whole);
        a.merge(&whole);
        assert_eq!(a.requests, 2 * whole.requests);
        assert_eq!(a.decisions, 2 * whole.decisions);
        assert_eq!(a.statuses[&503], 8);
        assert_eq!(a.finished.decisions, 2 * whole.finished.decisions);
        assert_eq!(
            a.unit_latency.value_at_quantile(0.5),
            whole.unit_latency.value_at_quantile(0.5)
        );
        assert_eq!(a.unit_latency.len(), 200);
    }

    #[test]
    fn an_empty_run_reports_no_percentiles_and_zero_rates() {
        let figures = Figures::new(&Stats::default(), Duration::ZERO, Duration::ZERO);
        assert!(figures.latency_ms.unit.is_none());
        assert_eq!(figures.requests_per_s, 0.0);
        let ceiling = Ceiling::open(figures, 10.0);
        assert_eq!(ceiling.sustained, Some(false));
    }

    #[test]
    fn json_report_flattens_a_single_point() {
        let figures = Figures::new(&clean(), Duration::from_secs(4), Duration::from_secs(4));
        let report = Report {
            mode: "open",
            url: "http://127.0.0.1:1".into(),
            workload: WorkloadInfo {
                path: "w.jsonl".into(),
                lines: 2,
                units: 1,
            },
            threads: 2,
            warmup_s: 0.0,
            expect_status: 200,
            arrivals: Some("uniform"),
            body: Body::Single(Box::new(Point {
                clients: None,
                rate: Some(20.0),
                run: figures.clone(),
                ceiling: Some(Ceiling::open(figures, 20.0)),
            })),
        };
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rate"], 20.0);
        assert_eq!(json["units_ok"], 100);
        assert_eq!(json["statuses"]["200"], 200);
        assert_eq!(json["ceiling"]["sustained"], true);
        assert_eq!(json["ceiling"]["requests"], 200);
        assert!(json["latency_ms"]["unit"]["p99_9"].is_number());
        assert!(json.get("clients").is_none());
        assert!(table(&report).contains("sustains the offered rate"));
        // Errors at the ceiling mean the generator did not sustain the rate.
        let failing = Ceiling::open(
            Figures::new(&sample(), Duration::from_secs(4), Duration::from_secs(5)),
            20.0,
        );
        assert_eq!(failing.sustained, Some(false));
    }
}
