//! The generator end to end against its own trivial server on loopback: closed and open runs of
//! about a second, whose counts must add up (each status counted once per request, decisions per
//! successful request, a group's requests counted as one unit), an error path, and a sweep that
//! stops at saturation.

use std::sync::Arc;
use std::time::Duration;

use decide_loadgen::client::{Settings, Target};
use decide_loadgen::runner::{self, Plan, Run};
use decide_loadgen::schedule::Arrivals;
use decide_loadgen::trivial::Trivial;
use decide_loadgen::workload::Workload;
use http::{HeaderName, StatusCode};

/// Two groups of four requests, three decisions each: every unit is four requests, twelve
/// decisions. Bodies differ in size so the server really reads them.
fn grouped_workload() -> Workload {
    let mut text = String::new();
    for group in ["a", "b"] {
        for i in 0..4 {
            let input = "x".repeat(100 * (i + 1));
            text.push_str(&format!(
                "{{\"path\": \"/v1/decisions\", \"body\": {{\"input\": \"{input}\"}}, \
                 \"decisions\": 3, \"group\": \"{group}\"}}\n"
            ));
        }
    }
    let workload = Workload::parse(&text).unwrap();
    assert_eq!(workload.units.len(), 2);
    workload
}

async fn plan(trivial: &Trivial, workload: &Workload, expect: StatusCode, seconds: f64) -> Plan {
    Plan {
        target: Arc::new(Target::new(&trivial.url(), workload).await.unwrap()),
        settings: Settings {
            expect,
            server_ms_header: Some(HeaderName::from_static("x-decide-server-ms")),
            timeout: Duration::from_secs(5),
        },
        warmup: Duration::from_millis(100),
        duration: Duration::from_secs_f64(seconds),
    }
}

