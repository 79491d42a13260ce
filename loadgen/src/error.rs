//! The crate's one error type: what stops a run before or instead of measuring it. Failures of
//! single requests are not errors here; they are counted in the run's figures (`stats`).

use std::io;
use std::path::PathBuf;

/// Why decide-loadgen could not run; each message names the file, line or flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The workload file could not be read.
    #[error("reading the workload {path}: {source}")]
    ReadWorkload { path: PathBuf, source: io::Error },
    /// A workload line is not a valid request (1-based line number).
    #[error("workload line {line}: {message}")]
    Line { line: usize, message: String },
    /// The workload file has no request lines.
    #[error("the workload has no requests (one JSON object per line)")]
    EmptyWorkload,
    /// `--url` is not an `http://host:port[/prefix]` URL, or its host does not resolve.
    #[error("--url {url}: {message}")]
    Url { url: String, message: String },
    /// A flag's value is not usable.
    #[error("{flag}: {message}")]
    Flag { flag: &'static str, message: String },
    /// The server could not be reached before the run started.
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    /// The trivial ceiling server could not start.
    #[error("starting the trivial ceiling server: {0}")]
    Trivial(io::Error),
    /// The JSON report could not be written.
    #[error("writing the report {path}: {source}")]
    WriteReport { path: PathBuf, source: io::Error },
}
