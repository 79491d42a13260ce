//! `bias-temperature`: `softmax(scores / T + b)` with `params = [T, b_0 = 0, b_1, ...]`, one bias per label position, fitted together with T (see decide_guest_common::bias_temperature).

wit_bindgen::generate!({ path: "../../wit", world: "calibration-plugin" });

use decide::plugin::types::{LabelledScores, PluginError, PluginInfo};
use decide_guest_common::{bias_temperature as t, Error};
use exports::decide::plugin::calibration::Guest;

struct Plugin;

fn err(e: Error) -> PluginError {
    match e {
        Error::Invalid(m) => PluginError::InvalidQuestion(m),
        Error::Failure(m) => PluginError::Failure(m),
    }
}

impl Guest for Plugin {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "bias-temperature".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "softmax(scores / T + b): a temperature and one bias per label position (A, B, ...), fitted together by Newton on the mean NLL; addresses label bias.".into(),
        }
    }

    fn default_params(temperature: f64) -> Vec<f64> {
        t::default_params(temperature)
    }

    fn fit(samples: Vec<LabelledScores>) -> Result<Vec<f64>, PluginError> {
        let samples: Vec<(Vec<f64>, u32)> = samples
            .into_iter()
            .map(|s| (s.scores, s.expected))
            .collect();
        t::fit(&samples).map_err(err)
    }

    fn apply(scores: Vec<f64>, params: Vec<f64>) -> Result<Vec<f64>, PluginError> {
        t::apply(&scores, &params).map_err(err)
    }
}

export!(Plugin);
