//! `bias-temperature`: `softmax(scores / T + b)` with `params = [T, b_0 = 0, b_1, ...]`, one bias per label position, fitted together with T (see decide_guest_common::bias_temperature).

decide_guest_common::calibration_plugin! {
    module: bias_temperature,
    name: "bias-temperature",
    description: "softmax(scores / T + b): a temperature and one bias per label position (A, B, ...), fitted together by Newton on the mean NLL; addresses label bias.",
}
