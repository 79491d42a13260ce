//! Progress of long work: one reporter for every step that takes more than a moment.
//!
//! Loading the model, the answer-slot self-check, startup tuning (renderer selection), startup
//! calibration, a tenant's calibration, and the `calibrate`, `tune` and `eval` subcommands each
//! start a [`Task`] from a [`Reporter`] and count what they have done (tensors, questions,
//! reads). A task knows its rate and its ETA, and is shown in one of two ways:
//!
//! - plain lines in the log: one when it starts, one every `--progress-every-s` (10 s by
//!   default) while it runs, from a ticker thread, so a stalled step still says it is alive,
//!   and one when it ends;
//! - a progress bar (`indicatif`) on a terminal, for the CLI subcommands when stderr is one.
//!
//! A server's reporter also publishes its live tasks on a [`Board`] that `/health` shows
//! (done, total, rate, ETA), so an orchestrator or a person sees how far a start has come.
//! One module owns all of this so that every long step reports alike.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The default interval between two progress lines (`--progress-every-s`).
pub const DEFAULT_EVERY_S: f64 = 10.0;

/// The live tasks of one server, for `/health`.
#[derive(Default)]
pub struct Board {
    tasks: Mutex<Vec<Weak<Shared>>>,
}

impl Board {
    /// Every live task, oldest first, as `/health` shows it.
    pub fn snapshot(&self) -> Vec<Value> {
        self.live().iter().map(|task| task.to_json()).collect()
    }

    /// The line of the task started last, for `/health`'s `step` while the server loads.
    pub fn current_line(&self) -> Option<String> {
        self.live().last().map(|task| task.short_line())
    }

    fn live(&self) -> Vec<Arc<Shared>> {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|task| task.strong_count() > 0);
        tasks.iter().filter_map(Weak::upgrade).collect()
    }

    fn add(&self, task: &Arc<Shared>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|task| task.strong_count() > 0);
        tasks.push(Arc::downgrade(task));
    }
}

/// Where tasks are shown: the log (and a board) or a terminal's progress bars.
#[derive(Clone)]
pub struct Reporter {
    board: Option<Arc<Board>>,
    bars: bool,
    every: Duration,
}

impl Default for Reporter {
    fn default() -> Self {
        Reporter::log(DEFAULT_EVERY_S)
    }
}

impl Reporter {
    /// Plain log lines every `every_s` seconds.
    pub fn log(every_s: f64) -> Reporter {
        Reporter {
            board: None,
            bars: false,
            every: interval(every_s),
        }
    }

    /// A server's: log lines, and every live task on `board` (shown by `/health`).
    pub fn publishing(board: Arc<Board>, every_s: f64) -> Reporter {
        Reporter {
            board: Some(board),
            ..Reporter::log(every_s)
        }
    }

    /// A CLI subcommand's: a progress bar when stderr is a terminal, log lines otherwise.
    pub fn cli(every_s: f64) -> Reporter {
        Reporter {
            bars: std::io::stderr().is_terminal(),
            ..Reporter::log(every_s)
        }
    }

    /// Starts a task of `total` `unit`s (0: not known yet, see [`Task::set_total`]).
    pub fn start(&self, name: &str, unit: &'static str, total: u64) -> Task {
        self.start_for(name, None, unit, total)
    }

