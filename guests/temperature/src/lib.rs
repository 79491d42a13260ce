//! `temperature`: the default calibration policy, `softmax(scores / T)` with `params = [T]`.

decide_guest_common::calibration_plugin! {
    module: temperature,
    name: "temperature",
    description: "softmax(scores / T); T fitted by golden-section search on the mean NLL.",
}
