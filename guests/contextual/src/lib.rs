//! `contextual`: contextual calibration, `softmax((s - s_cf) / T)` with `params = [T]`, where
//! `s_cf` are the content-free scores the host reads over the neutral states this plugin names
//! (world `contextual-calibration-plugin`, contract 0.1.1; see decide_guest_common::contextual).

decide_guest_common::calibration_plugin! {
    module: contextual,
    name: "contextual",
    description: "Divides out the label prior read over neutral states: softmax((s - s_cf) / T); T fitted by golden-section search on the mean NLL.",
    neutral_states: true,
}
