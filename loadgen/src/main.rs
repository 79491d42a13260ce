//! `decide-loadgen`: the command line over the decide-loadgen library.
//!
//! Parses the flags, builds the generator's runtime with `--threads` workers, measures the
//! ceiling (the same mode against the trivial server) unless `--no-ceiling`, runs the mode
//! against `--url`, prints the table and writes `--report`.
//!
//! ```text
//! decide-loadgen closed --url http://127.0.0.1:8000 --workload w.jsonl --clients 64 --duration 10
//! decide-loadgen sweep --url http://127.0.0.1:8000 --workload w.jsonl --rates 500,1000,2000 --duration 10
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use decide_loadgen::client::{Settings, Target};
use decide_loadgen::report::{self, Body, Ceiling, Point, Report, WorkloadInfo};
use decide_loadgen::runner::{self, Plan};
use decide_loadgen::schedule::Arrivals;
use decide_loadgen::trivial::Trivial;
use decide_loadgen::workload::Workload;
use decide_loadgen::Error;
use http::{HeaderName, StatusCode};

/// Load an HTTP server with the requests of a workload file (JSONL, one request a line), in
/// closed-loop clients or open-loop arrivals, beside the generator's own ceiling.
#[derive(Parser)]
#[command(name = "decide-loadgen", version)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// N clients, each sending its next unit as soon as the previous one answered.
    Closed {
        #[command(flatten)]
        common: Common,
        /// Concurrent clients (each with its own keep-alive connections).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        clients: u64,
        /// Send each unit at most once: for cold-cache workloads whose units each carry their
        /// own cache key (use with --warmup 0). The run ends when the units run out.
        #[arg(long)]
        once: bool,
    },
    /// Units due at a fixed rate, timed from their due time.
    Open {
        #[command(flatten)]
        common: Common,
        /// Units per second.
        #[arg(long, value_parser = positive)]
        rate: f64,
        #[command(flatten)]
        arrivals: ArrivalArgs,
    },
    /// `open` at each rate, stopping after the second rate that falls below 90% of its offer.
    Sweep {
        #[command(flatten)]
        common: Common,
        /// Units per second, comma-separated, in the order to run them.
        #[arg(long, value_delimiter = ',', required = true, value_parser = positive)]
        rates: Vec<f64>,
        #[command(flatten)]
        arrivals: ArrivalArgs,
    },
}

#[derive(Args)]
struct Common {
    /// The server: http://host:port, optionally with a path prefix for every workload path.
    #[arg(long)]
    url: String,
    /// The workload file (JSONL): {"method", "path", "body", "decisions", "group", "headers"}.
    #[arg(long)]
    workload: PathBuf,
    /// Seconds recorded.
    #[arg(long, default_value_t = 10.0, value_parser = positive)]
    duration: f64,
    /// Seconds sent before recording starts.
    #[arg(long, default_value_t = 1.0, value_parser = non_negative)]
    warmup: f64,
    /// The generator's worker threads (default: every core).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    threads: Option<u64>,
    /// Write the report as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Skip the ceiling run against the trivial server.
    #[arg(long)]
    no_ceiling: bool,
    /// Seconds recorded in each ceiling run (default: --duration).
    #[arg(long, value_parser = positive)]
    ceiling_duration: Option<f64>,
    /// The status that counts as success.
    #[arg(long, default_value_t = 200)]
    expect_status: u16,
    /// A response header with the server's own time in ms (decide: x-decide-server-ms).
    #[arg(long)]
    server_ms_header: Option<String>,
    /// Seconds one request may take before it counts as a timeout.
    #[arg(long, default_value_t = 60.0, value_parser = positive)]
    timeout: f64,
}

#[derive(Args)]
struct ArrivalArgs {
    /// Poisson arrivals (exponential gaps) instead of uniform spacing.
    #[arg(long)]
    poisson: bool,
    /// Seed of the Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Most units outstanding; a unit due while this many are is dropped (and counted).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    max_in_flight: u64,
}

