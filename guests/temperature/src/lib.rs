//! `temperature`: the default calibration policy, `softmax(scores / T)` with `params = [T]`.

wit_bindgen::generate!({ path: "../../wit", world: "calibration-plugin" });

use decide::plugin::types::{LabelledScores, PluginError, PluginInfo};
use decide_guest_common::{temperature as t, Error};
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
            name: "temperature".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "softmax(scores / T); T fitted by golden-section search on the mean NLL."
                .into(),
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
