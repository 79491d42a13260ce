//! decide's engine: from a decision request to calibrated probabilities, with no HTTP, no
//! tenants and no wire formats.
//!
//! - [`pipeline`]: the one decision pipeline behind every format: a request's setup
//!   (renderer, labels, readout), each question compiled by its type's plugin, rendered,
//!   tokenized, read and answered; batches of items share what they can.
//! - [`readout`]: how an option set becomes reads (direct, wide-direct, two-stage,
//!   permutation, label schemes).
//! - [`scheduler`]: the model worker thread: batching, fair share between flows, the
//!   [`prefix_cache`] (with [`recent_starts`]), dropping cancelled work between passes;
//!   [`cores`] and [`priority`] keep it on a core of its own at a high priority.
//! - [`calibration`] and [`tune`]: startup calibration and tuning, the math of their fits and
//!   measures; [`selfcheck`]: the answer-slot self-check before serving.
//! - [`cancel`]: a request's cancellation (client gone, deadline passed, server stopping),
//!   carried to the worker and into plugin calls; [`progress`]: long work as log lines, bars
//!   and the figures `/health` shows; [`metrics`]: the engine's counters and their Prometheus
//!   text.
//! - [`error`]: [`EngineError`], what a request fails with, and [`error::RefusalKind`], what
//!   one question is refused with: kinds, not HTTP statuses (the server maps them).
//!
//! Callers hand it opaque scope values (a plugin scope, a cache salt, a fair-share flow, a
//! token admission callback) and never the tenant they came from. It depends on
//! `decide-models` (the forward pass) and `decide-plugins` (question types, renderers and
//! calibration policies); the server depends on it, never the other way.

pub mod calibration;
pub mod cancel;
pub mod cores;
pub mod error;
pub mod metrics;
pub mod pipeline;
pub mod prefix_cache;
pub mod priority;
pub mod progress;
pub mod readout;
pub mod recent_starts;
pub mod scheduler;
pub mod selfcheck;
pub mod tune;

/// The plugins crate, under the name the engine's modules use for it.
pub use decide_plugins as plugins;
pub use error::EngineError;