impl ArrivalArgs {
    fn arrivals(&self) -> Arrivals {
        if self.poisson {
            Arrivals::Poisson { seed: self.seed }
        } else {
            Arrivals::Uniform
        }
    }
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

fn non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not a number >= 0")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let common = match &cli.mode {
        Mode::Closed { common, .. } | Mode::Open { common, .. } | Mode::Sweep { common, .. } => {
            common
        }
    };
    let threads = common
        .threads
        .map(|t| t as usize)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("decide-loadgen: building the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&cli.mode, threads)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("decide-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The real plan and, unless `--no-ceiling`, the ceiling's plan with its trivial server.
struct Plans {
    real: Plan,
    ceiling: Option<(Plan, Trivial)>,
}

async fn plans(common: &Common, workload: &Workload, threads: usize) -> Result<Plans, Error> {
    let expect = StatusCode::from_u16(common.expect_status).map_err(|_| Error::Flag {
        flag: "--expect-status",
        message: format!("{} is not an HTTP status", common.expect_status),
    })?;
    let server_ms_header = match &common.server_ms_header {
        Some(name) => Some(
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| Error::Flag {
                flag: "--server-ms-header",
                message: format!("{name:?} is not a header name"),
            })?,
        ),
        None => None,
    };
    let settings = Settings {
        expect,
        server_ms_header,
        timeout: Duration::from_secs_f64(common.timeout),
    };
    let real = Plan {
        target: Arc::new(Target::new(&common.url, workload).await?),
        settings: settings.clone(),
        warmup: Duration::from_secs_f64(common.warmup),
        duration: Duration::from_secs_f64(common.duration),
    };
    let ceiling = if common.no_ceiling {
        None
    } else {
        // The trivial server answers the expected status, so the same settings judge it.
        let trivial = Trivial::start(threads, expect)?;
        let plan = Plan {
            target: Arc::new(Target::new(&trivial.url(), workload).await?),
            settings,
            warmup: real.warmup,
            duration: common
                .ceiling_duration
                .map_or(real.duration, Duration::from_secs_f64),
        };
        Some((plan, trivial))
    };
    Ok(Plans { real, ceiling })
}

async fn run(mode: &Mode, threads: usize) -> Result<(), Error> {
    let (common, name) = match mode {
        Mode::Closed { common, .. } => (common, "closed"),
        Mode::Open { common, .. } => (common, "open"),
        Mode::Sweep { common, .. } => (common, "sweep"),
    };
    let workload = Workload::load(&common.workload)?;
    let plans = plans(common, &workload, threads).await?;
    let ceiling_plan = plans.ceiling.as_ref().map(|(plan, _)| plan);
    eprintln!(
        "decide-loadgen {name}: {} ({} lines, {} units) -> {}, {threads} threads{}",
        common.workload.display(),
        workload.lines,
        workload.units.len(),
        common.url,
        match &plans.ceiling {
            Some((_, trivial)) => format!(", ceiling against {}", trivial.url()),
            None => String::new(),
        }
    );
    let (arrivals, body) = match mode {
        Mode::Closed { clients, once, .. } => {
            let (clients, once) = (*clients as usize, *once);
            let ceiling = match ceiling_plan {
                Some(plan) => Some(Ceiling::closed(
                    runner::closed(plan, clients, once).await?.figures(),
                )),
                None => None,
            };
            let run = runner::closed(&plans.real, clients, once).await?.figures();
            let point = Point {
                clients: Some(clients),
                rate: None,
                run,
                ceiling,
            };
            (None, Body::Single(Box::new(point)))
        }
        Mode::Open { rate, arrivals, .. } => {
            let (kind, cap) = (arrivals.arrivals(), arrivals.max_in_flight as usize);
            let ceiling = match ceiling_plan {
                Some(plan) => Some(Ceiling::open(
                    runner::open(plan, *rate, kind, cap).await.figures(),
                    *rate,
                )),
                None => None,
            };
            let run = runner::open(&plans.real, *rate, kind, cap).await.figures();
            let point = Point {
                clients: None,
                rate: Some(*rate),
                run,
                ceiling,
            };
            (Some(kind.name()), Body::Single(Box::new(point)))
        }
        Mode::Sweep {
            rates, arrivals, ..
        } => {
            let (kind, cap) = (arrivals.arrivals(), arrivals.max_in_flight as usize);
            let (points, saturated_at) =
                runner::sweep(&plans.real, ceiling_plan, rates, kind, cap, |p| {
                    let f = p.run.figures();
                    eprintln!(
                        "  rate {}/s: {:.1} units/s, p50 {} ms, p99 {} ms, {} errors, {} dropped",
                        p.rate,
                        f.units_per_s,
                        f.latency_ms.unit.as_ref().map_or(f64::NAN, |u| u.p50),
                        f.latency_ms.unit.as_ref().map_or(f64::NAN, |u| u.p99),
                        f.errors,
                        f.dropped
                    );
                })
                .await;
            let points = points
                .into_iter()
                .map(|p| Point {
                    clients: None,
                    rate: Some(p.rate),
                    run: p.run.figures(),
                    ceiling: p.ceiling.map(|c| Ceiling::open(c.figures(), p.rate)),
                })
                .collect();
            (
                Some(kind.name()),
                Body::Sweep {
                    points,
                    saturated_at,
                },
            )
        }
    };
    let report = Report {
        mode: name,
        url: common.url.clone(),
        workload: WorkloadInfo {
            path: common.workload.display().to_string(),
            lines: workload.lines,
            units: workload.units.len(),
        },
        threads,
        warmup_s: common.warmup,
        expect_status: common.expect_status,
        arrivals,
        body,
    };
    print!("{}", report::table(&report));
    if let Some(path) = &common.report {
        let json = serde_json::to_vec_pretty(&report).expect("a report serializes");
        std::fs::write(path, json).map_err(|source| Error::WriteReport {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}
