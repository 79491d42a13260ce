//! Tenancy as the server uses it: the `decide-tenancy` crate (store, keys, limits, directory,
//! usage; re-exported here so that `crate::tenancy::store` and the like name it), and the
//! server's own tenant operations on top of it:
//!
//! - [`calibration`]: a tenant's own calibration, fitted in the background on the labelled
//!   questions it uploads (it reads through the engine, so it lives with the server), and
//!   its HTTP handlers ([`calibration_http`]).
//! - [`usage_http`]: `GET /v1/usage`, a tenant's own usage and rate limits by its own key.
//! - [`admin`]: the operations of tenant administration (tenants, keys, limits, settings),
//!   behind both the HTTP admin API ([`admin_http`]) and the `decide tenants` CLI ([`cli`]).

pub mod admin;
pub mod admin_http;
pub mod calibration;
pub mod calibration_http;
pub mod cli;
pub mod usage_http;

pub use decide_tenancy::*;
