//! The calibration answers get, as the pipeline applies it: the policy and its parameters
//! ([`CalibrationState`]), where an answer's temperature came from ([`TemperatureSource`]),
//! and the `auto` policy's names. Plain values: startup calibration (`calibration/mod.rs`)
//! and the pipeline both use them, and this module uses neither.

/// Value of `--calibration` that lets startup calibration choose the policy.
pub const AUTO: &str = "auto";

/// The policy `auto` serves before (or without) calibration, and when no policy is kept.
pub const AUTO_FALLBACK: &str = "temperature";

/// The calibration answers get when neither the request nor the operator sets a temperature.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationState {
    /// The policy plugin the parameters belong to.
    pub policy: String,
    /// The sha256 of the policy component that fitted them (empty for the default).
    pub plugin_sha256: String,
    /// Parameters for the policy's `apply`.
    pub params: Vec<f64>,
    /// The temperature they stand for (`params[0]`).
    pub temperature: f64,
    /// `Calibrated` or `Default`.
    pub source: TemperatureSource,
}

impl CalibrationState {
    /// T = 1.0, nothing measured.
    pub fn default_for(policy: &str) -> CalibrationState {
        CalibrationState {
            policy: policy.to_string(),
            plugin_sha256: String::new(),
            params: vec![1.0],
            temperature: 1.0,
            source: TemperatureSource::Default,
        }
    }
}

/// Where an answer's temperature came from, highest priority first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemperatureSource {
    /// `extra.calibration_temperature` of the request.
    Request,
    /// The tenant's own calibration, fitted on the labelled questions it uploaded.
    Tenant,
    /// `--temperature` of the operator.
    Operator,
    /// Measured by startup calibration (fitted and kept, or measured and no correction needed).
    Calibrated,
    /// Nothing measured or set: T = 1.0.
    Default,
}

impl TemperatureSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TemperatureSource::Request => "request",
            TemperatureSource::Tenant => "tenant",
            TemperatureSource::Operator => "operator",
            TemperatureSource::Calibrated => "calibrated",
            TemperatureSource::Default => "default",
        }
    }
}