    /// [`Reporter::start`] for a subject named in the log lines only (a tenant's id), never
    /// on the board that `/health` shows to anyone who asks.
    pub fn start_for(
        &self,
        name: &str,
        subject: Option<&str>,
        unit: &'static str,
        total: u64,
    ) -> Task {
        let shared = Arc::new(Shared {
            name: name.to_string(),
            subject: subject.map(str::to_string),
            unit,
            started: Instant::now(),
            done: AtomicU64::new(0),
            total: AtomicU64::new(total),
            detail: Mutex::new(String::new()),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        if let Some(board) = &self.board {
            board.add(&shared);
        }
        let bar = self.bars.then(|| bar_for(&shared));
        let ticker = if bar.is_none() {
            tracing::info!(task = %shared.name, total, "{}", shared.log_line("started"));
            let ticking = shared.clone();
            let every = self.every;
            std::thread::Builder::new()
                .name("decide-progress".into())
                .spawn(move || ticking.tick_every(every))
                .ok()
        } else {
            None
        };
        Task {
            shared,
            bar,
            ticker,
        }
    }
}

/// Seconds as a ticker interval (at least 50 ms).
fn interval(every_s: f64) -> Duration {
    Duration::from_secs_f64(
        if every_s.is_finite() {
            every_s
        } else {
            DEFAULT_EVERY_S
        }
        .max(0.05),
    )
}

/// One piece of long work in progress; it ends (its last line logged, its bar cleared, its
/// board entry gone) with [`Task::finish`] or when dropped.
pub struct Task {
    shared: Arc<Shared>,
    bar: Option<indicatif::ProgressBar>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Task {
    /// Sets how many units the work has (once it is known, or when it changes).
    pub fn set_total(&self, total: u64) {
        self.shared.total.store(total, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_length(total);
        }
    }

    /// Counts `n` more units done.
    pub fn advance(&self, n: u64) {
        let done = self.shared.done.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    /// Sets the units done.
    pub fn set_done(&self, done: u64) {
        self.shared.done.store(done, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    /// What the task does now (a phase of it, the candidate it reads), shown after its counts.
    pub fn set_detail(&self, detail: impl Into<String>) {
        let detail = detail.into();
        if let Some(bar) = &self.bar {
            bar.set_message(detail.clone());
        }
        *self.shared.detail.lock().unwrap_or_else(|p| p.into_inner()) = detail;
    }

    /// Units done so far.
    pub fn done(&self) -> u64 {
        self.shared.done.load(Ordering::Relaxed)
    }

    /// Ends the task: its last line, and its bar and board entry go.
    pub fn finish(self) {
        drop(self);
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        *self
            .shared
            .stopped
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
        match self.bar.take() {
            Some(bar) => bar.finish_and_clear(),
            None => {
                let done = self.shared.done.load(Ordering::Relaxed);
                tracing::info!(
                    task = %self.shared.name,
                    done,
                    seconds = self.shared.started.elapsed().as_secs_f64(),
                    "{}",
                    self.shared.log_line("finished")
                );
            }
        }
    }
}

/// What a task's reporters share: its counts, its detail, its ticker's stop signal.
struct Shared {
    name: String,
    subject: Option<String>,
    unit: &'static str,
    started: Instant,
    done: AtomicU64,
    total: AtomicU64,
    detail: Mutex<String>,
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// A task's figures at one moment.
struct Figures {
    done: u64,
    total: u64,
    elapsed_s: f64,
    /// Units per second so far (none before the first unit).
    rate: Option<f64>,
    /// Seconds left at that rate (none while nothing is done or the total is not known).
    eta_s: Option<f64>,
}

impl Shared {
    fn figures(&self) -> Figures {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let elapsed_s = self.started.elapsed().as_secs_f64();
        let rate = (done > 0 && elapsed_s > 0.0).then(|| done as f64 / elapsed_s);
        let eta_s = rate
            .filter(|_| total > 0)
            .map(|rate| total.saturating_sub(done) as f64 / rate);
        Figures {
            done,
            total,
            elapsed_s,
            rate,
            eta_s,
        }
    }

    fn detail(&self) -> String {
        self.detail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// `calibrating (120/400 questions, ETA 151 s)`: `/health`'s step while loading.
    fn short_line(&self) -> String {
        let f = self.figures();
        let mut line = format!("{} ({}", self.name, self.counts(&f));
        if let Some(eta) = f.eta_s {
            line.push_str(&format!(", ETA {eta:.0} s"));
        }
        let detail = self.detail();
        if !detail.is_empty() {
            line.push_str(&format!(", {detail}"));
        }
        line + ")"
    }

    /// `120/400 questions`, or `120 questions` while the total is not known.
    fn counts(&self, f: &Figures) -> String {
        match f.total {
            0 => format!("{} {}", f.done, self.unit),
            total => format!("{}/{total} {}", f.done, self.unit),
        }
    }

    /// A log line: `progress: calibrating (tenant t1): 120/400 questions (30%), 65 s, 1.8
    /// questions/s, ETA 151 s; fitting platt`.
    fn log_line(&self, how: &str) -> String {
        let f = self.figures();
        let who = match &self.subject {
            Some(subject) => format!("{} of {subject}", self.name),
            None => self.name.clone(),
        };
        // A task whose size is not known yet starts with nothing to count.
        if how == "started" && f.total == 0 && f.done == 0 {
            return format!("progress: {who} started");
        }
        let mut line = format!("progress: {who} {how}: {}", self.counts(&f));
        if f.total > 0 {
            line.push_str(&format!(
                " ({:.0}%)",
                100.0 * f.done.min(f.total) as f64 / f.total as f64
            ));
        }
        line.push_str(&format!(", {:.0} s", f.elapsed_s));
        if let Some(rate) = f.rate {
            line.push_str(&format!(", {rate:.2} {}/s", self.unit));
        }
        if let (Some(eta), "running") = (f.eta_s, how) {
            line.push_str(&format!(", ETA {eta:.0} s"));
        }
        let detail = self.detail();
        if !detail.is_empty() {
            line.push_str(&format!("; {detail}"));
        }
        line
    }

    fn to_json(&self) -> Value {
        let f = self.figures();
        json!({
            "task": self.name, "unit": self.unit, "done": f.done,
            "total": (f.total > 0).then_some(f.total),
            "elapsed_s": round(f.elapsed_s), "rate_per_s": f.rate.map(round),
            "eta_s": f.eta_s.map(round),
            "detail": Some(self.detail()).filter(|d| !d.is_empty()),
        })
    }

    /// Logs a line every `every` until the task stops.
    fn tick_every(&self, every: Duration) {
        let mut stopped = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let (guard, timeout) = self
                .wake
                .wait_timeout_while(stopped, every, |stopped| !*stopped)
                .unwrap_or_else(|p| p.into_inner());
            stopped = guard;
            if !timeout.timed_out() {
                return;
            }
            let f = self.figures();
            tracing::info!(
                task = %self.name,
                done = f.done,
                total = f.total,
                eta_s = f.eta_s,
                "{}",
                self.log_line("running")
            );
        }
    }
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// A terminal progress bar for a task: name, bar, counts, rate, ETA, detail.
fn bar_for(shared: &Shared) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(shared.total.load(Ordering::Relaxed)),
        indicatif::ProgressDrawTarget::stderr(),
    );
    let template = format!(
        "{} [{{bar:30}}] {{pos}}/{{len}} {} ({{per_sec}}, ETA {{eta}}) {{msg}}",
        shared.name, shared.unit
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_give_the_rate_and_eta_and_the_board_forgets_ended_tasks() {
        let board = Arc::new(Board::default());
        let reporter = Reporter::publishing(board.clone(), 60.0);
        let task = reporter.start("calibrating", "questions", 10);
        assert_eq!(
            board.snapshot()[0]["eta_s"],
            Value::Null,
            "nothing done yet"
        );
        std::thread::sleep(Duration::from_millis(20));
        task.advance(4);
        task.set_detail("fitting platt");
        let shown = &board.snapshot()[0];
        assert_eq!(shown["done"], 4);
        assert_eq!(shown["total"], 10);
        assert!(shown["rate_per_s"].as_f64().unwrap() > 0.0, "{shown}");
        assert!(shown["eta_s"].as_f64().is_some(), "{shown}");
        let line = board.current_line().unwrap();
        assert!(
            line.starts_with("calibrating (4/10 questions, ETA "),
            "{line}"
        );
        assert!(line.ends_with(", fitting platt)"), "{line}");
        task.finish();
        assert!(board.snapshot().is_empty());
        assert_eq!(board.current_line(), None);
    }

    #[test]
    fn a_subject_is_logged_but_not_published() {
        let board = Arc::new(Board::default());
        let reporter = Reporter::publishing(board.clone(), 60.0);
        let task = reporter.start_for("tenant calibration", Some("acme"), "questions", 3);
        assert!(!board.snapshot()[0].to_string().contains("acme"));
        assert!(task.shared.log_line("running").contains("of acme"));
    }

    #[test]
    fn the_ticker_stops_when_the_task_ends() {
        let task = Reporter::log(0.05).start("loading", "MiB", 0);
        std::thread::sleep(Duration::from_millis(120));
        let started = Instant::now();
        task.finish();
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