/// Counts that must hold for any run of `grouped_workload` without errors.
fn assert_counts_add_up(run: &Run) {
    let s = &run.stats;
    assert!(s.units > 0, "nothing was recorded");
    assert_eq!(s.requests, s.statuses.values().sum::<u64>(), "{s:?}");
    assert_eq!(s.statuses.get(&200).copied(), Some(s.requests), "{s:?}");
    assert!(s.transport_errors.is_empty(), "{:?}", s.transport_errors);
    assert_eq!(s.errors(), 0);
    assert_eq!(
        s.requests,
        4 * s.units,
        "a group is one unit of four requests"
    );
    assert_eq!(s.units_ok, s.units);
    assert_eq!(s.decisions, 3 * s.requests);
    assert_eq!(s.unit_latency.len(), s.units);
    assert_eq!(s.request_latency.len(), s.requests);
    // The trivial server sends no server-time header.
    assert!(s.server_time.is_empty());
    // Rates count what ended in the window: about the units due in it (the two differ by the
    // units in flight at its edges, more when a busy machine stalls the run there).
    let f = s.finished;
    assert!(
        f.units_ok.abs_diff(s.units) <= (s.units / 4).max(16),
        "{f:?} vs {} units",
        s.units
    );
    assert_eq!(f.requests_ok, 4 * f.units_ok);
    assert_eq!(f.decisions, 3 * f.requests_ok);
    let figures = run.figures();
    assert_eq!(run.window, Duration::from_secs_f64(figures.duration_s));
    assert!((figures.units_per_s - f.units_ok as f64 / figures.duration_s).abs() < 1e-6);
    assert!((figures.decisions_per_s - f.decisions as f64 / figures.duration_s).abs() < 1e-6);
    let unit = figures.latency_ms.unit.unwrap();
    let request = figures.latency_ms.request.unwrap();
    assert!(
        unit.p50 >= request.p50 * 0.9,
        "a unit waits for its slowest request"
    );
    assert!(unit.max < 5000.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_counts_add_up() {
    let trivial = Trivial::start(1, StatusCode::OK).unwrap();
    let workload = grouped_workload();
    let plan = plan(&trivial, &workload, StatusCode::OK, 1.0).await;
    let run = runner::closed(&plan, 8, false).await.unwrap();
    assert_counts_add_up(&run);
    let last = run.to_last_response;
    assert!(
        last >= Duration::from_secs(1) && last < Duration::from_secs(3),
        "{last:?}"
    );
    assert!(
        run.stats.start_lag.is_empty(),
        "closed loop has no schedule"
    );
    assert_eq!(run.stats.dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_once_sends_each_unit_once() {
    let trivial = Trivial::start(1, StatusCode::OK).unwrap();
    let workload = grouped_workload();
    let mut plan = plan(&trivial, &workload, StatusCode::OK, 5.0).await;
    plan.warmup = Duration::ZERO;
    let run = runner::closed(&plan, 3, true).await.unwrap();
    let s = &run.stats;
    // Two units of four requests each, whatever the clients: then the run ends, long before
    // its 5 s window, and its rates are over the time it took.
    assert_eq!((s.units, s.units_ok, s.requests), (2, 2, 8));
    assert_eq!(s.finished.units_ok, 2);
    assert!(run.window < Duration::from_secs(1), "{:?}", run.window);
    assert_eq!(run.window, run.to_last_response);
    let figures = run.figures();
    assert!((figures.units_per_s - 2.0 / run.window.as_secs_f64()).abs() < 1e-6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_sends_the_schedule() {
    let trivial = Trivial::start(1, StatusCode::OK).unwrap();
    let workload = grouped_workload();
    let plan = plan(&trivial, &workload, StatusCode::OK, 1.0).await;
    let run = runner::open(&plan, 200.0, Arrivals::Uniform, 1000).await;
    assert_counts_add_up(&run);
    // Exactly the units due in the recorded second: 200, give or take the edge.
    assert!(
        (199..=201).contains(&run.stats.units),
        "{}",
        run.stats.units
    );
    assert_eq!(run.stats.dropped, 0);
    assert_eq!(run.stats.start_lag.len(), run.stats.units);
    assert_eq!(run.window, plan.duration);
    // About the offered rate; a stall at the window's edges moves some units across it.
    let units_per_s = run.figures().units_per_s;
    assert!((150.0..=250.0).contains(&units_per_s), "{units_per_s}");

    let poisson = runner::open(&plan, 200.0, Arrivals::Poisson { seed: 9 }, 1000).await;
    assert_counts_add_up(&poisson);
    assert!(
        (140..=260).contains(&poisson.stats.units),
        "{}",
        poisson.stats.units
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unexpected_statuses_are_errors() {
    let trivial = Trivial::start(1, StatusCode::SERVICE_UNAVAILABLE).unwrap();
    let workload = grouped_workload();
    let plan = plan(&trivial, &workload, StatusCode::OK, 0.3).await;
    let run = runner::closed(&plan, 2, false).await.unwrap();
    let s = &run.stats;
    assert!(s.requests > 0);
    assert_eq!(s.statuses.get(&503).copied(), Some(s.requests));
    assert_eq!(s.errors(), s.requests);
    assert_eq!((s.requests_ok, s.units_ok, s.decisions), (0, 0, 0));
    assert!(s.unit_latency.is_empty() && s.request_latency.is_empty());
    assert_eq!(run.figures().requests_per_s, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_an_error_before_the_run() {
    let trivial = Trivial::start(1, StatusCode::OK).unwrap();
    let workload = grouped_workload();
    let plan = plan(&trivial, &workload, StatusCode::OK, 0.2).await;
    drop(trivial);
    let error = runner::closed(&plan, 2, false).await.unwrap_err();
    assert!(error.to_string().contains("cannot connect"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_stops_after_two_saturated_rates() {
    let trivial = Trivial::start(1, StatusCode::OK).unwrap();
    let workload = grouped_workload();
    let mut plan = plan(&trivial, &workload, StatusCode::OK, 0.3).await;
    plan.warmup = Duration::ZERO;
    // One unit in flight at a time cannot keep up with 50,000 units/s: the excess is dropped.
    // 200/s can, unless the machine stalls the run, so the test asks only that the sweep
    // stopped at the second saturated rate, whichever that was.
    let rates = [200.0, 50_000.0, 60_000.0, 70_000.0];
    let mut seen = Vec::new();
    let (points, saturated_at) =
        runner::sweep(&plan, Some(&plan), &rates, Arrivals::Uniform, 1, |p| {
            seen.push(p.rate)
        })
        .await;
    let measured: Vec<f64> = points.iter().map(|p| p.rate).collect();
    assert_eq!(seen, measured);
    let saturated: Vec<bool> = points
        .iter()
        .map(|p| p.run.figures().saturated(p.rate))
        .collect();
    assert_eq!(saturated.iter().filter(|s| **s).count(), 2, "{saturated:?}");
    assert_eq!(saturated.last(), Some(&true), "{saturated:?}");
    assert!(points.len() < rates.len(), "{measured:?}");
    let first = saturated.iter().position(|s| *s).unwrap();
    assert_eq!(saturated_at, Some(rates[first]));
    assert!(points[1].run.stats.dropped > 0);
    assert!(points.iter().all(|p| p.ceiling.is_some()));
}
