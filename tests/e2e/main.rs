//! End-to-end tests: the real `decide` binary on a loopback port, the real built-in plugins
//! (WebAssembly components built from guests/), and a real model (SmolLM2-135M, fetched by
//! `scripts/fetch-model.sh smol`). One test binary, a module per concern.

mod server;
mod tenant_fixture;

mod abuse;
mod batch;
mod cache;
mod calibration;
mod contract;
mod cores;
mod endpoints;
mod errors;
mod fairness;
mod isolation;
mod lifecycle;
mod limits;
mod plugins;
mod progress;
mod prompts;
mod quality;
mod readouts;
mod robustness;
mod stalls;
mod structured;
mod telemetry;
mod tenant_calibration;
mod tenant_plugins;
mod tenants;

/// Asserts that probabilities are finite, in [0, 1] and sum to 1.
pub fn assert_distribution(probabilities: &[f64]) {
    assert!(!probabilities.is_empty());
    for p in probabilities {
        assert!(
            p.is_finite() && (0.0..=1.0).contains(p),
            "bad probability {p} in {probabilities:?}"
        );
    }
    let sum: f64 = probabilities.iter().sum();
    assert!(
        (sum - 1.0).abs() < 1e-6,
        "probabilities sum to {sum}: {probabilities:?}"
    );
}
