//! decide's server: the HTTP API over the decision engine.
//!
//! A caller sends an input text and typed questions; for each question the engine reads a
//! language model's next-token distribution over the option labels at the answer position and
//! returns calibrated probabilities over a closed option set. No answer text is generated.
//!
//! Layout (see the book's architecture page): this crate is the server and the offline commands the
//! `decide` binary (crate `decide`, `cli/`) runs. The engine (`decide-engine`: the [`pipeline`],
//! the [`scheduler`]'s model worker and its [`prefix_cache`], readouts, calibration, tuning,
//! [`cancel`], [`progress`]) is re-exported under its module names, as are `decide-plugins`
//! ([`plugins`]) and, inside [`tenancy`], `decide-tenancy`; the model lives in `decide-models`.
//! Here: [`frontends`] translate wire formats into the one pipeline; [`api`] builds the router,
//! [`state`] is what its handlers share, [`endpoints`] the small ones; [`server`] loads everything
//! and serves; [`mcp`] is the same decisions as Model Context Protocol tools (stdio and `/mcp`);
//! [`error`] maps every failure to HTTP in one place; [`telemetry`] sets up logs and OTLP traces;
//! [`config`] is every flag; [`console`] serves the web console at `/console`.

pub mod api;
pub mod config;
pub mod console;
pub mod doctor;
pub mod drain;
pub mod endpoints;
pub mod error;
pub mod eval;
pub mod frontends;
/// Entry points for the fuzz targets in `fuzz/` (not an API; see the module docs).
#[doc(hidden)]
pub mod fuzzing;
pub mod http_serve;
pub mod mcp;
pub mod openapi;
pub mod plugin_api;
pub mod plugin_check;
/// The engine's modules, under the names the server's modules use for them.
pub use decide_engine::{
    calibration, cancel, cores, loc, metrics, pipeline, prefix_cache, priority, progress, readout,
    recent_starts, scheduler, selfcheck, tune,
};
/// The plugins crate, under the name the server's modules use for it.
pub use decide_plugins as plugins;
pub mod server;
pub mod state;
pub mod store_watch;
pub mod telemetry;
pub mod tenancy;
