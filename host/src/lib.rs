//! decide: a typed-decision server.
//!
//! A caller sends an input text and typed questions; for each question the server reads a
//! language model's next-token distribution over the option labels at the answer position and
//! returns calibrated probabilities over a closed option set. No answer text is generated.
//!
//! Layout (see DESIGN.md): [`frontends`] translate wire formats into one [`pipeline`];
//! [`plugins`] runs question types, renderers and calibration policies as sandboxed
//! WebAssembly components; the model lives in the `decide-models` crate and every forward pass
//! runs on the [`scheduler`]'s worker thread, which batches concurrent requests and keeps the
//! [`prefix_cache`]. [`tenancy`] says who is asking (tenants, keys, their store). [`cancel`]
//! is a request's cancellation (client gone, deadline passed), carried from the frontend to
//! the worker. [`api`] builds the router; [`server`] loads everything and serves; [`mcp`] is the
//! same decisions as Model Context Protocol tools (stdio and `/mcp`).
//! [`telemetry`] sets up logs and OTLP traces; [`progress`] reports long work (log, bars,
//! `/health`).

pub mod api;
pub mod calibration;
pub mod cancel;
pub mod config;
pub mod cores;
pub mod doctor;
pub mod drain;
pub mod error;
pub mod eval;
pub mod frontends;
/// Entry points for the fuzz targets in `fuzz/` (not an API; see the module docs).
#[doc(hidden)]
pub mod fuzzing;
pub mod http_serve;
pub mod mcp;
pub mod metrics;
pub mod openapi;
pub mod pipeline;
pub mod plugin_api;
pub mod plugin_check;
/// The plugins crate, under the name the host's modules use for it.
pub use decide_plugins as plugins;
pub mod prefix_cache;
pub mod priority;
pub mod progress;
pub mod readout;
pub mod recent_starts;
pub mod scheduler;
pub mod selfcheck;
pub mod server;
pub mod store_watch;
pub mod telemetry;
pub mod tenancy;
pub mod tune;
