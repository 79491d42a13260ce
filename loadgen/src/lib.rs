//! decide-loadgen: an HTTP/1.1 load generator for decide and vLLM.
//!
//! It is server-agnostic: what to send comes from a workload file (`workload`), one request per
//! line, grouped into units that are sent together, so one program drives decide's one request
//! with many questions and vLLM's many requests over a shared prefix alike. Two ways to load a
//! server (`runner`): closed-loop clients, each sending its next unit when the previous one has
//! answered, and open-loop arrivals on a fixed schedule (`schedule`), timed from the *scheduled*
//! start so a slow server cannot hide its queueing (no coordinated omission). Each connection is
//! one hyper HTTP/1.1 keep-alive connection with TCP_NODELAY that a client owns (`client`), so
//! the connection count is exactly the concurrency and no pool sits between the clock and the
//! socket. Counts and HdrHistogram latencies (`stats`) become the report (`report`). Every
//! figure is printed beside the generator's own ceiling: the same run against a trivial hyper
//! server that the generator starts on loopback (`trivial`), so a figure near the ceiling is
//! read as the generator's limit, not the server's.

pub mod client;
pub mod error;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod stats;
pub mod timeline;
pub mod trivial;
pub mod workload;

pub use error::Error;
